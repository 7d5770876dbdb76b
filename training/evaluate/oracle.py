"""The oracle of a sampled workflow: would any of its draws have been right? (pass@k of the very same draws)

Why: a workflow that samples k candidates and selects one can never beat the best of them, so the share of
problems where some draw is right is its ceiling, and the gap to it says how much the selection loses. It is
read from the episode's final run: the draws of the workflow's first sampled node (its trace rows that share
one node id), each graded by the same scorer as answers. Programs are graded whole, before the journal clips
trace outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from training.data import Problem
from training.episodes import ScoreFn, grade


def sampled_draws(trace: Sequence[dict[str, Any]]) -> list[str]:
    """The successful outputs of the first node the run called more than once (its draws), in draw order."""
    counts: dict[str, int] = {}
    for row in trace:
        if not row.get("skipped"):
            counts[str(row.get("node_id"))] = counts.get(str(row.get("node_id")), 0) + 1
    node = next((node_id for node_id, count in counts.items() if count > 1), None)
    if node is None:
        return []
    return [
        str(row["output"])
        for row in trace
        if row.get("node_id") == node and row.get("ok") and row.get("iteration") is None and row.get("output")
    ]


async def oracle_correct(score_fn: ScoreFn, problem: Problem, trace: Sequence[dict[str, Any]]) -> bool | None:
    """True when some draw of the first sampled node is graded correct; None when the run sampled nothing."""
    draws = sampled_draws(trace)
    if not draws:
        return None
    for draw in draws:
        graded = await grade(score_fn, problem, draw, oracle=True)
        if graded.result is not None and graded.result.correct:
            return True
    return False
