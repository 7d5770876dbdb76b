"""The first-vs-last-quarter comparison within problems: does the policy do better on the same problem later?

Why: each step draws its problems from the training set, so a last quarter that happened to draw easier problems
looks like learning in the pooled test. Here only problems drawn in both quarters count, and the quarter labels are
permuted within each problem (a stratified permutation test), so problem difficulty cancels out.

The statistic is the mean, over the matched problems, of (mean value in the last quarter - mean value in the first
quarter). The one-sided p (H1: last > first) is (1 + #{relabellings whose statistic reaches the observed one}) /
(1 + resamples); each relabelling shuffles every problem's trajectories and keeps its quarter sizes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from statistics import fmean

from pydantic import BaseModel

MIN_MATCHED_PROBLEMS = 2


class MatchedTest(BaseModel):
    problems: int  # problems drawn in both quarters
    first_n: int  # their trajectories in the first quarter
    last_n: int  # and in the last
    difference: float  # mean over problems of (last mean - first mean)
    improved: int  # problems whose last-quarter mean is higher
    worsened: int  # and lower
    permutation_p: float


def matched_test(
    first: Sequence[tuple[str, float]], last: Sequence[tuple[str, float]], rng: random.Random, resamples: int
) -> MatchedTest | None:
    """The within-problem test over (problem id, value) pairs; None with fewer than 2 problems in both quarters."""
    pairs = _by_problem(first, last)
    if len(pairs) < MIN_MATCHED_PROBLEMS:
        return None
    observed = _statistic(pairs)
    tolerance = 1e-12 * max(1.0, abs(observed))  # ties with the observed statistic count as reaching it
    pooled = [([*early, *late], len(early)) for early, late in pairs]
    reached = 0
    for _ in range(resamples):
        shuffled = []
        for values, split in pooled:
            rng.shuffle(values)
            shuffled.append((values[:split], values[split:]))
        if _statistic(shuffled) >= observed - tolerance:
            reached += 1
    deltas = [fmean(late) - fmean(early) for early, late in pairs]
    return MatchedTest(
        problems=len(pairs),
        first_n=sum(len(early) for early, _ in pairs),
        last_n=sum(len(late) for _, late in pairs),
        difference=observed,
        improved=sum(delta > 0 for delta in deltas),
        worsened=sum(delta < 0 for delta in deltas),
        permutation_p=(1 + reached) / (1 + resamples),
    )


def matched_markdown(test: MatchedTest | None) -> str:
    """The report's line for the within-problem test."""
    if test is None:
        return (
            f"- within problems: fewer than {MIN_MATCHED_PROBLEMS} problems were drawn in both quarters, "
            "so there is no matched test"
        )
    return (
        f"- within problems (the {test.problems} drawn in both quarters; {test.first_n} and {test.last_n} "
        f"trajectories): mean difference {test.difference:+.4f}, higher on {test.improved} and lower on "
        f"{test.worsened}; stratified permutation test, one-sided: p = {test.permutation_p:.4g}"
    )


def _by_problem(
    first: Sequence[tuple[str, float]], last: Sequence[tuple[str, float]]
) -> list[tuple[list[float], list[float]]]:
    early: dict[str, list[float]] = {}
    late: dict[str, list[float]] = {}
    for problem, value in first:
        early.setdefault(problem, []).append(value)
    for problem, value in last:
        late.setdefault(problem, []).append(value)
    return [(early[problem], late[problem]) for problem in sorted(early.keys() & late.keys())]


def _statistic(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
    return math.fsum(fmean(late) - fmean(early) for early, late in pairs) / len(pairs)
