"""A workflow pays for what it runs: memoised calls are reused within a workflow, never across workflows
(unless the engine is told `memo_scope = "server"`), so per-episode costs in an evaluation are honest. Under
`memo_scope = "charged"` workflows share calls, and each pays once what a shared call cost."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from flowsteer_mcp.engine import MemoCache, WorkflowEngine
from flowsteer_mcp.engine.memo_store import MemoStore
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.backends.config import MemoScope
from operators.backends.scripted import ScriptedBackend
from operators.registry import OperatorRegistry
from tests.support.servers import ToolCaller


async def runs(registry: OperatorRegistry, memo_scope: MemoScope) -> list[tuple[int, int]]:
    """(tokens, cache hits) of: workflow A run twice, then workflow B, identical to A, run once."""
    backend = ScriptedBackend(rules=[lambda request: "The answer is \\boxed{42}."])
    engine = WorkflowEngine(registry, backend, memo_scope=memo_scope)
    server = build_server(ServerSettings(), registry=registry, runner=engine, store=MemoryStore())
    seen: list[tuple[int, int]] = []
    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        first, second = [
            (
                await tools.ok(
                    "import_workflow", spec="Custom{4} -> ScEnsemble", task="What is 6 * 7?", task_type="math"
                )
            )["workflow_id"]
            for _ in range(2)
        ]
        for workflow_id in (first, first, second):
            execution = (await tools.ok("run_workflow", workflow_id=workflow_id))["execution"]
            seen.append((execution["tokens"], execution["cache_hits"]))
    return seen


@pytest.mark.parametrize("memo_scope", ["workflow", "server", "charged"])
async def test_memoised_calls_are_shared_only_within_their_scope(
    registry: OperatorRegistry, memo_scope: MemoScope
) -> None:
    (fresh, _), (rerun, rerun_hits), (other, other_hits) = await runs(registry, memo_scope)
    assert fresh > 0 and (rerun, rerun_hits) == (0, 5), "a rerun of the same workflow reuses every call"
    if memo_scope in ("workflow", "charged"):
        assert (other, other_hits) == (fresh, 0), "an identical workflow pays for its own calls"
    else:
        assert (other, other_hits) == (0, 5), "shared across the server"


async def concurrent_runs(registry: OperatorRegistry, memo_scope: MemoScope, count: int) -> tuple[list[int], int]:
    """Tokens charged to each of `count` identical workflows run at once, and the requests the executor got."""
    backend = ScriptedBackend(rules=[lambda request: "The answer is \\boxed{42}."])
    engine = WorkflowEngine(registry, backend, memo_scope=memo_scope)
    server = build_server(ServerSettings(), registry=registry, runner=engine, store=MemoryStore())
    tokens = [0] * count
    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        ids = [
            (
                await tools.ok(
                    "import_workflow", spec="Custom{4} -> ScEnsemble", task="What is 6 * 7?", task_type="math"
                )
            )["workflow_id"]
            for _ in range(count)
        ]

        async def run(position: int) -> None:
            tokens[position] = (await tools.ok("run_workflow", workflow_id=ids[position]))["execution"]["tokens"]

        async with anyio.create_task_group() as group:
            for position in range(count):
                group.start_soon(run, position)
    return tokens, len(backend.requests)


async def test_charged_scope_makes_each_call_once_and_charges_every_workflow(registry: OperatorRegistry) -> None:
    """Identical workflows run at the same time: the executor answers each call once (the others wait for it
    instead of repeating it), and every workflow reports the full cost, as it would have paid alone."""
    [alone], requests_alone = await concurrent_runs(registry, "workflow", 1)
    tokens, requests = await concurrent_runs(registry, "charged", 3)
    assert alone > 0 and tokens == [alone] * 3
    assert requests == requests_alone
    _, requests_unshared = await concurrent_runs(registry, "workflow", 3)
    assert requests_unshared == 3 * requests_alone


async def test_a_memo_file_shares_calls_with_a_later_process_and_still_charges_them(
    registry: OperatorRegistry, tmp_path: Path
) -> None:
    """A second engine on the same memo file (what a resumed evaluation runs) makes none of the calls the first
    made, and its workflow is charged what they cost, as under `charged` in one process."""
    path = tmp_path / "memo.sqlite"
    seen: list[tuple[int, int]] = []
    for _ in range(2):
        backend = ScriptedBackend(rules=[lambda request: "The answer is \\boxed{42}."])
        store = MemoStore(path)
        engine = WorkflowEngine(registry, backend, memo=MemoCache(store=store), memo_scope="charged")
        server = build_server(ServerSettings(), registry=registry, runner=engine, store=MemoryStore())
        async with Client(server.mcp) as client:
            tools = ToolCaller(client)
            created = await tools.ok(
                "import_workflow", spec="Custom{4} -> ScEnsemble", task="What is 6 * 7?", task_type="math"
            )
            execution = (await tools.ok("run_workflow", workflow_id=created["workflow_id"]))["execution"]
        store.close()
        seen.append((execution["tokens"], len(backend.requests)))
    (tokens, requests), (later_tokens, later_requests) = seen
    assert tokens > 0 and requests > 0
    assert (later_tokens, later_requests) == (tokens, 0)
