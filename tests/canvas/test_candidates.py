"""Ensembles need candidates: an edit that leaves an ensemble without a candidate source right before it is
refused with the fix, the graph unchanged; sampled and parallel sources are accepted."""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, ModifyNode, apply_edit
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint, ParallelBlueprint, build_stage
from flowsteer_mcp.canvas.candidates import unfed_ensembles
from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.export import export_json, import_dsl, import_json
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import default_registry

REGISTRY = default_registry()
RULES = CanvasRules(REGISTRY, CanvasOptions())


def added(
    graph: WorkflowGraph, blueprint: OperatorBlueprint | ParallelBlueprint, position: int | None = None
) -> WorkflowGraph:
    return apply_edit(graph, AddStage(stage=blueprint, position=position), RULES).graph


def refused(graph: WorkflowGraph, action: AddStage | DeleteNode | ModifyNode) -> str:
    before = graph.model_copy(deep=True)
    with pytest.raises(CanvasError) as caught:
        apply_edit(graph, action, RULES)
    assert caught.value.code is ErrorCode.INVALID_STRUCTURE
    assert graph == before
    return caught.value.message


@pytest.mark.parametrize("ensemble", ["ScEnsemble", "Aggregate"])
def test_an_ensemble_as_the_first_stage_is_refused_with_the_fix(ensemble: str) -> None:
    message = refused(WorkflowGraph(), AddStage(stage=OperatorBlueprint(operator=ensemble)))
    assert f"node_1 ({ensemble}) would have no candidates" in message
    assert "it would be the first stage" in message
    assert "samples > 1" in message and "parallel stage" in message


def test_an_ensemble_after_a_single_draw_is_refused() -> None:
    graph = import_dsl("Custom", RULES)
    message = refused(graph, AddStage(stage=OperatorBlueprint(operator="ScEnsemble")))
    assert "node_1 before it is a single draw" in message


def test_an_ensemble_after_a_compound_stage_is_refused() -> None:
    graph = import_dsl("Custom{3} -> Verify ? Revise : done", RULES)
    message = refused(graph, AddStage(stage=OperatorBlueprint(operator="ScEnsemble")))
    assert "node_2 before it is a conditional stage, which offers none" in message


@pytest.mark.parametrize(
    "dsl", ["Custom{3} -> ScEnsemble", "[Programmer, Custom] -> Aggregate", "Plan -> Programmer{4} -> ScEnsemble"]
)
def test_an_ensemble_right_after_a_sampled_node_or_a_parallel_stage_is_accepted(dsl: str) -> None:
    graph = import_dsl(dsl, RULES)
    assert render(graph) == dsl
    assert unfed_ensembles(graph, REGISTRY) == {}


def test_inserting_a_stage_between_a_source_and_its_ensemble_is_refused() -> None:
    graph = import_dsl("Custom{3} -> ScEnsemble", RULES)
    message = refused(graph, AddStage(stage=OperatorBlueprint(operator="Review"), position=1))
    assert "node_2 (ScEnsemble)" in message
    assert render(added(graph, OperatorBlueprint(operator="Review"))) == "Custom{3} -> ScEnsemble -> Review"


def test_removing_the_source_is_refused_until_its_ensemble_goes_first() -> None:
    graph = import_dsl("Custom{3} -> ScEnsemble", RULES)
    assert "node_2 (ScEnsemble)" in refused(graph, DeleteNode(node_id="node_1"))
    assert "node_2 (ScEnsemble)" in refused(graph, ModifyNode(node_id="node_1", operator="Custom", samples=1))
    graph = apply_edit(graph, DeleteNode(node_id="node_2"), RULES).graph
    assert render(apply_edit(graph, DeleteNode(node_id="node_1"), RULES).graph) == ""


def test_modifying_a_single_draw_into_an_ensemble_is_refused() -> None:
    graph = import_dsl("Programmer -> Custom", RULES)
    assert "node_2 (ScEnsemble)" in refused(graph, ModifyNode(node_id="node_2", operator="ScEnsemble"))


def test_an_unfed_ensemble_already_stored_does_not_block_other_edits() -> None:
    """A workflow saved before the rule keeps working: only an edit that creates an unfed ensemble is refused."""
    graph = WorkflowGraph(stages=[build_stage(OperatorBlueprint(operator="ScEnsemble"), 1)], next_index=2)
    assert unfed_ensembles(graph, REGISTRY) == {"node_1": ["ScEnsemble"]}
    assert render(added(graph, OperatorBlueprint(operator="Format"))) == "ScEnsemble -> Format"


def test_imports_refuse_unfed_ensembles() -> None:
    assert "first stage" in _import_error(lambda: import_dsl("ScEnsemble -> Format", RULES))
    stored = WorkflowGraph(stages=[build_stage(OperatorBlueprint(operator="ScEnsemble"), 1)], next_index=2)
    assert "node_1 (ScEnsemble)" in _import_error(lambda: import_json(export_json(stored), RULES))


def _import_error(load: object) -> str:
    with pytest.raises(CanvasError) as caught:
        load()  # type: ignore[operator]
    return caught.value.message


async def test_the_dialect_turn_is_refused_as_feedback_and_costs_one_round() -> None:
    state = CanvasState(
        task=TaskSpec(problem="Return the sum of a list.", task_type="code", entry_point="total"),
        options=CanvasOptions(prompt_turns=False, execute_each_step=False),
    )
    canvas = Canvas(state, REGISTRY)
    result = await canvas.act(
        "<action>add</action><operator>ScEnsemble</operator><prompt>Pick the best program.</prompt>"
    )
    assert not result.ok and result.error_code == "invalid_structure"
    assert "would have no candidates" in result.feedback
    assert canvas.state.graph.stages == [] and canvas.state.rounds_used == 1
    result = await canvas.act(
        "<action>add</action><operator>Programmer</operator><samples>3</samples><prompt>Write the function.</prompt>"
    )
    assert result.ok
    result = await canvas.act(
        "<action>add</action><operator>ScEnsemble</operator><prompt>Pick the best program.</prompt>"
    )
    assert result.ok and render(canvas.state.graph) == "Programmer{3} -> ScEnsemble"
