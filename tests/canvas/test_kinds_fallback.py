"""The stage-kind contract, proven by the `fallback` kind (`A ?? B`) through every canvas layer."""

from __future__ import annotations

import json

import pytest

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, ModifyNode, apply_edit
from flowsteer_mcp.canvas.blueprint import FallbackBlueprint, blueprint_of, build_stage
from flowsteer_mcp.canvas.dialect import ActionTurn, parse_action_turn
from flowsteer_mcp.canvas.dsl import DSLSyntaxError, parse_dsl, render
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.export import export_json, export_mermaid, import_dsl, import_json
from flowsteer_mcp.canvas.kinds import KINDS, STRUCTURES, FallbackStage
from flowsteer_mcp.canvas.kinds.base import StructureArgs, StructureArgsError
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.stats import graph_stats
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import default_registry

REGISTRY = default_registry()
RULES = CanvasRules(REGISTRY, CanvasOptions())
DSL = "Plan -> Programmer ?? Custom -> Verify ? Revise : done"


def test_kinds_are_registered_once_with_their_own_dsl_punctuation() -> None:
    assert list(KINDS) == ["operator", "parallel", "conditional", "loop", "fallback"]
    assert [k.name for k in STRUCTURES] == ["parallel", "conditional", "loop", "fallback"]
    markers = [m for k in KINDS.values() for m in (k.dsl_opener, k.dsl_infix) if m]
    assert len(markers) == len(set(markers))


def test_build_and_blueprint_round_trip_with_suffixed_ids() -> None:
    blueprint = FallbackBlueprint(operators=["Programmer", "Custom"], prompts=["Write a program.", None])
    stage = build_stage(blueprint, 4)
    assert isinstance(stage, FallbackStage)
    assert (stage.attempt.id, stage.fallback.id) == ("node_4_try", "node_4_else")
    assert blueprint_of(stage) == blueprint.model_copy(update={"prompts": ["Write a program.", None]})


def test_dsl_round_trip() -> None:
    graph = import_dsl(DSL, RULES)
    assert render(graph) == DSL
    assert render(import_dsl(render(graph), RULES)) == DSL
    assert parse_dsl("Programmer??Custom") == [FallbackBlueprint(operators=["Programmer", "Custom"])]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("Programmer{3} ?? Custom", "not allowed inside a fallback"),
        ("Programmer ?? Custom{2}", "not allowed inside a fallback"),
        ("Programmer ?? done", "'done' is only allowed"),
        ("Programmer ??", "expected name"),
    ],
)
def test_dsl_refuses_malformed_fallbacks(text: str, fragment: str) -> None:
    with pytest.raises(DSLSyntaxError, match=fragment):
        parse_dsl(text)


def test_dialect_tag_adds_a_fallback() -> None:
    turn = parse_action_turn(
        "<action>add</action><structure>Fallback</structure><operators>programmer, Custom</operators>", RULES
    )
    assert isinstance(turn, ActionTurn) and isinstance(turn.action, AddStage)
    assert turn.action.stage == FallbackBlueprint(operators=["Programmer", "Custom"])


def test_validation_wants_exactly_two_operators() -> None:
    for operators in (["Custom"], ["Programmer", "Custom", "AnswerGenerate"]):
        with pytest.raises(CanvasError) as caught:
            apply_edit(WorkflowGraph(), AddStage(stage=FallbackBlueprint(operators=operators)), RULES)
        assert caught.value.code is ErrorCode.INVALID_STRUCTURE
        assert "exactly 2 operators" in caught.value.message


def test_typed_tool_arguments_build_a_fallback() -> None:
    kind = KINDS["fallback"]
    assert kind.from_tool(StructureArgs(operators=["A", "B"])) == FallbackBlueprint(operators=["A", "B"])
    with pytest.raises(StructureArgsError, match="only applies to loops"):
        kind.from_tool(StructureArgs(operators=["A", "B"], count=2))
    with pytest.raises(StructureArgsError, match="only apply to conditionals"):
        kind.from_tool(StructureArgs(operators=["A", "B"], on_fail="Revise"))


def test_children_can_be_modified_but_not_deleted_alone_nor_sampled() -> None:
    graph = import_dsl("Programmer ?? Custom", RULES)
    modified = apply_edit(graph, ModifyNode(node_id="node_1_else", operator="AnswerGenerate"), RULES).graph
    assert render(modified) == "Programmer ?? AnswerGenerate"
    with pytest.raises(CanvasError, match="would no longer be a valid fallback stage"):
        apply_edit(graph, DeleteNode(node_id="node_1_try"), RULES)
    with pytest.raises(CanvasError, match="inside a fallback stage"):
        apply_edit(graph, ModifyNode(node_id="node_1_try", operator="Programmer", samples=3), RULES)
    assert apply_edit(graph, DeleteNode(node_id="node_1_try", with_parent=True), RULES).graph.stages == []


def test_json_round_trip_and_hostile_samples() -> None:
    graph = import_dsl(DSL, RULES)
    assert import_json(export_json(graph), RULES) == graph
    document = json.loads(export_json(graph))
    document["graph"]["stages"][1]["attempt"]["samples"] = 3
    with pytest.raises(CanvasError, match="inside a fallback stage"):
        import_json(json.dumps(document), RULES)


def test_mermaid_draws_the_no_answer_edge() -> None:
    text = export_mermaid(import_dsl(DSL, RULES))
    assert "node_2_try -- no answer --> node_2_else" in text
    assert "node_2_try --> node_3_cond" in text and "node_2_else --> node_3_cond" in text


def test_stats_count_the_fallback_as_a_structure() -> None:
    stats = graph_stats(import_dsl(DSL, RULES), REGISTRY)
    assert stats.structures == ["conditional", "fallback"]
    assert stats.has_structure and stats.structure_kinds == 2
    assert stats.total_operators == 5
