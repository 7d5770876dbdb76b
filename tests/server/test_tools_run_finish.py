"""run_workflow (with progress notifications), finish (the gate's presets), and the no-executor mode."""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest
from mcp.types import TextContent

from flowsteer_mcp.canvas.execution import ProgressEvent
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller, result_text

FULL_DSL = "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format"


async def build_full(tools: ToolCaller, **create: Any) -> str:
    workflow_id = await tools.create(**create)
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Plan")
    await tools.ok("add_structure", workflow_id=workflow_id, structure="parallel", operators=["Programmer", "Custom"])
    await tools.ok("add_operator", workflow_id=workflow_id, operator="ScEnsemble")
    await tools.ok(
        "add_structure", workflow_id=workflow_id, structure="conditional", condition="Verify", on_fail="Revise"
    )
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Format")
    assert await tools.dsl(workflow_id) == FULL_DSL
    return workflow_id


def seconds_blanked(message: str | None) -> str:
    """Durations depend on the machine; the rest of a progress message must not."""
    return re.sub(r"\d+ s\b", "N s", message or "")


def answer(text: str) -> Any:
    def scripted(graph: WorkflowGraph, task: TaskSpec) -> str:
        return text

    return scripted


Progress = tuple[float, float | None, str | None]


def progress_recorder() -> tuple[list[Progress], Any]:
    events: list[Progress] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append((progress, total, message))

    return events, on_progress


def assert_strictly_increasing(events: list[Progress]) -> None:
    """The MCP spec: `progress` increases with every notification of a request, and never passes `total`."""
    values = [progress for progress, _, _ in events]
    assert values == sorted(set(values)), f"progress must strictly increase: {values}"
    assert all(total is None or progress <= total for progress, total, _ in events), events


async def test_run_workflow_streams_progress_per_operator_node(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create()
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Plan")
    await tools.ok("add_structure", workflow_id=workflow_id, structure="parallel", operators=["Programmer", "Custom"])
    before = await tools.snapshot(workflow_id)
    events, on_progress = progress_recorder()

    result = await tools.client.call_tool("run_workflow", {"workflow_id": workflow_id}, progress_callback=on_progress)
    assert not result.is_error, result_text(result)
    assert [(progress, total, seconds_blanked(message)) for progress, total, message in events] == [
        (1, 6, "running node_1 (Plan) for N s; 0 of 3 operator calls done; N s elapsed"),
        (2, 6, "run_workflow; 1 of 3 operator calls done; N s elapsed"),
        (3, 6, "running node_2_p0 (Programmer) for N s; 1 of 3 operator calls done; N s elapsed"),
        (4, 6, "run_workflow; 2 of 3 operator calls done; N s elapsed"),
        (5, 6, "running node_2_p1 (Custom) for N s; 2 of 3 operator calls done; N s elapsed"),
        (6, 6, "run_workflow; 3 of 3 operator calls done; N s elapsed"),
    ]
    assert_strictly_increasing(events)
    run = result.structured_content
    assert run is not None
    assert run["execution"]["ok"] is True and run["execution"]["output"] == "Plan -> [Programmer, Custom]"
    assert (run["execution"]["llm_calls"], run["execution"]["tokens"]) == (3, 30)
    assert [t["node_id"] for t in run["trace"]] == ["node_1", "node_2_p0", "node_2_p1"]
    after = await tools.snapshot(workflow_id)
    assert after == before, "running uses no round and changes no graph"
    assert runner.dsls[-1] == "Plan -> [Programmer, Custom]"


async def test_edits_report_progress_too(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    events, on_progress = progress_recorder()

    text = "<action>add</action><operator>Custom</operator><prompt>Solve it carefully.</prompt>"
    result = await tools.client.call_tool(
        "act", {"workflow_id": workflow_id, "text": text}, progress_callback=on_progress
    )
    assert not result.is_error
    assert [seconds_blanked(message) for _, _, message in events] == [
        "running node_1 (Custom) for N s; 0 of 1 operator calls done; N s elapsed",
        "act; 1 of 1 operator calls done; N s elapsed",
    ]
    assert_strictly_increasing(events)


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("finish", {}),
        ("act", {"text": "<action>finish</action>"}),
    ],
)
async def test_a_finish_that_executes_reports_progress(
    tools: ToolCaller, runner: ScriptedRunner, tool: str, arguments: dict[str, str]
) -> None:
    workflow_id = await tools.create(options={"finish": "relaxed", "execute_each_step": False})
    await tools.ok("add_structure", workflow_id=workflow_id, structure="parallel", operators=["Programmer", "Custom"])
    events, on_progress = progress_recorder()

    result = await tools.client.call_tool(
        tool, {"workflow_id": workflow_id, **arguments}, progress_callback=on_progress
    )
    assert not result.is_error, result_text(result)
    assert runner.dsls == ["[Programmer, Custom]"], "finish ran the workflow, which had not run yet"
    assert [progress for progress, _, _ in events] == [1, 2, 3, 4]
    assert_strictly_increasing(events)


