"""Workflow families: named, overlapping kinds of workflow, read from an episode's end-of-episode graph stats.

Why: a reward curve alone cannot show *what* the policy learned. Logging, per step, the share of trajectories
in each family ("uses execution-based selection", "votes over samples") makes a shift in behaviour visible and
lets the trend test check that shares move toward the families that score higher.

A family is a predicate over the stats dict the canvas returns through MCP (`GraphStats` dumped: `operators`,
`max_samples`, `structures`, ...) plus the problem type. Families overlap, so a trajectory has a set of them.
A failed trajectory has no stats; it is classified like the empty workflow its reward treats it as.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CODE_GENERATORS = frozenset({"Programmer"})  # operators whose candidates are programs
REVISERS = frozenset({"Revise", "Review"})
LONG_WORKFLOW = 4  # operators; every library workflow but two classics fits, the longest has 7


@dataclass(frozen=True)
class WorkflowTraits:
    """The parts of the graph stats the families read, with the defaults of an empty workflow."""

    operators: frozenset[str]
    total_operators: int
    max_samples: int
    structures: frozenset[str]
    prompted_solvers: int
    problem_type: str

    @classmethod
    def of(cls, stats: Mapping[str, Any], problem_type: str) -> WorkflowTraits:
        operators = stats.get("operators") or []
        return cls(
            operators=frozenset(str(name) for name in operators),
            total_operators=int(stats.get("total_operators") or len(operators)),
            max_samples=int(stats.get("max_samples") or 1),
            structures=frozenset(str(kind) for kind in stats.get("structures") or []),
            prompted_solvers=int(stats.get("prompted_solvers") or 0),
            problem_type=problem_type,
        )

    @property
    def several_candidates(self) -> bool:
        """Whether some stage produces more than one candidate (drawn k times, or parallel branches)."""
        return self.max_samples > 1 or "parallel" in self.structures


def _execution_selection(traits: WorkflowTraits) -> bool:
    # On code the sandbox picks among program candidates (ScEnsemble, or the CodeT peer) or checks by public tests
    # (Test).
    if traits.problem_type != "code":
        return False
    selects = bool(traits.operators & {"ScEnsemble", "CodeT"})
    picks = selects and bool(traits.operators & CODE_GENERATORS) and traits.several_candidates
    return picks or "Test" in traits.operators


@dataclass(frozen=True)
class Family:
    name: str
    meaning: str
    applies: Callable[[WorkflowTraits], bool]


FAMILIES: tuple[Family, ...] = (
    Family("no_workflow", "no operator at all (failed trajectories included)", lambda s: s.total_operators == 0),
    Family("single_call", "one operator drawn once", lambda s: s.total_operators == 1 and s.max_samples == 1),
    Family("sampling", "some operator drawn more than once (samples > 1)", lambda s: s.max_samples > 1),
    Family("vote", "a ScEnsemble picks among candidates", lambda s: "ScEnsemble" in s.operators),
    Family(
        "execution_selection",
        "code: ScEnsemble (or CodeT) over several program candidates, or a Test checker",
        _execution_selection,
    ),
    Family(
        "program_of_thought",
        "math: a Programmer computes the answer",
        lambda s: s.problem_type == "math" and "Programmer" in s.operators,
    ),
    Family("revision", "a Revise or Review stage", lambda s: bool(s.operators & REVISERS)),
    Family(
        "instructed",
        "a solver has a written instruction (first in a workflow, added to the direct call)",
        lambda s: s.prompted_solvers > 0,
    ),
    Family("structured", "any structure (parallel, conditional, loop, ...)", lambda s: bool(s.structures)),
    Family(
        "long",
        f"more than {LONG_WORKFLOW} operators (how padding shows: stages appended until the rounds run out)",
        lambda s: s.total_operators > LONG_WORKFLOW,
    ),
)
FAMILY_NAMES: tuple[str, ...] = tuple(family.name for family in FAMILIES)


def families_of(stats: Mapping[str, Any], problem_type: str) -> frozenset[str]:
    """The families a workflow belongs to, from its end-of-episode graph stats and the problem type."""
    traits = WorkflowTraits.of(stats, problem_type)
    return frozenset(family.name for family in FAMILIES if family.applies(traits))


def family_metrics(memberships: Sequence[Iterable[str]], rewards: Sequence[float]) -> dict[str, float]:
    """Per family: `family/<name>`, the share of trajectories in it, and `family_reward/<name>`, their mean
    reward (left out when no trajectory is in it). One membership set and one reward per trajectory."""
    if len(memberships) != len(rewards):
        raise ValueError(f"{len(memberships)} membership sets but {len(rewards)} rewards")
    if not rewards:
        return {}
    sets = [frozenset(names) for names in memberships]
    out: dict[str, float] = {}
    for name in FAMILY_NAMES:
        members = [reward for names, reward in zip(sets, rewards, strict=True) if name in names]
        out[f"family/{name}"] = len(members) / len(rewards)
        if members:
            out[f"family_reward/{name}"] = math.fsum(members) / len(members)
    return out


def operator_push(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean over kept trajectories of advantage x operator count: the sign of the update's pull on workflow size.

    Why: each turn carries its trajectory's advantage, and every operator is one `add` turn, so this is how hard
    the step pushes `add` against `finish` overall: what the outcomes ask of workflow size. It does not predict
    the drift by itself (docs/runs/cpu-warmstart, sections 12-13). None when no trajectory was kept.
    """
    kept = [row for row in rows if row.get("kept") and row.get("advantage") is not None]
    if not kept:
        return None
    return math.fsum(float(row["advantage"]) * len(row["operators"]) for row in kept) / len(kept)
