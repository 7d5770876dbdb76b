"""The oracle of a sampled workflow: would any of its draws have been right? (pass@k of the very same draws)

Why: a workflow that samples k candidates and selects one can never beat the best of them, so the share of
problems where some draw is right is its ceiling, and the gap to it says how much the selection loses. It is
read from the episode's final run: the draws of the workflow's first sampled node (its trace rows that share
one node id), each graded by the same scorer as answers. Programs are graded whole, before the journal clips
trace outputs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from training.data import Problem
from training.episodes import ScoreFn, grade

_DRAW_NOTE = re.compile(r"(draw \d+ of \d+|sampled draw):")  # how the engine labels a sampled node's draws


def sampled_draws(trace: Sequence[dict[str, Any]]) -> list[str]:
    """The successful outputs of the run's first sampled node, in draw order: a node the engine labelled as
    drawn (also when a stopping rule let it make one draw) or, failing that, one it called more than once."""
    counts: dict[str, int] = {}
    labelled: list[str] = []
    for row in trace:
        if row.get("skipped"):
            continue
        node_id = str(row.get("node_id"))
        counts[node_id] = counts.get(node_id, 0) + 1
        if _DRAW_NOTE.match(str(row.get("note") or "")) and node_id not in labelled:
            labelled.append(node_id)
    node = labelled[0] if labelled else next((n for n, count in counts.items() if count > 1), None)
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
