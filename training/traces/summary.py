"""`flowsteer traces summary DIR`: how each library workflow scored on the collection's training problems.

Why: the warm start is balanced over workflows good and bad, and CWRPO should move the policy toward the ones
that score; this table says which those are on the problems the policy trains on (not the dev slices), with
what they cost, so a shift in the run's family shares can be read against it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from training.sft.dataset import TranscriptError, read_transcript_records
from training.traces.contested import screen_records


class WorkflowScore(BaseModel):
    task_type: str
    workflow: str  # the library workflow (variations count toward it)
    episodes: int
    problems: int
    mean_correctness: float
    mean_tokens: float
    errors: int


def score_rows(records: Iterable[dict[str, Any]]) -> list[WorkflowScore]:
    """One row per (task type, library workflow), best mean correctness first within a task type."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[(str(record.get("task_type", "?")), str(record.get("base_workflow", record.get("workflow"))))].append(
            record
        )
    rows = [
        WorkflowScore(
            task_type=task_type,
            workflow=workflow,
            episodes=len(items),
            problems=len({item.get("problem_id") for item in items}),
            mean_correctness=sum(float(item.get("correctness") or 0.0) for item in items) / len(items),
            mean_tokens=sum(float(item.get("tokens") or 0) for item in items) / len(items),
            errors=sum(1 for item in items if item.get("error")),
        )
        for (task_type, workflow), items in groups.items()
    ]
    return sorted(rows, key=lambda row: (row.task_type, -row.mean_correctness, row.mean_tokens))


def markdown(rows: Sequence[WorkflowScore]) -> str:
    lines = [
        "| task type | workflow | episodes | problems | mean C | tokens / episode | errors |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.task_type} | {r.workflow} | {r.episodes} | {r.problems} | {r.mean_correctness:.2f} | "
        f"{r.mean_tokens:.0f} | {r.errors} |"
        for r in rows
    ]
    return "\n".join(lines)


def summary_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="flowsteer traces summary",
        description="Mean correctness and cost of each library workflow in a transcript collection.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="DIR_OR_FILE")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a Markdown table")
    args = parser.parse_args(argv)
    try:
        records = read_transcript_records(args.paths)
        rows = score_rows(records)
    except (TranscriptError, OSError, json.JSONDecodeError) as error:
        print(f"flowsteer traces summary: error: {error}", file=sys.stderr)
        return 2
    if not rows:
        print("flowsteer traces summary: error: the collection holds no episodes", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([row.model_dump() for row in rows], indent=2))
        return 0
    screen = screen_records(records)
    print(markdown(rows))
    print(
        f"\nContested problems (graded episodes disagree on C): {len(screen.contested)} of {screen.graded_problems}"
        " (train on them with data.contested_in)"
    )
    return 0
