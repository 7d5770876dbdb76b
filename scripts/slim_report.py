"""Copy an evaluation's report.json without its per-episode traces, for publishing under `docs/runs/`.

Why: a full report keeps every node's output of every episode (several MB per slice); the published tables,
`scripts/pareto_report.py` and `scripts/library_measurements.py` read only the graded items (score, oracle,
tokens, calls, workflow), so the repository keeps those and the run's own `runs/` folder keeps the traces.

    python scripts/slim_report.py runs/full34-mbpp/report.json docs/runs/full34-code/mbpp/report.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.evaluate.results import ItemResult


def slim(report: dict[str, Any]) -> dict[str, Any]:
    """The report with each item's trace emptied; every item must still be a valid `ItemResult`."""
    items = [ItemResult.model_validate({**item, "trace": []}).model_dump(mode="json") for item in report["items"]]
    return {**report, "items": items}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("source", type=Path, help="a report.json written by flowsteer eval")
    parser.add_argument("target", type=Path, help="where the copy without traces goes")
    args = parser.parse_args(argv)
    if args.source.resolve() == args.target.resolve():
        raise SystemExit("the copy would replace its source; choose another target")
    report = json.loads(args.source.read_text(encoding="utf-8"))
    args.target.parent.mkdir(parents=True, exist_ok=True)
    args.target.write_text(json.dumps(slim(report)) + "\n", encoding="utf-8")
    print(f"{args.target}: {len(report['items'])} items, traces left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
