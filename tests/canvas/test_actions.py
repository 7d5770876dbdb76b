"""Typed edits: monotonic ids, transactional validation, structure rules, statistics."""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, ModifyNode, SetPrompt, apply_edit
from flowsteer_mcp.canvas.blueprint import ConditionalBlueprint, LoopBlueprint, OperatorBlueprint, ParallelBlueprint
from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasLimits, CanvasOptions
from flowsteer_mcp.canvas.stats import graph_stats
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import default_registry

REGISTRY = default_registry()
RULES = CanvasRules(REGISTRY, CanvasOptions())
FULL = "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format"


def add(graph: WorkflowGraph, blueprint, position: int | None = None, rules: CanvasRules = RULES) -> WorkflowGraph:  # type: ignore[no-untyped-def]
    return apply_edit(graph, AddStage(stage=blueprint, position=position), rules).graph


def test_ids_follow_the_scheme_and_are_never_reused() -> None:
    graph = import_dsl(FULL, RULES)
    assert graph.node_ids() == [
        "node_1", "node_2", "node_2_p0", "node_2_p1", "node_3", "node_4", "node_4_cond", "node_4_fail", "node_5",
    ]  # fmt: skip
    graph = apply_edit(graph, DeleteNode(node_id="node_5"), RULES).graph
    graph = add(graph, OperatorBlueprint(operator="Format"))
    assert graph.stages[-1].id == "node_6"  # not node_5 again
    graph = apply_edit(graph, DeleteNode(node_id="node_1"), RULES).graph
    graph = add(graph, OperatorBlueprint(operator="Plan"), position=0)
    assert [s.id for s in graph.stages] == ["node_7", "node_2", "node_3", "node_4", "node_6"]
    assert len(set(graph.node_ids())) == len(graph.node_ids())


def test_loop_ids_and_on_pass_ids() -> None:
    graph = import_dsl("(Test -> Revise) * 2 -> Review ? Revise : Format", RULES)
    assert graph.node_ids() == [
        "node_1",
        "node_1_l0",
        "node_1_l1",
        "node_2",
        "node_2_cond",
        "node_2_fail",
        "node_2_pass",
    ]


def test_edits_never_mutate_their_input() -> None:
    graph = import_dsl(FULL, RULES)
    before = graph.model_copy(deep=True)
    apply_edit(graph, DeleteNode(node_id="node_5"), RULES)
    apply_edit(graph, SetPrompt(node_id="node_1", prompt="Make a plan please"), RULES)
    apply_edit(graph, ModifyNode(node_id="node_3", operator="Aggregate"), RULES)
    add(graph, OperatorBlueprint(operator="Custom"))
    assert graph == before


@pytest.mark.parametrize(
    ("action", "code", "fragment"),
    [
        (AddStage(stage=OperatorBlueprint(operator="Planner")), ErrorCode.UNKNOWN_OPERATOR, "Valid operators: Plan"),
        (AddStage(stage=ParallelBlueprint(operators=["Custom"])), ErrorCode.INVALID_STRUCTURE, "2 to 6 branches"),
        (
            AddStage(stage=ParallelBlueprint(operators=["Custom", "ScEnsemble"])),
            ErrorCode.INVALID_STRUCTURE,
            "ScEnsemble cannot be a parallel branch",
        ),
        (
            AddStage(stage=LoopBlueprint(operators=["Custom"], count=11)),
            ErrorCode.INVALID_STRUCTURE,
            "between 1 and 10",
        ),
        (AddStage(stage=LoopBlueprint(operators=[], count=2)), ErrorCode.INVALID_STRUCTURE, "1 to 6 operators"),
        (
            AddStage(stage=ConditionalBlueprint(check="Custom", on_fail="Revise")),
            ErrorCode.INVALID_STRUCTURE,
            "must be a checker",
        ),
        (AddStage(stage=OperatorBlueprint(operator="Custom"), position=9), ErrorCode.INVALID_POSITION, "use 0..5"),
        (AddStage(stage=OperatorBlueprint(operator="Custom", prompt="hi")), ErrorCode.INVALID_PROMPT, "too short"),
        (DeleteNode(node_id="node_9"), ErrorCode.UNKNOWN_NODE, "Existing node ids: node_1, node_2"),
        (DeleteNode(node_id="node_4_fail"), ErrorCode.INVALID_TARGET, "Delete the whole stage node_4"),
        (DeleteNode(node_id="node_2_p0"), ErrorCode.INVALID_TARGET, "no longer be a valid parallel"),
        (ModifyNode(node_id="node_2", operator="Custom"), ErrorCode.INVALID_TARGET, "is a parallel stage"),
        (ModifyNode(node_id="node_2_p0", operator="ScEnsemble"), ErrorCode.INVALID_STRUCTURE, "cannot be a parallel"),
        (ModifyNode(node_id="node_4_cond", operator="Custom"), ErrorCode.INVALID_STRUCTURE, "must be a checker"),
        (SetPrompt(node_id="node_4", prompt="a fine prompt"), ErrorCode.INVALID_TARGET, "not an operator"),
        (SetPrompt(node_id="node_1", prompt="x" * 5000), ErrorCode.INVALID_PROMPT, "limit is 4000"),
    ],
)
def test_invalid_edits_raise_actionable_errors_and_change_nothing(action, code, fragment) -> None:  # type: ignore[no-untyped-def]
    graph = import_dsl(FULL, RULES)
    before = graph.model_copy(deep=True)
    with pytest.raises(CanvasError) as info:
        apply_edit(graph, action, RULES)
    assert info.value.code == code
    assert fragment in info.value.message
    assert graph == before


