"""Paired comparison of two directors on the same problems, with the exact McNemar test.

Two directors' confidence intervals overlap on small slices even when one is clearly better, because both
run on the same problems and most problems are solved by both or by neither. Only the discordant problems
(one director right, the other wrong) carry the difference; McNemar's exact test asks whether their split
could be a fair coin. The first director of the run is the baseline the others are compared with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from flowsteer_mcp.director.graded import ItemResult


class PairedComparison(BaseModel):
    """`director` against `baseline` on the `n` problems of `source` that both ran."""

    model_config = ConfigDict(frozen=True)

    source: str
    director: str
    baseline: str
    n: int
    better: int  # director strictly correct, baseline not
    worse: int  # baseline strictly correct, director not
    p_value: float  # exact two-sided McNemar (binomial on the discordant problems)


def mcnemar_exact(better: int, worse: int) -> float:
    """Two-sided exact p-value of `better` vs `worse` discordant pairs under a fair split (1.0 when none)."""
    if better < 0 or worse < 0:
        raise ValueError(f"counts must be non-negative, got {better} and {worse}")
    discordant = better + worse
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, k) for k in range(min(better, worse) + 1)) / 2**discordant
    return min(1.0, 2 * tail)


def present_directors(items: Sequence[ItemResult], directors: Sequence[str]) -> list[str]:
    """The run's directors that have items here, in run order: the first is the baseline of the comparisons."""
    ran = {item.director for item in items}
    return [name for name in directors if name in ran]


def _compare(label: str, items: Sequence[ItemResult], directors: Sequence[str]) -> list[PairedComparison]:
    """Every director after the first present one against it, on the problems both ran, labelled `label`."""
    correct: dict[str, dict[str, bool]] = {}  # director -> problem id -> strictly correct
    for item in items:
        correct.setdefault(item.director, {})[item.problem_id] = item.correct
    present = present_directors(items, directors)
    if len(present) < 2:
        return []
    baseline, *others = present
    theirs = correct[baseline]
    comparisons = []
    for director in others:
        mine = correct[director]
        shared = mine.keys() & theirs.keys()
        better = sum(mine[pid] and not theirs[pid] for pid in shared)
        worse = sum(theirs[pid] and not mine[pid] for pid in shared)
        comparisons.append(
            PairedComparison(
                source=label,
                director=director,
                baseline=baseline,
                n=len(shared),
                better=better,
                worse=worse,
                p_value=mcnemar_exact(better, worse),
            )
        )
    return comparisons


def paired_comparisons(items: Sequence[ItemResult], directors: Sequence[str]) -> list[PairedComparison]:
    """Every director after the first against the first, per source, on the problems both ran."""
    by_source: dict[str, list[ItemResult]] = {}
    for item in items:
        by_source.setdefault(item.source, []).append(item)
    return [pair for source, group in by_source.items() for pair in _compare(source, group, directors)]


def pooled_label(problem_type: str, sources: Sequence[str]) -> str:
    return f"{problem_type} pooled ({' + '.join(sources)})"


def pooled_comparisons(items: Sequence[ItemResult], directors: Sequence[str]) -> list[PairedComparison]:
    """The same comparison over all datasets of one task type (e.g. HumanEval + MBPP), where a run has several.

    Why: a claim such as "the code workflow beats direct" is about the task type, and pooling the paired
    problems of its datasets is the test of that claim (problem ids carry their dataset, so none collide).
    """
    by_type: dict[str, list[ItemResult]] = {}
    for item in items:
        by_type.setdefault(item.problem_type, []).append(item)
    pooled = []
    for problem_type, group in by_type.items():
        sources = list(dict.fromkeys(item.source for item in group))
        if len(sources) >= 2:
            pooled.extend(_compare(pooled_label(problem_type, sources), group, directors))
    return pooled
