"""Graph statistics, computed from the typed graph (never from text). Rewards and the finish gate read them."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel

from flowsteer_mcp.canvas.kinds import structure_kinds
from flowsteer_mcp.canvas.model import WorkflowGraph
from operators.base import Category, Role
from operators.registry import OperatorRegistry


class GraphStats(BaseModel):
    total_operators: int = 0  # every operator node once (a loop body counts once, whatever its count)
    unique_types: int = 0
    operators: list[str] = []  # operator names in stage order
    stage_count: int = 0
    # The structure kinds the graph uses (registration order): the registered kinds whose contract says
    # `is_structure`. The finish gate and the reward read this list, never kind names of their own, so they
    # agree on what counts, for a kind registered later too.
    structures: list[str] = []
    # The paper's three structures as flags: part of every tool's `state.stats` output (clients and recorded
    # journals read them). Derived from `structures`; new code reads `structures`.
    has_parallel: bool = False
    has_conditional: bool = False
    has_loop: bool = False
    category_counts: dict[str, int] = {}
    has_checker: bool = False
    # Sampling is a workflow family of its own (draw k, then select), which the operator names alone cannot show.
    max_samples: int = 1  # the largest `samples` of any operator node
    sampled_nodes: int = 0  # operator nodes drawn more than once
    # A solver that starts the workflow makes the direct call where it has one, with its node prompt added; after
    # earlier steps the prompt is its job. Instructed solvers are a family, since a policy writes prompts inline.
    prompted_solvers: int = 0  # solving-category nodes with a non-blank prompt

    @property
    def has_structure(self) -> bool:
        return bool(self.structures)

    @property
    def structure_kinds(self) -> int:
        return len(self.structures)


def graph_stats(graph: WorkflowGraph, registry: OperatorRegistry) -> GraphStats:
    nodes = list(graph.iter_operator_nodes())
    names = [node.operator for node in nodes]
    categories: Counter[str] = Counter()
    has_checker = False
    prompted_solvers = 0
    for node in nodes:
        spec = registry.spec(node.operator)
        categories[spec.category.value] += 1
        has_checker = has_checker or spec.role == Role.CHECKER
        prompted_solvers += spec.category == Category.SOLVING and bool((node.prompt or "").strip())
    used = {stage.kind for stage in graph.stages}
    structures = [kind.name for kind in structure_kinds() if kind.name in used]
    return GraphStats(
        total_operators=len(names),
        unique_types=len(set(names)),
        operators=names,
        stage_count=len(graph.stages),
        structures=structures,
        has_parallel="parallel" in structures,
        has_conditional="conditional" in structures,
        has_loop="loop" in structures,
        category_counts={c.value: categories.get(c.value, 0) for c in Category},
        has_checker=has_checker,
        max_samples=max((node.samples for node in nodes), default=1),
        sampled_nodes=sum(node.samples > 1 for node in nodes),
        prompted_solvers=prompted_solvers,
    )
