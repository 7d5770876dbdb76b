"""Server limits, idle expiry (TTL, with a fake clock), per-workflow serialisation, cancellation safety, and
hostile input (huge numbers, invalid Unicode, oversized fields, a big import that must not stall others)."""

from __future__ import annotations

import threading

import anyio
import pytest
from mcp import MCPError

from flowsteer_mcp.canvas.execution import NoRunner
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasLimits, TaskSpec
from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.server import ServerSettings
from flowsteer_mcp.server.workbench import Workbench, WorkbenchFull, WorkflowNotFound
from flowsteer_mcp.store.memory import MemoryStore
from flowsteer_mcp.store.sqlite import SQLiteStore
from operators.registry import OperatorRegistry
from tests.server.conftest import Connect
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller


class FakeClock:
    """A monotonic clock the test advances by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def new_state(problem: str = "What is 17 * 23?") -> CanvasState:
    return CanvasState(task=TaskSpec(problem=problem))


async def test_max_workflows(connect: Connect) -> None:
    async with connect(ServerSettings(max_workflows=2)) as tools:
        first = await tools.create()
        await tools.create()
        message = await tools.error("create_workflow", task="One too many.")
        assert "already holds 2 workflows" in message and "delete_workflow" in message
        message = await tools.error("import_workflow", spec="Plan", task="One too many.")
        assert "already holds 2 workflows" in message
        assert len((await tools.ok("list_workflows"))["workflows"]) == 2
        await tools.ok("delete_workflow", workflow_id=first)
        assert await tools.create()


async def test_prompt_and_act_limits_come_from_the_server_settings(connect: Connect) -> None:
    limits = CanvasLimits(max_prompt_chars=40, max_act_chars=200)
    async with connect(ServerSettings(limits=limits)) as tools:
        workflow_id = await tools.create()
        before = await tools.snapshot(workflow_id)
        message = await tools.error("add_operator", workflow_id=workflow_id, operator="Plan", prompt="p" * 41)
        assert "Prompt is too long (41 characters); the limit is 40" in message
        message = await tools.error("act", workflow_id=workflow_id, text="<action>add</action>" + " " * 181)
        assert "201 characters; the limit is 200" in message
        assert await tools.snapshot(workflow_id) == before
        await tools.act(workflow_id, "<action>add</action><operator>Plan</operator>")
        step = await tools.act(workflow_id, "q" * 41)
        assert step["ok"] is False and step["error_code"] == "invalid_prompt"
        assert step["state"]["awaiting_prompt_for"]["node_id"] == "node_1"
        step = await tools.act(workflow_id, "q" * 40)
        assert step["ok"] is True and step["state"]["nodes"][0]["prompt"] == "q" * 40


async def test_idle_workflows_expire_from_a_memory_store(registry: OperatorRegistry) -> None:
    clock = FakeClock()
    bench = Workbench(MemoryStore(), registry, NoRunner(), max_workflows=10, ttl_s=60, clock=clock)
    idle, _ = await bench.create(new_state("idle"))
    busy, _ = await bench.create(new_state("busy"))
    clock.advance(45)
    async with bench.open(busy) as canvas:  # touching a workflow keeps it alive
        assert canvas.state.task.problem == "busy"
    clock.advance(20)
    assert await bench.sweep() == 1
    assert [r.workflow_id for r in await bench.list()] == [busy]
    with pytest.raises(WorkflowNotFound):
        async with bench.open(idle):
            pass
    clock.advance(61)
    assert [r.workflow_id for r in await bench.list()] == []  # list sweeps first


async def test_expiry_frees_room_for_new_workflows(registry: OperatorRegistry) -> None:
    clock = FakeClock()
    bench = Workbench(MemoryStore(), registry, NoRunner(), max_workflows=1, ttl_s=60, clock=clock)
    await bench.create(new_state())
    with pytest.raises(WorkbenchFull):
        await bench.create(new_state())
    clock.advance(61)
    workflow_id, _ = await bench.create(new_state("after expiry"))
    assert [r.workflow_id for r in await bench.list()] == [workflow_id]


async def test_a_workflow_in_use_never_expires_under_its_holder(registry: OperatorRegistry) -> None:
    clock = FakeClock()
    bench = Workbench(MemoryStore(), registry, NoRunner(), max_workflows=10, ttl_s=60, clock=clock)
    workflow_id, _ = await bench.create(new_state())
    async with bench.open(workflow_id) as canvas:
        clock.advance(500)
        assert await bench.sweep() == 0
        canvas.state.rounds_used = 3
    async with bench.open(workflow_id, write=False) as canvas:
        assert canvas.state.rounds_used == 3


async def test_persistent_workflows_are_only_evicted_from_the_cache(
    registry: OperatorRegistry, tmp_path: object
) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "wf.sqlite")
    bench = Workbench(store, registry, NoRunner(), max_workflows=10, ttl_s=60, clock=clock)
    try:
        workflow_id, _ = await bench.create(new_state("kept on disk"))
        clock.advance(61)
        assert await bench.sweep() == 1
        async with bench.open(workflow_id, write=False) as canvas:
            assert canvas.state.task.problem == "kept on disk"
    finally:
        await store.close()


async def test_concurrent_calls_on_one_workflow_are_serialised(tools: ToolCaller, runner: ScriptedRunner) -> None:
    runner.hold_s = 0.02
    workflow_id = await tools.create(options={"max_rounds": 50})
    results: list[dict[str, object]] = []

    async def act(k: int) -> None:
        text = f"<action>add</action><operator>Custom</operator><prompt>Variant number {k} of the solver.</prompt>"
        results.append(await tools.act(workflow_id, text))

    async def typed(k: int) -> None:
        results.append(
            await tools.ok("add_operator", workflow_id=workflow_id, operator="Plan", prompt=f"Plan {k:02d} steps.")
        )

    async with anyio.create_task_group() as group:
        for k in range(6):
            group.start_soon(act, k)
            group.start_soon(typed, k)
    assert runner.max_active == 1, "two runs of the same workflow overlapped"
    rounds = sorted(r["state"]["round"] for r in results)  # type: ignore[index]
    assert rounds == list(range(1, 13))
    detail = await tools.detail(workflow_id)
    assert detail["state"]["round"] == 12 and detail["history_length"] == 12
    ids = [n["id"] for n in detail["state"]["nodes"]]
    assert sorted(ids, key=lambda i: int(i.split("_")[1])) == [f"node_{k}" for k in range(1, 13)]
    prompts = sorted(n["prompt"] for n in detail["state"]["nodes"])
    assert prompts == sorted(
        [f"Variant number {k} of the solver." for k in range(6)] + [f"Plan {k:02d} steps." for k in range(6)]
    )
    # every step saw the graph the previous step left: its DSL has exactly `round` stages
    for result in results:
        state = result["state"]
        assert isinstance(state, dict)
        assert len(state["dsl"].split(" -> ")) == state["round"]


async def test_different_workflows_run_concurrently_without_leaking(tools: ToolCaller, runner: ScriptedRunner) -> None:
    runner.hold_s = 0.05
    operators = ["Plan", "Custom", "Programmer", "Review"]
    workflow_ids = [await tools.create(f"Task {k}") for k in range(len(operators))]

    async def edit(workflow_id: str, operator: str) -> None:
        for _ in range(2):
            await tools.ok("add_operator", workflow_id=workflow_id, operator=operator)

    async with anyio.create_task_group() as group:
        for workflow_id, operator in zip(workflow_ids, operators, strict=True):
            group.start_soon(edit, workflow_id, operator)
    assert runner.max_active > 1, "different workflows should not wait for each other"
    for workflow_id, operator in zip(workflow_ids, operators, strict=True):
        assert await tools.dsl(workflow_id) == f"{operator} -> {operator}"
    for call in runner.calls:
        names = set(call.dsl.split(" -> "))
        assert len(names) == 1, f"a run mixed two workflows: {call.dsl}"
        assert call.task.problem == f"Task {operators.index(names.pop())}"


async def test_a_cancelled_call_leaves_the_workflow_unchanged(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create()
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    before = await tools.snapshot(workflow_id)
    runner.hold_s = 30
    with pytest.raises(MCPError):
        await tools.client.call_tool(
            "add_operator", {"workflow_id": workflow_id, "operator": "Format"}, read_timeout_seconds=0.3
        )
    runner.hold_s = 0
    assert await tools.snapshot(workflow_id) == before
    step = await tools.ok("add_operator", workflow_id=workflow_id, operator="Format")
    assert step["state"]["round"] == before["round"] + 1
    assert [n["id"] for n in step["state"]["nodes"]] == ["node_1", "node_2"]


# ----- hostile input at the tool boundary (issue #14) ----------------------------------------------------
@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"task": "What is 6*7?\ud800"}, "invalid_text: `task` contains an unpaired surrogate"),
        ({"entry_point": "solve it"}, "entry_point must be a Python identifier"),
        ({"entry_point": "x" * 101}, "`entry_point` is 101 characters; the limit is 100"),
        ({"public_tests": "assert True\n" * 10_000}, "`public_tests` is 120000 characters; the limit is 8000"),
    ],
)
async def test_task_fields_are_bounded_and_checked(tools: ToolCaller, arguments: dict[str, str], fragment: str) -> None:
    arguments = {"task": "Implement solve.", **arguments}
    message = await tools.error("create_workflow", **arguments)
    assert fragment in message and len(message) < 600, message[:300]
    message = await tools.error("import_workflow", spec="Plan", **arguments)
    assert fragment in message
    assert (await tools.ok("list_workflows"))["workflows"] == []


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("(Plan) * " + "9" * 5000, "loop count at position 9 has more than 6 digits"),
        ('{"format": "flowsteer.workflow/v1", "dsl": "Plan", "graph": {"stages": [{"kind": "operator", '
         '"id": "node_' + "9" * 5000 + '", "operator": "Plan"}], "next_index": 2}}', "Invalid workflow JSON"),
        ('{"format": "flowsteer.workflow/v1", "dsl": "", "graph": {"stages": [], "next_index": '
         + "9" * 4300 + "}}", "graph.next_index"),
        ("Plan -> Custom\ud800", "invalid_text: `spec` contains an unpaired surrogate"),
    ],
)  # fmt: skip
async def test_import_rejects_hostile_numbers_and_text_with_a_clear_error(
    tools: ToolCaller, spec: str, fragment: str
) -> None:
    message = await tools.error("import_workflow", spec=spec, task="What is 6*7?")
    assert fragment in message and len(message) < 600, message[:300]
    assert (await tools.ok("list_workflows"))["workflows"] == []


async def test_act_with_an_unpaired_surrogate_changes_nothing(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    before = await tools.snapshot(workflow_id)
    text = "<action>add</action><operator>Plan</operator><prompt>Use \ud800 steps.</prompt>"
    message = await tools.error("act", workflow_id=workflow_id, text=text)
    assert (
        "invalid_text" in message
        and f"unpaired surrogate (invalid Unicode) at index {text.index(chr(0xD800))}" in message
    )
    assert await tools.snapshot(workflow_id) == before
    step = await tools.act(workflow_id, "<action>add</action><operator>Plan</operator><prompt>Use steps.</prompt>")
    assert step["ok"] is True and step["state"]["round"] == 1


async def test_finish_answer_is_bounded(tools: ToolCaller) -> None:
    workflow_id = await tools.create(options={"finish": "relaxed"})
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    before = await tools.snapshot(workflow_id)
    message = await tools.error("finish", workflow_id=workflow_id, answer="4" * 10_001)
    assert "`answer` is 10001 characters; the limit is 10000" in message
    assert await tools.snapshot(workflow_id) == before


async def test_a_big_import_does_not_block_other_clients(tools: ToolCaller, monkeypatch: pytest.MonkeyPatch) -> None:
    """While one import is parsing, list_operators still answers: the parse runs off the event loop."""
    from flowsteer_mcp.server import toolkit as tool_module

    parsing = threading.Event()
    listed = threading.Event()
    outcome: dict[str, bool] = {}
    real_import = tool_module.import_dsl

    def slow_import(text: str, rules: CanvasRules) -> WorkflowGraph:
        parsing.set()
        # On the event loop this wait would block list_operators until it timed out.
        outcome["listed_during_parse"] = listed.wait(timeout=5)
        return real_import(text, rules)

    monkeypatch.setattr(tool_module, "import_dsl", slow_import)

    async def list_while_parsing() -> None:
        assert await anyio.to_thread.run_sync(lambda: parsing.wait(timeout=5)), "the import never started parsing"
        catalog = await tools.ok("list_operators")
        assert catalog["operators"]
        listed.set()

    async with anyio.create_task_group() as group:
        group.start_soon(list_while_parsing)
        created = await tools.ok("import_workflow", spec="Plan -> Custom", task="What is 6*7?")
    assert outcome == {"listed_during_parse": True}
    assert created["state"]["dsl"] == "Plan -> Custom"
