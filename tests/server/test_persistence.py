"""SQLite persistence: acknowledged edits survive a SIGKILL and a restart; the store contract in-process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from flowsteer_mcp.canvas.actions import AddStage
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint
from flowsteer_mcp.canvas.execution import NoRunner
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.workbench import Workbench
from flowsteer_mcp.store.base import open_store
from flowsteer_mcp.store.sqlite import SQLiteStore
from operators.registry import OperatorRegistry
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import REPO_ROOT, HttpServerProcess, ToolCaller, http_client, server_command, server_env

TOKEN = "persist-token"


def durable_view(detail: dict[str, Any]) -> dict[str, Any]:
    return {
        "graph": detail["graph"],
        "state": detail["state"],
        "history_length": detail["history_length"],
        "last_feedback": detail["last_feedback"],
        "end": detail["end"],
        "task": detail["task"],
        "options": detail["options"],
    }


@pytest.mark.slow
async def test_acknowledged_edits_survive_sigkill_and_restart(tmp_path: Path) -> None:
    database = tmp_path / "workflows.sqlite"
    args = ("--no-executor", "--store", f"sqlite:{database}")
    env = {"FLOWSTEER_MCP_TOKEN": TOKEN}
    with HttpServerProcess(*args, env=env) as first:
        async with http_client(first.url, TOKEN) as client:
            tools = ToolCaller(client)
            kept = await tools.create("What is 17 * 23?", task_type="math", options={"max_rounds": 30})
            finished = await tools.create("Say hi.", options={"finish": "relaxed"})
            dropped = await tools.create("Temporary.")
            steps = [
                await tools.act(kept, "<action>add</action><operator>Plan</operator>"),
                await tools.act(kept, "Split the product into partial products."),
                await tools.ok(
                    "add_structure", workflow_id=kept, structure="parallel", operators=["Programmer", "Custom"]
                ),
                await tools.ok("set_prompt", workflow_id=kept, node_id="node_2_p0", prompt="Compute it in Python."),
                await tools.act(kept, "this turn is not an action"),
                await tools.ok("add_operator", workflow_id=kept, operator="Format"),
                await tools.ok("delete_node", workflow_id=kept, node_id="node_3"),
                await tools.act(
                    kept,
                    "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>",
                ),
                await tools.act(kept, "Check the product independently."),
            ]
            await tools.ok("add_operator", workflow_id=finished, operator="Custom")
            await tools.ok("finish", workflow_id=finished)
            await tools.ok("delete_workflow", workflow_id=dropped)
            last = steps[-1]
            first.kill()  # right after the last acknowledged edit: no graceful shutdown
    assert last["state"]["awaiting_prompt_for"]["node_id"] == "node_4_fail"  # a pending prompt turn is state too
    assert last["state"]["dsl"] == "Plan -> [Programmer, Custom]"

    with HttpServerProcess(*args, env=env) as second:
        async with http_client(second.url, TOKEN) as client:
            tools = ToolCaller(client)
            listed = {w["workflow_id"]: w["status"] for w in (await tools.ok("list_workflows"))["workflows"]}
            assert listed == {kept: "awaiting_prompt", finished: "finished"}
            detail = await tools.detail(kept)
            assert detail["state"] == last["state"]
            assert detail["history_length"] == len(steps)
            assert detail["last_feedback"] == last["feedback"]
            prompts = {n["id"]: n["prompt"] for n in detail["state"]["nodes"]}
            assert prompts["node_1"] == "Split the product into partial products."
            assert prompts["node_2_p0"] == "Compute it in Python."
            assert detail["options"]["max_rounds"] == 30
            done = await tools.detail(finished)
            assert done["end"]["reason"] == "finished" and done["state"]["status"] == "finished"
            # the restored workflow carries on where it stopped: the pending prompt, then fresh ids
            step = await tools.act(kept, "If the check failed, recompute the product.")
            assert step["state"]["dsl"] == "Plan -> [Programmer, Custom] -> Verify ? Revise : done"
            step = await tools.ok("add_operator", workflow_id=kept, operator="Format")
            assert step["state"]["nodes"][-1]["id"] == "node_5"
            before_stop = await tools.detail(kept)
    with HttpServerProcess(*args, env=env) as third:  # and a graceful stop loses nothing either
        async with http_client(third.url, TOKEN) as client:
            assert durable_view(await ToolCaller(client).detail(kept)) == durable_view(before_stop)


@pytest.mark.slow
def test_unknown_store_is_a_clear_startup_error() -> None:
    command = server_command("--no-executor", "--store", "redis://localhost")
    finished = subprocess.run(command, cwd=REPO_ROOT, env=server_env(), capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2
    assert "unknown store 'redis://localhost'" in finished.stderr


async def test_server_restart_in_process_keeps_every_edit(tmp_path: Path, registry: OperatorRegistry) -> None:
    database = tmp_path / "nested" / "wf.sqlite"

    def server() -> Any:
        return build_server(ServerSettings(), registry=registry, runner=ScriptedRunner(), store=SQLiteStore(database))

    first = server()
    async with Client(first.mcp) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create("What is 17 * 23?")
        await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom", prompt="Solve it carefully.")
        await tools.act(
            workflow_id,
            "<action>add</action><structure>loop</structure><operators>Verify, Revise</operators><count>2</count>",
        )
        await tools.act(workflow_id, "Check the result.")
        await tools.error("delete_node", workflow_id=workflow_id, node_id="node_9")
        before = await tools.detail(workflow_id)
    await first.aclose()

    second = server()
    async with Client(second.mcp) as client:
        tools = ToolCaller(client)
        after = await tools.detail(workflow_id)
        assert durable_view(after) == durable_view(before)
        assert after["last_execution"] == before["last_execution"]
        assert after["state"]["awaiting_prompt_for"]["node_id"] == "node_2_l1"
        assert after["history_length"] == 3
    await second.aclose()


async def test_workbench_restart_on_sqlite_keeps_committed_state_only(
    tmp_path: Path, registry: OperatorRegistry
) -> None:
    path = tmp_path / "bench.sqlite"
    store = SQLiteStore(path)
    bench = Workbench(store, registry, NoRunner(), max_workflows=10, ttl_s=60)
    workflow_id, _ = await bench.create(CanvasState(task=TaskSpec(problem="What is 17 * 23?")))
    async with bench.open(workflow_id) as canvas:
        await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Custom", prompt="Solve it carefully.")))
    with pytest.raises(RuntimeError, match="crash mid-edit"):
        async with bench.open(workflow_id) as canvas:
            await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Format")))
            raise RuntimeError("crash mid-edit")
    await store.close()

    reopened = SQLiteStore(path)
    try:
        restarted = Workbench(reopened, registry, NoRunner(), max_workflows=10, ttl_s=60)
        async with restarted.open(workflow_id, write=False) as canvas:
            assert [n.operator for n in canvas.state.graph.iter_operator_nodes()] == ["Custom"]
            assert canvas.state.graph.stages[0].prompt == "Solve it carefully."  # type: ignore[union-attr]
            assert canvas.state.rounds_used == 1 and len(canvas.state.history) == 1
    finally:
        await reopened.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [("sqlite:", "sqlite store needs a path"), ("mysql://db", "unknown store 'mysql://db'")],
)
def test_open_store_rejects_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_store(url)


def test_a_postgresql_store_without_psycopg_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "flowsteer_mcp.store.postgres", raising=False)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the `postgres` extra were not installed
    with pytest.raises(ValueError, match=r"needs psycopg .*pip install 'flowsteer-mcp\[postgres\]'"):
        open_store("postgresql://flowsteer@db.example/workflows")
