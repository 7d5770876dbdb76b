"""Which workflows a director built, per source: a Markdown table from `flowsteer eval` reports.

Why: a director's score says how well its workflows did; this says what they were. For a director checked on
an executor that is not the point (a scripted one, say), it is the only figure to read.

    python scripts/director_workflows.py runs/director-v0-workflows-t0/report.json --director policy \
        --label "greedy (T = 0)"
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from flowsteer_mcp.director.library import DEFAULT_WORKFLOW, library_workflow


def workflow_table(reports: Sequence[Path], director: str, labels: Sequence[str]) -> str:
    """One row per (run, source, workflow): how many episodes ended with it, and whether it is the default's."""
    rows = [
        "| run | source | workflow built | episodes | the library default? |",
        "|---|---|---|---:|---|",
    ]
    for path, label in zip(reports, labels, strict=True):
        items = [item for item in json.loads(path.read_text(encoding="utf-8"))["items"] if item["director"] == director]
        by_source: dict[tuple[str, str], Counter[str]] = {}
        for item in items:
            by_source.setdefault((item["source"], item["problem_type"]), Counter())[item["dsl"] or "(none)"] += 1
        for (source, task_type), counts in sorted(by_source.items()):
            default = library_workflow(task_type, DEFAULT_WORKFLOW[task_type]).dsl()
            total = sum(counts.values())
            for dsl, count in counts.most_common():
                mark = f"yes (`{DEFAULT_WORKFLOW[task_type]}`)" if dsl == default else "no"
                cell = dsl.replace("|", "\\|")  # a pipe ends a table cell even inside a code span
                rows.append(f"| {label} | {source} (n = {total}) | `{cell}` | {count} | {mark} |")
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("reports", type=Path, nargs="+", help="report.json files written by flowsteer eval")
    parser.add_argument("--director", default="policy")
    parser.add_argument("--label", action="append", help="one per report (default: the report's folder name)")
    args = parser.parse_args(argv)
    labels = args.label or [path.parent.name for path in args.reports]
    if len(labels) != len(args.reports):
        parser.error("give one --label per report")
    sys.stdout.write(workflow_table(args.reports, args.director, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
