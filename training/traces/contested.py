"""Contested problems: the training problems on which a transcript collection's workflows disagree.

Why: CWRPO learns only from groups whose rollouts score differently. On most problems the executor's outcome
is fixed by the problem (every workflow solves it, or none does), so a group drawn there has zero variance and
teaches nothing; `docs/runs/cpu-warmstart` run 2 drew four such groups in its first step. A screening collection
(for instance `greedy` against `direct8-exec` on every training problem) marks the problems where the choice of
workflow decides the outcome, and `data.contested_in` trains on those.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from training.sft.dataset import read_transcript_records


class ContestedScreen(BaseModel):
    """What a screening collection says: the contested problem ids, and how many graded problems it saw."""

    contested: list[str]  # sorted problem ids whose graded episodes scored differently
    graded_problems: int  # problems with at least two graded (error-free) episodes


def screen_records(records: Iterable[dict[str, Any]]) -> ContestedScreen:
    """Episodes that failed to run or grade (`error`) say nothing about the workflow and are left out."""
    outcomes: dict[str, set[float]] = defaultdict(set)
    episodes: dict[str, int] = defaultdict(int)
    for record in records:
        if record.get("error"):
            continue
        problem_id = str(record["problem_id"])
        outcomes[problem_id].add(float(record.get("correctness") or 0.0))
        episodes[problem_id] += 1
    graded = [problem_id for problem_id, count in episodes.items() if count >= 2]
    return ContestedScreen(
        contested=sorted(problem_id for problem_id in graded if len(outcomes[problem_id]) > 1),
        graded_problems=len(graded),
    )


def contested_screen(paths: Sequence[str | Path]) -> ContestedScreen:
    """The screen of the transcript files or folders at `paths` (as `flowsteer traces collect` writes them)."""
    return screen_records(read_transcript_records(paths))
