"""The first-vs-last-quarter comparison within problems: does the policy do better on the same problem later?

Why: each step draws its problems from the training set, so a last quarter that happened to draw easier problems
looks like learning in the pooled test. Here only problems drawn in both quarters count, and the quarter labels are
permuted within each problem (a stratified permutation test), so problem difficulty cancels out.

The statistic is the mean, over the matched problems, of (mean value in the last quarter - mean value in the first
quarter). The one-sided p (H1: last > first) is (1 + #{relabellings whose statistic reaches the observed one}) /
(1 + resamples); each relabelling shuffles every problem's trajectories and keeps its quarter sizes.

The same test also compares each problem's first draw with its last (`first_and_last_draws`): once a run has passed
over its data more than once, every problem drawn twice is its own control, whichever quarter its draws fell in.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from statistics import fmean

from pydantic import BaseModel

MIN_MATCHED_PROBLEMS = 2


class MatchedTest(BaseModel):
    problems: int  # problems on both sides (drawn in both quarters, or in two steps or more)
    first_n: int  # their trajectories on the earlier side
    last_n: int  # and on the later one
    difference: float  # mean over problems of (later mean - earlier mean)
    improved: int  # problems whose later mean is higher
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


def first_and_last_draws(
    draws: Sequence[tuple[int, str, float]],
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """From (step, problem id, value) rows: the trajectories of each problem's first step and of its last step,
    for the problems drawn in at least two steps."""
    steps: dict[str, set[int]] = {}
    for step, problem, _ in draws:
        steps.setdefault(problem, set()).add(step)
    bounds = {problem: (min(seen), max(seen)) for problem, seen in steps.items() if len(seen) > 1}
    first = [(problem, value) for step, problem, value in draws if problem in bounds and step == bounds[problem][0]]
    last = [(problem, value) for step, problem, value in draws if problem in bounds and step == bounds[problem][1]]
    return first, last


def matched_markdown(test: MatchedTest | None, *, within: str, earlier: str, later: str) -> str:
    """The report's line for a within-problem test; `within` names the problems it counts (e.g. "drawn in both
    quarters"), `earlier` and `later` the two sides."""
    if test is None:
        return (
            f"- {earlier} vs {later}: fewer than {MIN_MATCHED_PROBLEMS} problems {within}, so there is no matched test"
        )
    return (
        f"- {earlier} vs {later}, within problems (the {test.problems} {within}; {test.first_n} and {test.last_n} "
        f"trajectories): mean difference {test.difference:+.4f}, higher on {test.improved} and lower on "
        f"{test.worsened} problems; stratified permutation test, one-sided: p = {test.permutation_p:.4g}"
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
