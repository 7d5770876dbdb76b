"""Contested problems: the training problems on which a transcript collection's workflows disagree.

Why: CWRPO learns only from groups whose rollouts score differently. On most problems the executor's outcome
is fixed by the problem (every workflow solves it, or none does), so a group drawn there has zero variance and
teaches nothing; `docs/runs/cpu-warmstart` run 2 drew four such groups in its first step. A screening collection
(for instance `greedy` against `direct8-exec` on every training problem) marks the problems where the choice of
workflow decides the outcome, and `data.contested_in` trains on those. An evaluation's journal (`items.jsonl` of
`flowsteer eval --out DIR`, with two or more directors on the same training problems) is a screen too: its
items carry the same problem ids and grades, so a run already made to choose a workflow need not be repeated;
its `report.json`, which docs/runs publishes, as well.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel

from training.data import Problem
from training.evaluate.journal import JournalError, is_journal, read_journal_items
from training.sft.dataset import TranscriptError, read_transcript_text, transcript_files

log = structlog.get_logger(__name__)


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


def _report_records(file: Path) -> list[dict[str, Any]]:
    """An evaluation report's items (`report.json` of `flowsteer eval --out`) as screen records. A published
    run keeps its report in docs/runs while its journal stays in the gitignored runs/, so a config that names
    the report trains the same problems from any clone."""
    report = json.loads(file.read_text(encoding="utf-8"))
    items = report.get("items") if isinstance(report, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) and "problem_id" in i for i in items):
        raise TranscriptError(f"{file} is not an evaluation report (a report.json written by `flowsteer eval --out`)")
    return [{"problem_id": i["problem_id"], "correctness": i.get("score"), "error": i.get("error")} for i in items]


def _file_records(file: Path) -> list[dict[str, Any]]:
    """A transcript file's episodes, or an evaluation journal's or report's items as screen records (`score` is
    the grade)."""
    if file.suffix == ".json":
        return _report_records(file)
    if not file.name.endswith(".gz") and is_journal(file):
        items = read_journal_items(file)
        return [{"problem_id": i.problem_id, "correctness": i.score, "error": i.error} for i in items]
    return [json.loads(line) for line in read_transcript_text(file).splitlines() if line.strip()]


def contested_screen(paths: Sequence[str | Path]) -> ContestedScreen:
    """The screen of the transcript files or folders at `paths` (as `flowsteer traces collect` writes them), of
    evaluation journals (`items.jsonl`, or the `flowsteer eval --out` folder holding one), or of evaluation
    reports (a `report.json` file, named as a file)."""
    return screen_records(record for file in transcript_files(paths) for record in _file_records(file))


def keep_contested(problems: list[Problem], screens: list[str]) -> list[Problem]:
    """The problems the screening transcripts at `screens` found contested, in data order; a screen that names
    no problem of the data (another dataset, or a dev item) is refused rather than silently training on none."""
    try:
        screen = contested_screen(screens)
    except (TranscriptError, JournalError, OSError, KeyError, json.JSONDecodeError) as error:
        raise ValueError(f"data.contested_in: cannot read the screening transcripts ({error})") from None
    wanted = set(screen.contested)
    kept = [problem for problem in problems if problem.id in wanted]
    if not kept:
        raise ValueError(
            f"data.contested_in: none of the {len(screen.contested)} contested problems of {', '.join(screens)} "
            f"is among the {len(problems)} training problems (screened with another dataset or dev split?)"
        )
    log.info(
        "contested_problems",
        screened=screen.graded_problems,
        contested=len(screen.contested),
        training=len(kept),
        of=len(problems),
    )
    return kept
