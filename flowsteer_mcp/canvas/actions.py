"""Typed canvas actions and their transactional application to a graph.

`apply_edit` never mutates its input: it validates, builds a new graph and returns it, so an invalid
action leaves the caller's graph exactly as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.canvas.blueprint import StageBlueprint, blueprint_of, build_stage
from flowsteer_mcp.canvas.candidates import refuse_new_unfed_ensembles
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds import kind_of, kinds
from flowsteer_mcp.canvas.model import OperatorNode, WorkflowGraph, children
from flowsteer_mcp.canvas.numbers import MAX_NUMBER
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.text import excerpt
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import OperatorRegistry


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AddStage(_Action):
    """Add an operator or a structure (parallel / conditional / loop / fallback) at `position` (default: append)."""

    action: Literal["add"] = "add"
    stage: StageBlueprint
    position: int | None = None


class DeleteNode(_Action):
    """Delete a stage, or a child when its structure stays valid; `with_parent` deletes the child's whole stage."""

    action: Literal["delete"] = "delete"
    node_id: str
    with_parent: bool = False


class ModifyNode(_Action):
    """Swap the operator of a node (top-level or child), giving it a new prompt (None = operator default) and
    a number of draws (`samples`; None = one draw: a modify replaces the node's settings, as with the prompt)."""

    action: Literal["modify"] = "modify"
    node_id: str
    operator: str
    prompt: str | None = None
    samples: int | None = None


class SetPrompt(_Action):
    action: Literal["set_prompt"] = "set_prompt"
    node_id: str
    prompt: str


class Finish(_Action):
    """Ask to end the episode. `answer` is recorded but never scored: the executed output is the answer."""

    action: Literal["finish"] = "finish"
    answer: str | None = None


EditAction = AddStage | DeleteNode | ModifyNode | SetPrompt
CanvasAction = Annotated[AddStage | DeleteNode | ModifyNode | SetPrompt | Finish, Field(discriminator="action")]


def _aliases() -> dict[str, str]:
    """Child-id suffix aliases the registered kinds accept (the conditional's come from the released
    FlowSteer-8b policy)."""
    return {alias: canonical for kind in kinds() for alias, canonical in kind.id_aliases.items()}


def resolve_node_id(graph: WorkflowGraph, node_id: str) -> str:
    """Canonical id for `node_id` (trimmed, alias-resolved), or a CanvasError listing the existing ids."""
    candidate = node_id.strip()
    if graph.locate(candidate) is None:
        for alias, canonical in _aliases().items():
            if candidate.endswith(alias):
                aliased = candidate[: -len(alias)] + canonical
                if graph.locate(aliased) is not None:
                    return aliased
        existing = ", ".join(graph.node_ids()) or "none (the workflow is empty)"
        raise CanvasError(ErrorCode.UNKNOWN_NODE, f"Node {excerpt(node_id)} not found. Existing node ids: {existing}.")
    return candidate


class EditOutcome(BaseModel):
    graph: WorkflowGraph
    message: str
    node_id: str | None = None


def _describe(stage: StageBlueprint) -> str:
    return kind_of(stage).describe(stage)


def apply_edit(graph: WorkflowGraph, action: EditAction, rules: CanvasRules) -> EditOutcome:
    """Apply one edit to a copy of `graph`; raises CanvasError (graph untouched) when it is invalid."""
    if isinstance(action, AddStage):
        outcome = _add(graph, action, rules)
    elif isinstance(action, DeleteNode):
        outcome = _delete(graph, action)
    elif isinstance(action, ModifyNode):
        outcome = _modify(graph, action, rules)
    else:
        return _set_prompt(graph, action, rules)
    refuse_new_unfed_ensembles(graph, outcome.graph, rules.registry)
    return outcome


def graph_of(
    stages: Sequence[StageBlueprint], registry: OperatorRegistry, options: CanvasOptions | None = None
) -> WorkflowGraph:
    """The graph that adding `stages` in order builds, each add checked as an `act` add is (an ensemble's need
    for candidates included); raises CanvasError at the first stage the canvas would refuse. Why: clients that
    plan workflows off-line (training's transcript variations) ask the canvas, not a copy of its rules."""
    rules = CanvasRules(registry, options or CanvasOptions())
    graph = WorkflowGraph()
    for stage in stages:
        graph = apply_edit(graph, AddStage(stage=stage), rules).graph
    return graph


