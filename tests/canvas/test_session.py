"""Canvas sessions: rounds, prompt turns, execution after edits, the finish gate and feedback."""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint
from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.execution import ExecutionReport, ProgressCallback
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from operators.registry import default_registry

REGISTRY = default_registry()


class EchoRunner:
    """Test double: the 'answer' is the DSL that ran (or a fixed text), so tests see what was executed."""

    def __init__(self, output: str | None = None, status: str = "ok") -> None:
        self.output = output
        self.status = status
        self.runs: list[str] = []

    async def run(
        self, graph: WorkflowGraph, task: TaskSpec, *, progress: ProgressCallback | None = None
    ) -> ExecutionReport:
        self.runs.append(render(graph))
        if self.status != "ok":
            return ExecutionReport(status="failed", error="node_1 (Programmer): ZeroDivisionError")
        return ExecutionReport(status="ok", output=self.output or render(graph), llm_calls=1, tokens=10)


def canvas(runner: EchoRunner | None = None, **options: object) -> Canvas:
    state = CanvasState(task=TaskSpec(problem="What is 6*7?", task_type="math"), options=CanvasOptions(**options))
    return Canvas(state, REGISTRY, runner)


BUILD = [
    "<action>add</action><operator>Plan</operator>",
    "List the quantities, then multiply.",
    "<action>add</action><structure>parallel</structure><operators>Programmer, Custom</operators>",
    "Define solve() returning 6*7.",
    "Reason in words and give the number.",
    "<action>add</action><operator>ScEnsemble</operator><prompt>Pick the majority answer.</prompt>",
    "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true><false>done</false>",
    "Recompute independently and compare.",
    "Fix the answer using the verifier's feedback.",
    "<action>add</action><operator>Format</operator><prompt>Output only the number.</prompt>",
]


async def test_full_build_through_act_with_prompt_turns() -> None:
    runner = EchoRunner(output="42")
    c = canvas(runner)
    results = [await c.act(text) for text in BUILD]
    assert all(r.ok for r in results)
    assert [r.state.status for r in results] == [
        "awaiting_prompt", "building", "awaiting_prompt", "awaiting_prompt", "building", "building",
        "awaiting_prompt", "awaiting_prompt", "building", "building",
    ]  # fmt: skip
    # usage is reported as fresh only by the steps that actually ran the workflow
    assert [bool(r.execution and r.execution.fresh) for r in results] == [
        False, True, False, False, True, True, False, False, True, True,
    ]  # fmt: skip
    final = results[-1]
    assert final.state.dsl == "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format"
    assert final.state.round == 10
    # the workflow runs once per completed edit, never during pending prompt turns
    assert runner.runs == [
        "Plan",
        "Plan -> [Programmer, Custom]",
        "Plan -> [Programmer, Custom] -> ScEnsemble",
        "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done",
        final.state.dsl,
    ]
    prompts = {n.id: n.prompt for n in final.state.nodes if n.kind == "operator"}
    assert prompts["node_2_p0"] == "Define solve() returning 6*7."
    assert prompts["node_4_fail"] == "Fix the answer using the verifier's feedback."
    assert "[BLOCK_FINISH]=0 [NEXT]=FINISH" in final.feedback
    done = await c.act("<action>finish</action><answer>41</answer>")
    assert done.ok and done.done and done.end_reason == "finished"
    assert done.final_answer == "42"  # the executed output, not the claimed answer
    assert c.state.end is not None and c.state.end.claimed_answer == "41"
    with pytest.raises(CanvasError) as info:
        await c.act("<action>add</action><operator>Plan</operator>")
    assert info.value.code == ErrorCode.EPISODE_OVER