async def test_progress_numbers_events_even_when_parallel_branches_start_together() -> None:
    """The engine reports a parallel stage as started, started, finished, finished: `completed` repeats."""
    from flowsteer_mcp.server.activity import RunActivity
    from flowsteer_mcp.server.progress import ToolProgress

    sent: list[Progress] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        sent.append((progress, total, message))

    progress = ToolProgress(report, RunActivity(phase="run_workflow"))
    for node, phase, completed in [("p0", "started", 0), ("p1", "started", 0), ("p0", "finished", 1)]:
        await progress(ProgressEvent(node_id=node, operator="Custom", phase=phase, completed=completed, total=2))
    await progress(ProgressEvent(node_id="p1", operator="Custom", phase="finished", completed=2, total=2))
    await progress(ProgressEvent(node_id="extra", operator="Custom", phase="started", completed=2, total=2))
    assert [(p, t) for p, t, _ in sent] == [(1, 4), (2, 4), (3, 4), (4, 4), (5, 5)]
    await progress(ProgressEvent(node_id="unknown", operator="Custom", phase="started", completed=0, total=0))
    assert sent[-1][:2] == (6, None), "no plan, no total"


async def test_heartbeats_between_events_say_what_runs_and_keep_progress_increasing() -> None:
    """A model call can take minutes: beats repeat the activity with values between two events' numbers."""
    from flowsteer_mcp.server.activity import RunActivity
    from flowsteer_mcp.server.progress import ToolProgress

    now = [0.0]
    sent: list[Progress] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        sent.append((progress, total, message))

    progress = ToolProgress(report, RunActivity(phase="act", clock=lambda: now[0]))
    await progress.beat()  # before the run has planned anything: no total
    started = ProgressEvent(
        node_id="node_1", operator="Programmer", phase="started", completed=0, total=4, draw=2, draws=4, tokens=120
    )
    await progress(started)
    for _ in range(3):
        now[0] += 5.0
        await progress.beat()
    await progress(started.model_copy(update={"phase": "finished", "completed": 1, "llm_calls": 2, "tokens": 900}))
    values = [value for value, _, _ in sent]
    assert values == [0.5, 1, 1.5, 1 + 2 / 3, 1.75, 2]
    assert [total for _, total, _ in sent] == [None, 8, 8, 8, 8, 8]
    assert sent[4][2] == (
        "running node_1 (Programmer) draw 3/4 for 15 s; 0 of 4 operator calls done; "
        "120 tokens in 0 executor calls so far; 15 s elapsed"
    )
    assert sent[5][2] == "act; 1 of 4 operator calls done; 900 tokens in 2 executor calls so far; 15 s elapsed"