def _add(graph: WorkflowGraph, action: AddStage, rules: CanvasRules) -> EditOutcome:
    blueprint = rules.blueprint(action.stage, graph)
    index = rules.position(action.position, graph)
    if graph.next_index >= MAX_NUMBER:
        raise CanvasError(
            ErrorCode.LIMIT_EXCEEDED,
            f"This workflow has used all {MAX_NUMBER} node ids. Export it as DSL and import that into a new "
            "workflow (a DSL import numbers the nodes from node_1 again).",
        )
    new = graph.model_copy(deep=True)
    stage = build_stage(blueprint, new.next_index)
    new.stages.insert(index, stage)
    new.next_index += 1
    where = "appended" if index == len(graph.stages) else f"inserted at position {index}"
    return EditOutcome(graph=new, node_id=stage.id, message=f"Added {_describe(blueprint)} as {stage.id} ({where}).")


def _delete(graph: WorkflowGraph, action: DeleteNode) -> EditOutcome:
    node_id = resolve_node_id(graph, action.node_id)
    new = graph.model_copy(deep=True)
    location = new.locate(node_id)
    assert location is not None
    stage = location.stage
    if location.child is None or action.with_parent:
        del new.stages[location.stage_index]
        return EditOutcome(graph=new, message=f"Deleted stage {stage.id}.")
    child = location.child
    shrunk = kind_of(stage).without_child(stage, child.id)
    if shrunk is None:
        raise CanvasError(
            ErrorCode.INVALID_TARGET,
            f"Cannot delete {child.id} alone: {stage.id} would no longer be a valid {stage.kind} stage. "
            f"Delete the whole stage {stage.id} instead (or modify {child.id} to another operator).",
        )
    new.stages[location.stage_index] = shrunk
    return EditOutcome(graph=new, message=f"Deleted {child.id} from {stage.id}.")


def _operator_target(graph: WorkflowGraph, node_id: str) -> tuple[str, OperatorNode]:
    resolved = resolve_node_id(graph, node_id)
    location = graph.locate(resolved)
    assert location is not None
    node = location.node
    if not isinstance(node, OperatorNode):
        kids = ", ".join(n.id for n in children(node))
        raise CanvasError(
            ErrorCode.INVALID_TARGET,
            f"{resolved} is a {node.kind} stage, not an operator; target one of its operator nodes"
            + (f" ({kids})" if kids else " (see the node list)")
            + ".",
        )
    return resolved, node


def _modify(graph: WorkflowGraph, action: ModifyNode, rules: CanvasRules) -> EditOutcome:
    node_id, _ = _operator_target(graph, action.node_id)
    operator = rules.operator(action.operator)
    prompt = rules.prompt(action.prompt)
    samples = rules.samples(action.samples if action.samples is not None else 1)
    new = graph.model_copy(deep=True)
    location = new.locate(node_id)
    assert location is not None and isinstance(location.node, OperatorNode)
    if samples > 1 and location.child is not None and not kind_of(location.stage).child_samples:
        raise CanvasError(
            ErrorCode.INVALID_STRUCTURE,
            f"{node_id} is inside a {location.stage.kind} stage, where no next stage could see its samples; "
            "set samples on an operator stage or a parallel branch.",
        )
    node = location.node
    previous = node.operator
    node.operator = operator
    node.prompt = prompt
    node.samples = samples
    _revalidate_stage(new, location.stage_index, rules)
    drawn = f" ({samples} samples)" if samples > 1 else ""
    return EditOutcome(graph=new, node_id=node_id, message=f"Modified {node_id}: {previous} -> {operator}{drawn}.")


def _revalidate_stage(graph: WorkflowGraph, index: int, rules: CanvasRules) -> None:
    """A modified child must still leave its structure valid (e.g. no ensemble as a parallel branch)."""
    stage = graph.stages[index]
    if not isinstance(stage, OperatorNode):
        rules.blueprint(blueprint_of(stage), WorkflowGraph())


def _set_prompt(graph: WorkflowGraph, action: SetPrompt, rules: CanvasRules) -> EditOutcome:
    node_id, _ = _operator_target(graph, action.node_id)
    prompt = rules.prompt(action.prompt)
    if prompt is None:
        raise CanvasError(ErrorCode.INVALID_PROMPT, "set_prompt needs a prompt text.")
    new = graph.model_copy(deep=True)
    location = new.locate(node_id)
    assert location is not None and isinstance(location.node, OperatorNode)
    location.node.prompt = prompt
    return EditOutcome(graph=new, node_id=node_id, message=f"Prompt set for {node_id} ({location.node.operator}).")


__all__ = [
    "AddStage",
    "CanvasAction",
    "DeleteNode",
    "EditAction",
    "EditOutcome",
    "Finish",
    "ModifyNode",
    "SetPrompt",
    "apply_edit",
    "resolve_node_id",
]