def test_child_deletes_that_keep_the_structure_valid() -> None:
    graph = import_dsl(
        "[Custom, Programmer, AnswerGenerate] -> (Review -> Revise) * 2 -> Verify ? Revise : Format", RULES
    )
    graph = apply_edit(graph, DeleteNode(node_id="node_1_p1"), RULES).graph
    graph = apply_edit(graph, DeleteNode(node_id="node_2_l0"), RULES).graph
    graph = apply_edit(graph, DeleteNode(node_id="node_3_pass"), RULES).graph
    assert render(graph) == "[Custom, AnswerGenerate] -> (Revise) * 2 -> Verify ? Revise : done"
    graph = apply_edit(graph, DeleteNode(node_id="node_3_cond", with_parent=True), RULES).graph
    assert render(graph) == "[Custom, AnswerGenerate] -> (Revise) * 2"


def test_reference_conditional_ids_are_accepted_as_aliases() -> None:
    graph = import_dsl("Custom -> Verify ? Revise : Format", RULES)
    graph = apply_edit(graph, SetPrompt(node_id="node_2_true", prompt="Fix what the check found."), RULES).graph
    graph = apply_edit(graph, ModifyNode(node_id="node_2_false", operator="Custom"), RULES).graph
    stage = graph.stages[1]
    assert stage.on_fail.prompt == "Fix what the check found."  # type: ignore[union-attr]
    assert stage.on_pass.operator == "Custom"  # type: ignore[union-attr]


def test_operator_names_are_case_insensitive_and_canonicalised() -> None:
    graph = add(WorkflowGraph(), ParallelBlueprint(operators=["programmer", "CUSTOM"]))
    assert render(graph) == "[Programmer, Custom]"


def test_modify_keeps_the_id_and_replaces_the_prompt() -> None:
    graph = add(WorkflowGraph(), OperatorBlueprint(operator="Custom", prompt="Solve it in words."))
    graph = apply_edit(graph, ModifyNode(node_id="node_1", operator="Programmer", prompt="Write solve()."), RULES).graph
    node = graph.stages[0]
    assert (node.id, node.operator, node.prompt) == ("node_1", "Programmer", "Write solve().")  # type: ignore[union-attr]


def test_disabled_operators_and_operator_limit() -> None:
    rules = CanvasRules(
        REGISTRY, CanvasOptions(disabled_operators=["Programmer"], limits=CanvasLimits(max_operators=3))
    )
    with pytest.raises(CanvasError, match="disabled"):
        add(WorkflowGraph(), OperatorBlueprint(operator="Programmer"), rules=rules)
    graph = add(WorkflowGraph(), ParallelBlueprint(operators=["Custom", "AnswerGenerate"]), rules=rules)
    with pytest.raises(CanvasError, match="at most 3"):
        add(graph, ParallelBlueprint(operators=["Custom", "AnswerGenerate"]), rules=rules)


def test_statistics_come_from_the_graph() -> None:
    stats = graph_stats(
        import_dsl("Plan -> [Programmer, Custom] -> ScEnsemble -> (Verify -> Revise) * 3 -> Format", RULES), REGISTRY
    )
    assert stats.total_operators == 7  # the loop body counts once
    assert stats.unique_types == 7
    assert stats.operators == ["Plan", "Programmer", "Custom", "ScEnsemble", "Verify", "Revise", "Format"]
    assert (stats.has_parallel, stats.has_conditional, stats.has_loop) == (True, False, True)
    assert stats.stage_count == 5
    assert stats.has_checker
    assert stats.category_counts == {
        "planning": 1, "solving": 2, "verification": 1, "revision": 1, "ensemble": 1, "formatting": 1,
    }  # fmt: skip
