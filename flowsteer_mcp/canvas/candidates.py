"""Candidate sources: an ensemble (an operator whose spec `needs_candidates`, e.g. ScEnsemble) chooses among
the outputs of the stage right before it, so that stage must offer some: a parallel stage, or an operator
sampled more than once (`samples > 1`).

Why the canvas checks this at edit time: an ensemble anywhere else fails on every run with "no candidates",
so accepting the edit only spends the agent's turn, and often its whole episode, on a workflow that cannot
work (docs/design/canvas.md, "Ensembles need candidates"). An edit may not create such an ensemble; one
already on a canvas (a workflow stored before this rule) does not block unrelated edits.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds import OperatorNode, kind_of
from flowsteer_mcp.canvas.model import Stage, WorkflowGraph, operator_nodes
from operators.registry import OperatorRegistry


def offers_candidates(stage: Stage) -> bool:
    """Whether the stage after this one sees candidates: a parallel stage, or an operator drawn k > 1 times."""
    return kind_of(stage).offers_candidates or (isinstance(stage, OperatorNode) and stage.samples > 1)


def ensembles_in(stage: Stage, registry: OperatorRegistry) -> list[str]:
    """The operators of `stage` that need candidates, sorted and without repeats."""
    names = {node.operator for node in operator_nodes(stage)}
    return sorted(n for n in names if n in registry and registry.spec(n).needs_candidates)


def unfed_ensembles(graph: WorkflowGraph, registry: OperatorRegistry) -> dict[str, list[str]]:
    """Stage id -> its ensemble operators, for every stage whose ensembles would find no candidates."""
    return {graph.stages[index].id: names for index, names in _unfed(graph, registry)}


def _unfed(graph: WorkflowGraph, registry: OperatorRegistry) -> list[tuple[int, list[str]]]:
    found = []
    for index, stage in enumerate(graph.stages):
        names = ensembles_in(stage, registry)
        if names and not (index > 0 and offers_candidates(graph.stages[index - 1])):
            found.append((index, names))
    return found


def refuse_new_unfed_ensembles(before: WorkflowGraph, after: WorkflowGraph, registry: OperatorRegistry) -> None:
    """Raise a CanvasError when `after` has an ensemble without candidates that `before` did not have."""
    known = unfed_ensembles(before, registry)
    fresh = [(index, names) for index, names in _unfed(after, registry) if after.stages[index].id not in known]
    if not fresh:
        return
    index, names = fresh[0]
    previous = after.stages[index - 1] if index > 0 else None
    if previous is None:
        source = "it would be the first stage"
    elif isinstance(previous, OperatorNode):
        source = f"{previous.id} before it is a single draw"
    else:
        source = f"{previous.id} before it is a {previous.kind} stage, which offers none"
    raise CanvasError(
        ErrorCode.INVALID_STRUCTURE,
        f"{after.stages[index].id} ({', '.join(names)}) would have no candidates to choose from: an ensemble "
        f"chooses among the outputs of the stage right before it, and {source}. Put a sampled solver (samples > 1, "
        "e.g. 3) or a parallel stage right before it; to answer with one solver, add the solver alone.",
    )


__all__ = ["ensembles_in", "offers_candidates", "refuse_new_unfed_ensembles", "unfed_ensembles"]
