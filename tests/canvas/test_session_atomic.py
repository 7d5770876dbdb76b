"""Atomic steps: a step that reports ok=false changed nothing but its round; a valid edit stands even when the
execution afterwards fails or the runner raises (the step says ok=true and reports the run as failed)."""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, SetPrompt
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.execution import ExecutionReport, ProgressCallback
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.canvas.step import StepResult
from operators.registry import default_registry

REGISTRY = default_registry()
REFUSAL = "the engine refuses this graph"


class RefusingRunner:
    """A runner whose run() raises CanvasError (as an engine that rejects a graph would)."""

    def __init__(self) -> None:
        self.runs = 0

    async def run(
        self, graph: WorkflowGraph, task: TaskSpec, *, progress: ProgressCallback | None = None
    ) -> ExecutionReport:
        self.runs += 1
        raise CanvasError(ErrorCode.INVALID_STRUCTURE, REFUSAL)


def refusing_canvas(**options: object) -> tuple[Canvas, RefusingRunner]:
    runner = RefusingRunner()
    state = CanvasState(task=TaskSpec(problem="What is 6*7?"), options=CanvasOptions(finish="relaxed", **options))
    return Canvas(state, REGISTRY, runner), runner


def assert_edit_stands_and_run_failed(canvas: Canvas, result: StepResult, dsl: str) -> None:
    """ok=true, the edit is in the DSL and the history, and the execution is reported as failed."""
    assert result.ok is True, result.message
    assert result.state.dsl == dsl and canvas.view().dsl == dsl
    assert result.execution is not None and result.execution.fresh
    assert result.execution.status == "failed" and REFUSAL in (result.execution.error or "")
    assert canvas.state.history[-1].ok is True and canvas.state.history[-1].dsl == dsl
    assert "[Status]: Success" in result.feedback or "[Status]: Finished" in result.feedback


async def test_act_with_an_inline_prompt_keeps_the_edit_when_the_runner_raises() -> None:
    canvas, runner = refusing_canvas()
    result = await canvas.act("<action>add</action><operator>Plan</operator><prompt>List the steps.</prompt>")
    assert runner.runs == 1
    assert_edit_stands_and_run_failed(canvas, result, "Plan")
    assert result.state.round == 1


async def test_a_typed_edit_keeps_the_edit_when_the_runner_raises() -> None:
    canvas, runner = refusing_canvas()
    result = await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Custom")))
    assert runner.runs == 1
    assert_edit_stands_and_run_failed(canvas, result, "Custom")
    result = await canvas.edit(SetPrompt(node_id="node_1", prompt="Solve it step by step."))
    assert_edit_stands_and_run_failed(canvas, result, "Custom")
    assert canvas.state.graph.stages[0].prompt == "Solve it step by step."  # type: ignore[union-attr]
    result = await canvas.edit(DeleteNode(node_id="node_1"))
    assert result.ok is True and result.state.dsl == ""
    assert result.execution is not None and result.execution.status == "empty"


async def test_the_prompt_turn_that_completes_an_edit_keeps_it_when_the_runner_raises() -> None:
    canvas, runner = refusing_canvas()
    pending = await canvas.act("<action>add</action><operator>Plan</operator>")
    assert pending.ok and pending.state.status == "awaiting_prompt" and runner.runs == 0
    result = await canvas.act("List the quantities, then multiply them.")
    assert runner.runs == 1
    assert_edit_stands_and_run_failed(canvas, result, "Plan")
    assert result.state.status == "building" and result.state.awaiting_prompt_for is None


@pytest.mark.parametrize("through_act", [False, True])
async def test_finish_that_executes_is_accepted_with_the_run_reported_failed(through_act: bool) -> None:
    canvas, runner = refusing_canvas(execute_each_step=False)
    await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Custom")))
    assert runner.runs == 0 and canvas.state.last_execution is None
    if through_act:
        result = await canvas.act("<action>finish</action>")
    else:
        result = await canvas.finish()
    assert runner.runs == 1
    assert_edit_stands_and_run_failed(canvas, result, "Custom")
    assert result.done and result.end_reason == "finished" and result.final_answer is None
    assert canvas.state.status == "finished" and canvas.state.rounds_used == 2


async def test_run_reports_a_raising_runner_as_a_failed_run() -> None:
    canvas, _ = refusing_canvas(execute_each_step=False)
    await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Custom")))
    report = await canvas.run()
    assert report.status == "failed" and REFUSAL in (report.error or "")
    assert canvas.state.last_execution == report and canvas.state.rounds_used == 1


async def test_an_invalid_act_turn_costs_its_round_and_changes_nothing_else() -> None:
    canvas, _ = refusing_canvas()
    await canvas.act("<action>add</action><structure>parallel</structure><operators>Custom, Programmer</operators>")
    await canvas.act("Reason in words.")
    before = canvas.state.model_copy(deep=True)
    assert before.status == "awaiting_prompt"
    result = await canvas.act("no")  # too short for a prompt
    assert result.ok is False and result.error_code == "invalid_prompt"
    after = canvas.state
    assert after.rounds_used == before.rounds_used + 1
    assert after.pending == before.pending and after.graph == before.graph and after.status == before.status
    assert after.last_execution == before.last_execution
    assert after.history[:-1] == before.history and after.history[-1].ok is False
