"""One turn, step by step: parse and validation never write, and a rejected turn or tool call leaves the graph,
the pending edit, the history and the counters as they were (docs/design/canvas.md, "One turn, step by step")."""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, EditAction, ModifyNode, SetPrompt
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint, ParallelBlueprint
from flowsteer_mcp.canvas.change import Apply, Cancel, EndRequest, Hold, plan_turn
from flowsteer_mcp.canvas.commit import commit
from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.canvas.turn import parse_turn
from operators.registry import default_registry
from tests.support.scripted_runner import ScriptedRunner

REGISTRY = default_registry()


async def built_canvas() -> tuple[Canvas, ScriptedRunner]:
    """Two stages, two rounds, a run and a history: every counter a rejected step must leave alone."""
    runner = ScriptedRunner()
    state = CanvasState(task=TaskSpec(problem="What is 6*7?"), options=CanvasOptions(finish="paper"))
    canvas = Canvas(state, REGISTRY, runner)
    await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Custom", prompt="Compute the product.")))
    await canvas.act("<action>add</action><operator>Format</operator><prompt>Only the number.</prompt>")
    assert canvas.state.graph.next_index == 3 and canvas.state.rounds_used == 2 and len(runner.calls) == 2
    return canvas, runner


INVALID_TURNS: list[tuple[str, str]] = [
    ("<action>delete</action><target>node_9</target>", "unknown_node"),
    ("<action>add</action><operator>Nonsense</operator>", "unknown_operator"),
    (
        "<action>modify</action><target>node_1</target><operator>Custom</operator><samples>99</samples>",
        "invalid_structure",
    ),
    (
        "<action>add</action><structure>parallel</structure><operators>ScEnsemble, Custom</operators>",
        "invalid_structure",
    ),
    ("<action>cancel</action>", "wrong_state"),
    ("no action at all", "parse_error"),
]


@pytest.mark.parametrize(("text", "code"), INVALID_TURNS)
async def test_a_rejected_action_turn_costs_its_round_and_changes_nothing_else(text: str, code: str) -> None:
    canvas, runner = await built_canvas()
    before = canvas.state.model_copy(deep=True)
    result = await canvas.act(text)
    assert result.ok is False and result.execution is not None and not result.execution.fresh
    assert result.error_code == code
    after = canvas.state
    assert after.graph == before.graph and after.graph.next_index == before.graph.next_index
    assert after.pending == before.pending and after.status == before.status
    assert after.last_execution == before.last_execution and len(runner.calls) == 2
    assert after.rounds_used == before.rounds_used + 1 == result.state.round
    assert after.history[:-1] == before.history and after.history[-1].ok is False
    assert after.history[-1].input == text and after.end is None


INVALID_EDITS: list[tuple[EditAction, ErrorCode]] = [
    (DeleteNode(node_id="node_9"), ErrorCode.UNKNOWN_NODE),
    (AddStage(stage=OperatorBlueprint(operator="Nonsense")), ErrorCode.UNKNOWN_OPERATOR),
    (AddStage(stage=OperatorBlueprint(operator="Custom"), position=7), ErrorCode.INVALID_POSITION),
    (AddStage(stage=ParallelBlueprint(operators=["ScEnsemble", "Custom"])), ErrorCode.INVALID_STRUCTURE),
    (ModifyNode(node_id="node_1", operator="Custom", prompt="x"), ErrorCode.INVALID_PROMPT),
    (SetPrompt(node_id="node_2", prompt="  "), ErrorCode.INVALID_PROMPT),
]


@pytest.mark.parametrize(("action", "code"), INVALID_EDITS)
async def test_a_rejected_typed_edit_raises_and_changes_nothing(action: EditAction, code: ErrorCode) -> None:
    canvas, runner = await built_canvas()
    before = canvas.state.model_copy(deep=True)
    with pytest.raises(CanvasError) as raised:
        await canvas.edit(action)
    assert raised.value.code is code
    assert canvas.state == before and len(runner.calls) == 2


async def test_typed_steps_refused_while_a_prompt_turn_is_pending_change_nothing() -> None:
    canvas, runner = await built_canvas()
    await canvas.act("<action>add</action><operator>Review</operator>")
    before = canvas.state.model_copy(deep=True)
    assert before.status == "awaiting_prompt"
    for step in (canvas.edit(DeleteNode(node_id="node_1")), canvas.finish()):
        with pytest.raises(CanvasError) as raised:
            await step
        assert raised.value.code is ErrorCode.WRONG_STATE
    assert canvas.state == before and len(runner.calls) == 2


async def test_a_rejected_finish_costs_its_round_and_keeps_the_graph() -> None:
    canvas, runner = await built_canvas()
    before = canvas.state.model_copy(deep=True)
    result = await canvas.finish()  # the paper gate wants more operators and a structure
    assert result.ok is False and result.error_code == "finish_rejected" and not result.done
    assert canvas.state.graph == before.graph and canvas.state.rounds_used == before.rounds_used + 1
    assert canvas.state.status == "building" and canvas.state.end is None
    assert len(runner.calls) == 2  # refused on structure: nothing ran for it


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<action>add</action><operator>Review</operator>", Hold),
        ("<action>add</action><operator>Review</operator><prompt>Check the product.</prompt>", Apply),
        ("<action>delete</action><target>node_2</target>", Apply),
        ("<action>finish</action>", EndRequest),
    ],
)
async def test_parse_and_validate_only_read_the_state(text: str, expected: type) -> None:
    canvas, _ = await built_canvas()
    before = canvas.state.model_copy(deep=True)
    change = plan_turn(parse_turn(text, canvas.state, canvas.rules), canvas.state, canvas.rules)
    assert isinstance(change, expected)
    assert canvas.state == before


async def test_commit_is_the_step_that_writes() -> None:
    canvas, _ = await built_canvas()
    state = canvas.state
    held = plan_turn(
        parse_turn("<action>add</action><operator>Review</operator>", state, canvas.rules), state, canvas.rules
    )
    assert isinstance(held, Hold)
    commit(state, held)
    assert state.status == "awaiting_prompt" and state.pending == held.pending
    cancel = plan_turn(parse_turn("<action>cancel</action>", state, canvas.rules), state, canvas.rules)
    assert isinstance(cancel, Cancel)
    commit(state, cancel)
    assert state.status == "building" and state.pending is None
    applied = plan_turn(
        parse_turn("<action>delete</action><target>node_2</target>", state, canvas.rules), state, canvas.rules
    )
    assert isinstance(applied, Apply) and render(applied.graph) == "Custom"
    assert render(state.graph) == "Custom -> Format"
    commit(state, applied)
    assert render(state.graph) == "Custom" and state.last_execution is None
