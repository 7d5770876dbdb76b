"""The measured workflow library over MCP: listed with its evidence, started by name, solved in one call."""

from __future__ import annotations

import json
from typing import Any

from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.library import DEFAULT_WORKFLOW, LIBRARY
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller

ADD = "Write add(a, b) that returns a + b."
TESTS = "assert add(1, 2) == 3"


async def test_the_library_is_listed_per_task_type_with_its_measurements(tools: ToolCaller) -> None:
    listing = await tools.ok("list_library")
    by_type = {section["task_type"]: section for section in listing["task_types"]}
    assert set(by_type) == set(LIBRARY)
    code = by_type["code"]
    assert code["default"] == DEFAULT_WORKFLOW["code"] == "direct8-redraw"
    entries = {entry["name"]: entry for entry in code["entries"]}
    assert set(entries) == set(LIBRARY["code"])
    default = entries["direct8-redraw"]
    assert default["default"] is True and default["dsl"] == "Programmer{8|redraw} -> ScEnsemble"
    full = [m for m in default["measurements"] if m["n"] >= 82]
    assert {m["dataset"] for m in full} == {"humaneval", "mbpp"}
    assert all(m["score"] > m["direct_score"] and m["tokens"] > m["direct_tokens"] for m in full)
    assert entries["plan-sample-exec"]["measurements"] == [], "never measured: said so, not invented"
    only_math = await tools.ok("list_library", task_type="math")
    assert [section["task_type"] for section in only_math["task_types"]] == ["math"]

    resource = await tools.client.read_resource("flowsteer://library")
    document = json.loads(resource.contents[0].text)  # type: ignore[union-attr]
    assert document == listing


async def test_create_workflow_starts_from_a_library_entry_by_name(tools: ToolCaller, runner: ScriptedRunner) -> None:
    created = await tools.ok(
        "create_workflow", task=ADD, task_type="code", entry_point="add", public_tests=TESTS, library_workflow="default"
    )
    assert created["state"]["dsl"] == "Programmer{8|redraw} -> ScEnsemble" and created["state"]["round"] == 0
    assert runner.calls == [], "created, not run"
    named = await tools.ok("create_workflow", task="What is 6 * 7?", task_type="math", library_workflow="pot4-vote")
    assert named["state"]["dsl"] == "Programmer{4} -> ScEnsemble"
    detail = await tools.detail(named["workflow_id"])
    prompts = [stage.get("prompt") for stage in detail["graph"]["stages"]]
    assert prompts[0] == "Compute the answer exactly in solve() and return it.", "prompts come with the entry"

    wrong_type = await tools.error(
        "create_workflow", task="What is 6 * 7?", task_type="math", library_workflow="direct8-exec"
    )
    assert "no workflow 'direct8-exec' for task type 'math'" in wrong_type and "direct-sc8" in wrong_type
    assert len(await tools.ok("list_workflows")) == 1 and len((await tools.ok("list_workflows"))["workflows"]) == 2


async def test_solve_answers_in_one_call_with_the_workflow_trace_usage_and_measurements(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    def answer(graph: WorkflowGraph, task: TaskSpec) -> str:
        return "42"

    runner.answer = answer
    solved = await tools.ok("solve", task="What is 6 * 7?", task_type="math")
    assert (solved["workflow"], solved["dsl"], solved["answer"], solved["status"]) == (
        "direct-sc8",
        "Custom{8} -> ScEnsemble",
        "42",
        "ok",
    )
    assert solved["director"] == "library" and solved["error"] is None
    assert solved["usage"]["tokens"] == sum(row["tokens"] for row in solved["trace"]) > 0
    assert [row["node_id"] for row in solved["trace"]] == ["node_1", "node_2"]
    assert solved["measured"] and all(m["dataset"] == "gsm8k" for m in solved["measured"])
    assert runner.dsls == ["Custom{8} -> ScEnsemble"], "one run"
    detail = await tools.detail(solved["workflow_id"])
    assert detail["end"]["final_answer"] == "42" and detail["state"]["status"] == "finished"


async def test_solve_runs_as_a_background_job_like_any_long_call(tools: ToolCaller, runner: ScriptedRunner) -> None:
    runner.hold_s = 0.3
    job = await tools.ok(
        "start_job", name="solve", arguments={"task": ADD, "entry_point": "add", "public_tests": TESTS}
    )
    assert job["workflow_id"] is None
    done: dict[str, Any] = await tools.ok("get_job", job_id=job["job_id"], wait_s=20)
    assert done["status"] == "completed", done
    assert done["result"]["task_type"] == "code" and done["result"]["workflow"] == "direct8-redraw"
    unknown = await tools.error("solve", task=ADD, task_type="code", workflow="no-such-workflow")
    assert "no workflow 'no-such-workflow' for task type 'code'" in unknown