async def test_prompt_request_names_the_node_and_cancel_changes_nothing() -> None:
    c = canvas(EchoRunner())
    step = await c.act(
        "<action>add</action><structure>loop</structure><operators>Test, Revise</operators><count>2</count>"
    )
    request = step.state.awaiting_prompt_for
    assert request is not None
    assert (request.node_id, request.operator, request.index, request.total) == ("node_1_l0", "Test", 1, 2)
    assert "[Prompt Request]: write the prompt for node_1_l0" in step.feedback
    step = await c.act("Run the public tests.")
    assert step.state.awaiting_prompt_for is not None and step.state.awaiting_prompt_for.node_id == "node_1_l1"
    step = await c.act("<action>cancel</action>")
    assert step.ok and step.state.status == "building" and step.state.dsl == ""
    assert c.state.graph.next_index == 1  # nothing was allocated
    step = await c.act("<action>add</action><operator>Custom</operator>")
    assert step.state.awaiting_prompt_for is not None and step.state.awaiting_prompt_for.node_id == "node_1"


async def test_invalid_turns_cost_a_round_but_change_nothing() -> None:
    c = canvas(EchoRunner())
    await c.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    graph = c.state.graph.model_copy(deep=True)
    for text in [
        "hello",
        "<action>add</action><operator>Wizard</operator>",
        "<action>delete</action><target>node_7</target>",
    ]:
        step = await c.act(text)
        assert not step.ok and step.error_code is not None
        assert c.state.graph == graph
    assert c.state.rounds_used == 4
    assert len(c.state.history) == 4


async def test_bad_operator_name_is_rejected_before_any_prompt_turn() -> None:
    c = canvas(EchoRunner())
    step = await c.act("<action>add</action><operator>programer</operator>")
    assert not step.ok and step.state.status == "building"  # never trapped waiting for a prompt


async def test_short_prompt_keeps_waiting_and_action_during_prompt_turn_is_an_error() -> None:
    c = canvas(EchoRunner())
    await c.act("<action>add</action><operator>Custom</operator>")
    step = await c.act("ok")
    assert not step.ok and step.state.status == "awaiting_prompt" and "too short" in step.message
    step = await c.act("<action>add</action><operator>Plan</operator>")
    assert not step.ok and step.error_code == "wrong_state"
    step = await c.act("Answer with just the number.")
    assert step.ok and step.state.dsl == "Custom"


async def test_round_budget_ends_the_episode_with_the_last_result() -> None:
    c = canvas(EchoRunner(output="42"), max_rounds=3)
    await c.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    await c.act("nonsense")
    step = await c.act("<action>add</action><operator>Format</operator>")
    assert step.done and step.end_reason == "budget_exhausted" and step.state.status == "exhausted"
    assert step.final_answer == "42"
    assert step.state.awaiting_prompt_for is None


async def test_round_budget_runs_the_unexecuted_workflow_once_so_the_result_matches_execute_each_step() -> None:
    """Without per-step execution the built workflow has never run; the episode still ends with its result."""
    turns = [
        "<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>",
        "nonsense",
        "<action>add</action><operator>Format</operator><prompt>Output only the number.</prompt>",
    ]
    ends = {}
    for each_step in (True, False):
        runner = EchoRunner()
        c = canvas(runner, max_rounds=3, execute_each_step=each_step)
        for text in turns:
            step = await c.act(text)
        assert step.end_reason == "budget_exhausted"
        assert c.state.end is not None and c.state.end.reason == "budget_exhausted"
        ends[each_step] = (step.final_answer, c.state.end.final_answer)
        assert runner.runs[-1] == "Custom -> Format"
        assert step.execution is not None and step.execution.fresh
        assert "Custom -> Format" in step.feedback  # the feedback shows the run that is scored
        if not each_step:
            assert runner.runs == ["Custom -> Format"]  # once, at the end
    assert ends[True] == ends[False] == ("Custom -> Format", "Custom -> Format")


async def test_round_budget_with_an_empty_canvas_runs_nothing() -> None:
    runner = EchoRunner()
    c = canvas(runner, max_rounds=2, execute_each_step=False)
    await c.act("nonsense")
    step = await c.act("more nonsense")
    assert step.end_reason == "budget_exhausted" and step.final_answer is None and runner.runs == []


async def test_round_budget_ending_on_a_pending_prompt_runs_the_graph_without_the_pending_edit() -> None:
    runner = EchoRunner()
    c = canvas(runner, max_rounds=2, execute_each_step=False)
    await c.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    step = await c.act("<action>add</action><operator>Format</operator>")  # asks for a prompt: the budget is gone
    assert step.end_reason == "budget_exhausted" and step.final_answer == "Custom"
    assert runner.runs == ["Custom"]


