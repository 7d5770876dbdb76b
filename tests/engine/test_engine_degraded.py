"""Do no harm in the engine and the canvas (issue 10): a failed last stage keeps the best earlier solution.

The run then reports status `degraded` with the failed stage's error, and its answer counts: finish accepts
it and records it as the final answer. A run without any valid solution stays `failed`.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.actions import AddStage
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint
from flowsteer_mcp.canvas.execution import ExecutionReport
from flowsteer_mcp.canvas.feedback import render_execution
from flowsteer_mcp.canvas.model import Stage, WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState, execution_view
from flowsteer_mcp.engine import WorkflowEngine
from operators.backends.base import ChatRequest
from operators.backends.scripted import ScriptedBackend
from operators.registry import default_registry
from tests.engine.doubles import make_harness, op

CODE_TASK = TaskSpec(problem="write f", task_type="code", entry_point="f")
ADD_TESTS = "assert add(2, 3) == 5\nassert add(0, 0) == 0"
ADD_TASK = TaskSpec(problem="Write add(a, b).", task_type="code", entry_point="add", public_tests=ADD_TESTS)


def graph(*stages: Stage) -> WorkflowGraph:
    return WorkflowGraph(stages=list(stages), next_index=len(stages) + 1)


async def test_a_failed_last_stage_returns_the_earlier_program_as_degraded() -> None:
    report = await make_harness().engine.run(
        graph(op("node_1", "FakeCoder", "A"), op("node_2", "FailingSolverDouble")), CODE_TASK
    )
    assert report.status == "degraded"
    assert report.ok  # degraded is an answer
    assert report.output == report.code == "def f():\n    return 'A'\n"
    assert report.error and "the last stage node_2 failed" in report.error
    assert "node_2 (FailingSolverDouble): model refused to answer" in report.error


async def test_a_run_without_any_valid_solution_stays_failed() -> None:
    h = make_harness()
    alone = await h.engine.run(graph(op("node_1", "FailingSolverDouble")), CODE_TASK)
    after_a_plan = await h.engine.run(
        graph(op("node_1", "FakePlanner", "p"), op("node_2", "FailingSolverDouble")), CODE_TASK
    )
    for report in (alone, after_a_plan):
        assert (report.status, report.ok, report.output, report.code) == ("failed", False, None, None)
        assert report.error and "model refused to answer" in report.error


WRONG_PROGRAM = "def add(a, b):\n    return a * b"  # passes add(0, 0) == 0 only


def _programmer_then_broken_revise(request: ChatRequest) -> str | None:
    if request.operator == "Programmer":
        return f"```python\n{WRONG_PROGRAM}\n```"
    return "I cannot revise this."  # Revise: no program in the reply, so the node fails


async def test_a_failing_revise_after_programmer_and_test_degrades_to_the_program() -> None:
    # The MBPP "no answer" case of issue 10: Revise fails after the Programmer wrote a program.
    backend = ScriptedBackend(rules=[_programmer_then_broken_revise], name="degraded")
    engine = WorkflowEngine(default_registry(), backend, max_reasks=0, runtime_options={"test_max_repairs": 0})
    report = await engine.run(graph(op("node_1", "Programmer"), op("node_2", "Test"), op("node_3", "Revise")), ADD_TASK)
    assert report.status == "degraded", (report.error, [(r.node_id, r.error) for r in report.trace])
    assert report.output == report.code == WRONG_PROGRAM
    assert report.error and "node_3 (Revise)" in report.error
    assert [row.ok for row in report.trace] == [True, True, False]


WORSE_PROGRAM = "def add(a, b):\n    return a - b + 1"  # passes no public test


def _programmer_then_worse_revise(request: ChatRequest) -> str | None:
    if request.operator == "Programmer":
        return f"```python\n{WRONG_PROGRAM}\n```"
    return f"```python\n{WORSE_PROGRAM}\n```"


async def test_a_rejected_revision_keeps_the_input_and_says_so_on_the_trace() -> None:
    backend = ScriptedBackend(rules=[_programmer_then_worse_revise], name="worse-revise")
    engine = WorkflowEngine(default_registry(), backend, max_reasks=0, runtime_options={"test_max_repairs": 0})
    report = await engine.run(graph(op("node_1", "Programmer"), op("node_2", "Test"), op("node_3", "Revise")), ADD_TASK)
    assert report.status == "ok" and report.code == WRONG_PROGRAM
    revise_row = report.trace[-1]
    assert revise_row.node_id == "node_3" and revise_row.note is not None
    assert "revision rejected" in revise_row.note and "input kept" in revise_row.note


class DegradedRunnerDouble:
    """Reports a degraded run: the answer of an earlier stage, and the error of the failed last one."""

    async def run(self, graph: WorkflowGraph, task: TaskSpec, *, progress: object = None) -> ExecutionReport:
        return ExecutionReport(
            status="degraded",
            output="42",
            error="the last stage node_2 failed, so the answer is the best solution the stages before it left: "
            "node_2 (Revise): timed out",
            llm_calls=2,
            tokens=20,
        )


async def test_finish_accepts_a_degraded_run_and_records_its_answer() -> None:
    state = CanvasState(
        task=TaskSpec(problem="What is 6*7?", task_type="math"), options=CanvasOptions(finish="relaxed")
    )
    canvas = Canvas(state, default_registry(), DegradedRunnerDouble())
    step = await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Custom", prompt="Answer with the number.")))
    assert step.execution is not None
    assert (step.execution.status, step.execution.ok, step.execution.output) == ("degraded", True, "42")
    assert "[Output]: 42" in step.feedback and "[Execution]: degraded" in step.feedback
    assert "node_2 (Revise): timed out" in step.feedback
    step = await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Review", prompt="Check the product.")))
    assert "[BLOCK_FINISH]=0 [NEXT]=FINISH" in step.feedback  # degraded does not block finish...
    assert "the last stage failed and the answer comes from an earlier stage" in step.feedback  # ...but says so
    finished = await canvas.finish()
    assert finished.ok and finished.done and finished.end_reason == "finished"
    assert finished.final_answer == "42"
    assert canvas.state.end is not None and canvas.state.end.final_answer == "42"


def test_execution_views_and_feedback_treat_degraded_as_an_answer_and_failed_as_none() -> None:
    degraded = ExecutionReport(status="degraded", output="7", error="the last stage node_3 failed")
    failed = ExecutionReport(status="failed", error="no solution")
    view = execution_view(degraded)
    assert view is not None and (view.ok, view.output) == (True, "7")
    assert "[Output]: 7" in render_execution(degraded)
    assert not failed.ok
    assert not any(line.startswith("[Output]") for line in render_execution(failed))