async def test_run_of_an_empty_workflow(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create()
    run = await tools.ok("run_workflow", workflow_id=workflow_id)
    assert run["execution"]["status"] == "empty" and run["execution"]["ok"] is False
    assert run["trace"] == [] and runner.calls == []


async def test_executor_failure_is_reported_and_the_episode_continues(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    runner.failure = "executor timed out after 3 retries"
    workflow_id = await tools.create()
    step = await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    assert step["ok"] is True and step["state"]["dsl"] == "Custom"
    assert step["execution"]["ok"] is False and step["execution"]["output"] is None
    assert step["execution"]["error"] == "executor timed out after 3 retries"
    assert "[Execution]: failed" in step["feedback"]
    assert "[Error]: executor timed out after 3 retries" in step["feedback"]
    runner.failure = None
    step = await tools.ok("add_operator", workflow_id=workflow_id, operator="Format")
    assert step["execution"]["ok"] is True and step["execution"]["output"] == "Custom -> Format"


async def test_runner_crash_becomes_a_failed_execution_not_a_tool_error(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    runner.crash = RuntimeError("backend exploded")
    workflow_id = await tools.create()
    step = await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    assert step["state"]["dsl"] == "Custom" and step["state"]["round"] == 1
    assert step["execution"]["status"] == "failed"
    assert step["execution"]["error"] == "executor error: RuntimeError: backend exploded"
    run = await tools.ok("run_workflow", workflow_id=workflow_id)
    assert run["execution"]["error"] == "executor error: RuntimeError: backend exploded"


async def test_no_executor_configured_edits_still_work(registry: OperatorRegistry) -> None:
    from mcp import Client

    server = build_server(ServerSettings(), registry=registry, store=MemoryStore())
    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create(options={"finish": "relaxed"})
        step = await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom", prompt="Solve it carefully.")
        assert step["ok"] is True and step["state"]["dsl"] == "Custom"
        assert step["execution"]["status"] == "no_executor" and step["execution"]["ok"] is False
        assert "no executor configured" in step["execution"]["error"]
        assert "[Execution]: no executor configured" in step["feedback"]
        act = await tools.act(
            workflow_id, "<action>add</action><operator>Format</operator><prompt>Only the answer.</prompt>"
        )
        assert act["state"]["dsl"] == "Custom -> Format"
        run = await tools.ok("run_workflow", workflow_id=workflow_id)
        assert run["execution"]["status"] == "no_executor" and "no executor configured" in run["execution"]["error"]
        done = await tools.ok("finish", workflow_id=workflow_id, answer="42")
        assert done["done"] is True and done["end_reason"] == "finished"
        assert done["final_answer"] is None, "nothing ran, so there is no answer (the claim is not an answer)"


@pytest.mark.parametrize(
    ("stages", "expected", "absent"),
    [
        ([], ["non_empty", "empty", "at least 5"], []),
        (
            ["Plan", "Custom", "Format"],
            ["at least 5", "No structure used", "No checker: add one of Verify, Test, Review"],
            ["No solver"],
        ),
        (
            ["Plan", "Custom", "Verify", "Revise", "Format"],
            ["No structure used"],
            ["at least 5", "No checker", "No solver"],
        ),
        (
            ["Plan", ("parallel", ["Programmer", "Custom"]), "ScEnsemble", "Format"],
            ["No checker"],
            ["at least 5", "No structure"],
        ),
        (
            ["Plan", ("parallel", ["Programmer", "Custom"]), "Verify"],
            ["at least 5"],
            ["No checker", "No structure", "No solver"],
        ),
        (
            ["Plan", ("parallel", ["Plan", "Decompose"]), "Decompose", "Verify"],
            ["No solver: add one of Custom"],
            ["at least 5", "No checker"],
        ),
    ],
)
async def test_paper_finish_rejection_names_the_missing_constraint(
    tools: ToolCaller, runner: ScriptedRunner, stages: list[Any], expected: list[str], absent: list[str]
) -> None:
    runner.answer = answer("391")
    workflow_id = await tools.create()
    for stage in stages:
        if isinstance(stage, tuple):
            await tools.ok("add_structure", workflow_id=workflow_id, structure=stage[0], operators=stage[1])
        else:
            await tools.ok("add_operator", workflow_id=workflow_id, operator=stage)
    before = await tools.snapshot(workflow_id)
    step = await tools.ok("finish", workflow_id=workflow_id, answer="391")
    after = await tools.snapshot(workflow_id)
    assert step["ok"] is False and step["done"] is False
    assert step["error_code"] == "finish_rejected"
    assert step["message"].startswith("Finish rejected:")
    for phrase in expected[1:] if expected[0] == "non_empty" else expected:
        assert phrase in step["message"]
    for phrase in absent:
        assert phrase not in step["message"]
    assert after["graph"] == before["graph"] and after["status"] == "building" and after["end"] is None
    assert after["round"] == before["round"] + 1
    assert after["history_length"] == before["history_length"] + 1


async def test_verbose_output_needs_format_and_code_tests_need_programmer_and_test(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    runner.answer = answer("The answer is 391.\nBecause 17 * 23 = 391.")
    general = await tools.create()
    for operator in ("Plan", "Custom", "Verify", "Revise"):
        await tools.ok("add_operator", workflow_id=general, operator=operator)
    await tools.ok("add_structure", workflow_id=general, structure="loop", operators=["Review"], count=2)
    step = await tools.ok("finish", workflow_id=general)
    assert step["ok"] is False and "The final output is verbose" in step["message"] and "Format" in step["message"]

    code = await tools.create(
        "Write add(a, b).", task_type="code", entry_point="add", public_tests="assert add(1, 2) == 3"
    )
    for operator in ("Plan", "Custom", "Verify", "Revise", "Format"):
        await tools.ok("add_operator", workflow_id=code, operator=operator)
    await tools.ok("add_structure", workflow_id=code, structure="loop", operators=["Review"], count=2)
    step = await tools.ok("finish", workflow_id=code)
    assert (
        step["ok"] is False and "This code task has tests: the workflow needs Programmer and Test." in step["message"]
    )


async def test_paper_finish_accepts_the_full_workflow_and_scores_the_executed_output(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    runner.answer = answer("391")
    workflow_id = await build_full(tools, task_type="math")
    calls = len(runner.calls)
    step = await tools.ok("finish", workflow_id=workflow_id, answer="999")
    assert step["ok"] is True and step["done"] is True
    assert step["end_reason"] == "finished" and step["state"]["status"] == "finished"
    assert step["final_answer"] == "391"
    assert step["state"]["round"] == 6
    assert "[Status]: Finished" in step["feedback"] and "[BLOCK_FINISH]" not in step["feedback"]
    assert len(runner.calls) == calls, "the last edit's execution is reused, not re-run"
    detail = await tools.detail(workflow_id)
    assert detail["end"] == {
        "reason": "finished",
        "round": 6,
        "final_answer": "391",
        "final_code": None,
        "claimed_answer": "999",
    }
    before = await tools.snapshot(workflow_id)
    message = await tools.error("add_operator", workflow_id=workflow_id, operator="Format")
    assert "episode is over (finished)" in message and "create_workflow" in message
    message = await tools.error("act", workflow_id=workflow_id, text="<action>finish</action>")
    assert "episode is over" in message
    assert await tools.snapshot(workflow_id) == before


async def test_relaxed_finish_accepts_one_operator(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create(options={"finish": "relaxed"})
    rejected = await tools.ok("finish", workflow_id=workflow_id)
    assert rejected["ok"] is False and "The workflow is empty" in rejected["message"]
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    step = await tools.ok("finish", workflow_id=workflow_id)
    assert step["done"] is True and step["final_answer"] == "Custom"


async def test_finish_runs_the_workflow_when_it_has_not_run(tools: ToolCaller, runner: ScriptedRunner) -> None:
    workflow_id = await tools.create(options={"finish": "relaxed", "execute_each_step": False})
    step = await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    assert step["execution"] is None and runner.calls == []
    assert "[Execution]: not run yet" in step["feedback"]
    done = await tools.ok("finish", workflow_id=workflow_id)
    assert runner.dsls == ["Custom"]
    assert done["final_answer"] == "Custom"


async def test_a_structurally_rejected_finish_runs_nothing(tools: ToolCaller, runner: ScriptedRunner) -> None:
    """The gate's structural verdict needs no execution: refused at once, however long the workflow would run."""
    runner.hold_s = 30.0  # a run would make this test time out
    workflow_id = await tools.create(options={"execute_each_step": False})  # the paper gate: >= 5 operators
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    with anyio.fail_after(5):
        step = await tools.ok("finish", workflow_id=workflow_id)
    assert step["ok"] is False and step["error_code"] == "finish_rejected"
    assert "at least 5 are required" in step["message"]
    assert runner.calls == [] and step["execution"] is None


async def test_the_output_rule_is_checked_after_the_run_that_finish_makes(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    runner.answer = answer("The answer is 391.\nBecause 17 * 23 = 391.")
    workflow_id = await tools.create(options={"execute_each_step": False})
    for operator in ("Plan", "Custom", "Verify", "Revise"):
        await tools.ok("add_operator", workflow_id=workflow_id, operator=operator)
    await tools.ok("add_structure", workflow_id=workflow_id, structure="loop", operators=["Review"], count=2)
    assert runner.calls == []
    step = await tools.ok("finish", workflow_id=workflow_id)
    assert len(runner.calls) == 1, "the structure passed, so finish ran the workflow to judge its output"
    assert step["ok"] is False and "The final output is verbose" in step["message"]


async def test_failed_final_run_gives_no_answer(tools: ToolCaller, runner: ScriptedRunner) -> None:
    runner.failure = "operator Custom failed"
    workflow_id = await tools.create(options={"finish": "relaxed"})
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    step = await tools.ok("finish", workflow_id=workflow_id, answer="42")
    assert step["done"] is True and step["final_answer"] is None


async def test_finish_via_act_records_the_claim_but_scores_the_output(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    runner.answer = answer("391")
    workflow_id = await build_full(tools)
    early = await tools.create()
    rejected = await tools.act(early, "<action>finish</action><answer>391</answer>")
    assert rejected["ok"] is False and rejected["error_code"] == "finish_rejected"
    assert rejected["state"]["round"] == 1
    step = await tools.act(workflow_id, "<think>done</think>[action]finish[/action][answer]12[/answer]")
    assert step["done"] is True and step["final_answer"] == "391"
    detail = await tools.detail(workflow_id)
    assert detail["end"]["claimed_answer"] == "12"


async def test_tool_error_text_is_the_canvas_message(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    result = await tools.client.call_tool("delete_node", {"workflow_id": workflow_id, "node_id": "node_1"})
    assert result.is_error
    assert isinstance(result.content[0], TextContent)
    assert result.content[0].text == (
        "Error executing tool delete_node: unknown_node: Node 'node_1' not found. "
        "Existing node ids: none (the workflow is empty)."
    )