async def test_finish_gate_paper_preset_names_the_missing_constraint() -> None:
    c = canvas(EchoRunner(output="42"))
    await c.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    step = await c.act("<action>finish</action>")
    assert not step.ok and step.error_code == "finish_rejected"
    assert "at least 5 are required" in step.message and "No structure used" in step.message
    assert "No checker" in step.message
    assert not step.done and step.state.round == 2


async def test_finish_gate_requires_format_for_verbose_output_and_relaxed_preset() -> None:
    verbose = "Step 1: multiply.\nStep 2: the answer is 42, which we double-check carefully here."
    c = canvas(EchoRunner(output=verbose))
    for text in ["<action>add</action><operator>Plan</operator><prompt>Plan the multiplication.</prompt>",
                 "<action>add</action><structure>parallel</structure><operators>Custom, AnswerGenerate</operators>",
                 "Answer in words.", "Answer with a number.",
                 "<action>add</action><operator>ScEnsemble</operator><prompt>Pick the majority.</prompt>",
                 "<action>add</action><operator>Verify</operator><prompt>Check it independently.</prompt>"]:  # fmt: skip
        assert (await c.act(text)).ok
    step = await c.act("<action>finish</action>")
    assert not step.ok and "add a Format stage" in step.message and "No structure" not in step.message
    relaxed = canvas(EchoRunner(output=verbose), finish="relaxed")
    await relaxed.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    assert (await relaxed.act("<action>finish</action>")).done


async def test_typed_edits_cost_a_round_only_when_valid() -> None:
    c = canvas(EchoRunner())
    step = await c.edit(AddStage(stage=OperatorBlueprint(operator="Custom", prompt="Answer with the number.")))
    assert step.ok and step.state.round == 1 and step.execution is not None and step.execution.ok
    with pytest.raises(CanvasError):
        await c.edit(DeleteNode(node_id="node_5"))
    assert c.state.rounds_used == 1


async def test_typed_edit_refused_while_a_prompt_turn_is_pending() -> None:
    c = canvas(EchoRunner())
    await c.act("<action>add</action><operator>Custom</operator>")
    with pytest.raises(CanvasError, match="pending for node_1"):
        await c.edit(AddStage(stage=OperatorBlueprint(operator="Plan")))


async def test_no_executor_reports_clearly_and_delete_to_empty_clears_the_result() -> None:
    c = canvas(None)
    step = await c.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    assert step.execution is not None and step.execution.status == "no_executor"
    assert "no executor configured" in step.feedback
    c2 = canvas(EchoRunner(output="42"))
    await c2.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    step = await c2.act("<action>delete</action><target>node_1</target>")
    assert step.execution is not None and step.execution.status == "empty" and step.execution.output is None


async def test_failed_run_is_shown_as_an_error_and_hint_asks_for_repair() -> None:
    c = canvas(EchoRunner(status="failed"))
    step = await c.act("<action>add</action><operator>Programmer</operator><prompt>Write solve() for 6*7.</prompt>")
    assert step.execution is not None and not step.execution.ok
    assert "[Error]: node_1 (Programmer): ZeroDivisionError" in step.feedback
    assert "[NEXT]=ADD:Revise" in step.feedback


async def test_hints_can_be_switched_off() -> None:
    c = canvas(EchoRunner(), hints=False)
    step = await c.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    assert "[BLOCK_FINISH]" not in step.feedback


async def test_cancellation_restores_the_state() -> None:
    import anyio

    class SlowRunner(EchoRunner):
        async def run(self, graph, task, *, progress=None):  # type: ignore[no-untyped-def]
            await anyio.sleep(10)
            return await super().run(graph, task)

    c = canvas(SlowRunner())
    before = c.state.model_copy(deep=True)
    with anyio.move_on_after(0.05):
        await c.act("<action>add</action><operator>Custom</operator><prompt>Answer with the number.</prompt>")
    assert c.state == before
