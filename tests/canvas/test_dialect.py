"""The Flow-Director text dialect: compatible tags, validation at parse time, prompt turns."""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, Finish, ModifyNode, SetPrompt
from flowsteer_mcp.canvas.blueprint import ConditionalBlueprint, LoopBlueprint, OperatorBlueprint, ParallelBlueprint
from flowsteer_mcp.canvas.dialect import (
    ActionTurn,
    CancelTurn,
    PromptTurn,
    parse_action_turn,
    parse_prompt_turn,
)
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import default_registry

RULES = CanvasRules(default_registry(), CanvasOptions())


def action(text: str, *, lenient: bool = False):  # type: ignore[no-untyped-def]
    turn = parse_action_turn(text, RULES, lenient=lenient)
    assert isinstance(turn, ActionTurn)
    return turn.action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<action>add</action><operator>Plan</operator>", AddStage(stage=OperatorBlueprint(operator="Plan"))),
        ("[action]add[/action][operator]plan[/operator]", AddStage(stage=OperatorBlueprint(operator="Plan"))),
        ("<ACTION>Add</ACTION><Operator>Custom</Operator><position>0</position><prompt>Answer briefly.</prompt>",
         AddStage(stage=OperatorBlueprint(operator="Custom", prompt="Answer briefly."), position=0)),
        ("<action>add</action><structure>parallel</structure><operators>Programmer, Custom</operators>",
         AddStage(stage=ParallelBlueprint(operators=["Programmer", "Custom"]))),
        ("<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>"
         "<false>done</false>", AddStage(stage=ConditionalBlueprint(check="Verify", on_fail="Revise"))),
        ("<action>add</action><structure>conditional</structure><condition>Review</condition><true>Revise</true>"
         "<false>Format</false>", AddStage(stage=ConditionalBlueprint(check="Review", on_fail="Revise", on_pass="Format"))),
        ("<action>add</action><structure>conditional</structure><condition>Test</condition><true>Programmer</true>",
         AddStage(stage=ConditionalBlueprint(check="Test", on_fail="Programmer"))),
        ("<action>add</action><structure>loop</structure><operators>Test; Revise</operators><count>3</count>",
         AddStage(stage=LoopBlueprint(operators=["Test", "Revise"], count=3))),
        ("<action>add</action><structure>loop</structure><operators>Review</operators>",
         AddStage(stage=LoopBlueprint(operators=["Review"], count=3))),
        ("<action>delete</action><target>node_2</target>", DeleteNode(node_id="node_2")),
        ("<action>modify</action><target>node_1</target><operator>Decompose</operator>",
         ModifyNode(node_id="node_1", operator="Decompose")),
        ("<action>set_prompt</action><target>node_1</target><prompt>Plan in 3 steps.</prompt>",
         SetPrompt(node_id="node_1", prompt="Plan in 3 steps.")),
        ("<action>finish</action>", Finish()),
        ("<action>finish</action><answer>42</answer>", Finish(answer="42")),
    ],
)  # fmt: skip
def test_dialect_forms(text: str, expected: object) -> None:
    assert action(text) == expected


def test_think_blocks_and_code_fences_are_ignored_and_first_action_wins() -> None:
    text = (
        "<think>maybe <action>finish</action>?</think>\n```xml\n<action>delete</action><target>node_1</target>\n```\n"
        "<action>add</action><operator>Verify</operator> then <action>finish</action>"
    )
    assert action(text) == AddStage(stage=OperatorBlueprint(operator="Verify"))


@pytest.mark.parametrize(
    ("text", "code", "fragment"),
    [
        ("I think we should add a planner", ErrorCode.PARSE_ERROR, "No <action> tag"),
        ("<action>add</action><operator>Solver</operator>", ErrorCode.UNKNOWN_OPERATOR, "Valid operators"),
        ("<action>add</action><structure>parallel</structure><operators>Custom, Magic</operators>",
         ErrorCode.UNKNOWN_OPERATOR, "'Magic'"),
        ("<action>add</action>", ErrorCode.PARSE_ERROR, "Missing <operator> tag"),
        ("<action>add</action><structure>conditional</structure><condition>Verify</condition>",
         ErrorCode.PARSE_ERROR, "Missing <true> tag"),
        ("<action>add</action><structure>tree</structure>", ErrorCode.PARSE_ERROR, "Unknown structure"),
        ("<action>add</action><structure>loop</structure><operators>Custom</operators><count>x</count>",
         ErrorCode.PARSE_ERROR, "must be an integer"),
        ("<action>jump</action>", ErrorCode.PARSE_ERROR, "Unknown action 'jump'"),
        ("<think>still thinking <action>finish</action>", ErrorCode.PARSE_ERROR, "Unclosed <think>"),
        ("<action>set_prompt</action><target>node_1</target>", ErrorCode.PARSE_ERROR, "Missing <prompt>"),
    ],
)  # fmt: skip
def test_invalid_turns_explain_themselves(text: str, code: ErrorCode, fragment: str) -> None:
    with pytest.raises(CanvasError) as info:
        parse_action_turn(text, RULES)
    assert info.value.code == code
    assert fragment in info.value.message


def test_lenient_fallbacks_are_off_by_default_and_marked_when_on() -> None:
    with pytest.raises(CanvasError):
        parse_action_turn("Let's finish now.", RULES)
    turn = parse_action_turn("Let's finish now.", RULES, lenient=True)
    assert isinstance(turn, ActionTurn) and turn.lenient and turn.action == Finish()
    turn = parse_action_turn("I would use Programmer here", RULES, lenient=True)
    assert isinstance(turn, ActionTurn) and turn.action == AddStage(stage=OperatorBlueprint(operator="Programmer"))
    with pytest.raises(CanvasError):  # two operator names: ambiguous even when lenient
        parse_action_turn("Programmer or Custom?", RULES, lenient=True)


def test_prompt_turns() -> None:
    assert parse_prompt_turn("<think>hmm</think> Compute 14*3*0.9 exactly. ") == PromptTurn("Compute 14*3*0.9 exactly.")
    assert parse_prompt_turn("noise <prompt>Only the number.</prompt> noise") == PromptTurn("Only the number.")
    assert isinstance(parse_prompt_turn("[action]cancel[/action]"), CancelTurn)
    with pytest.raises(CanvasError) as info:
        parse_prompt_turn("<action>add</action><operator>Plan</operator>")
    assert info.value.code == ErrorCode.WRONG_STATE
    with pytest.raises(CanvasError, match="Unclosed"):
        parse_prompt_turn("<think>I will write")
