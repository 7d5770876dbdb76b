"""Paired comparison of one evaluation's directors with directors of other, published evaluations.

Why: a director that costs an hour to rerun (a library workflow on three dev slices) need not run again to be
compared with a new one, when its published report holds every item under the same executor and engine
settings. The comparison is still paired by problem id, on the problems both ran. It is weaker than one run,
because vLLM in bfloat16 is not bitwise deterministic across batches; say so wherever its numbers appear.

    .venv/bin/python scripts/paired_vs_published.py runs/eval/report.json \
        --published docs/runs/full-code/best-two/report.json=template:direct8-exec --baseline direct
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from training.evaluate.paired import PairedComparison, paired_comparisons, pooled_comparisons
from training.evaluate.results import ItemResult

PUBLISHED_SUFFIX = " (published)"


def report_items(path: Path) -> list[ItemResult]:
    return [ItemResult.model_validate(item) for item in json.loads(path.read_text(encoding="utf-8"))["items"]]


def published_items(spec: str, wanted: set[tuple[str, str]]) -> list[ItemResult]:
    """`REPORT.json=DIRECTOR`: that director's items on the (source, problem) pairs of the run, renamed."""
    path, _, director = spec.rpartition("=")
    if not path or not director:
        raise SystemExit(f"--published {spec!r}: expected REPORT.json=DIRECTOR")
    items = [item for item in report_items(Path(path)) if item.director == director]
    if not items:
        raise SystemExit(f"{path} holds no items of director {director!r}")
    return [
        item.model_copy(update={"director": director + PUBLISHED_SUFFIX})
        for item in items
        if (item.source, item.problem_id) in wanted
    ]


def all_pooled(items: Sequence[ItemResult], directors: Sequence[str]) -> list[PairedComparison]:
    """Every task type together: the claim "beats direct on the dev slices" is about all of them."""
    return [
        pair.model_copy(update={"source": "all pooled"})
        for pair in pooled_comparisons([item.model_copy(update={"problem_type": "all"}) for item in items], directors)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="report.json of the run")
    parser.add_argument("--published", action="append", default=[], metavar="REPORT.json=DIRECTOR")
    parser.add_argument("--baseline", default="direct", help="the director the others are compared with")
    args = parser.parse_args(argv)
    items = report_items(args.report)
    wanted = {(item.source, item.problem_id) for item in items}
    for spec in args.published:
        items += published_items(spec, wanted)
    directors = [args.baseline, *dict.fromkeys(item.director for item in items if item.director != args.baseline)]
    pairs = [
        *paired_comparisons(items, directors),
        *pooled_comparisons(items, directors),
        *all_pooled(items, directors),
    ]
    print(f"| slice | director | n | correct | only director / only {args.baseline} | McNemar p |")
    print("|---|---|---:|---:|---:|---:|")
    for pair in pairs:
        scope = [i for i in items if i.director == pair.director and _in_scope(i, pair.source)]
        print(
            f"| {pair.source} | {pair.director} | {pair.n} | {sum(i.correct for i in scope)} | "
            f"{pair.better} / {pair.worse} | {pair.p_value:.3g} |"
        )
    return 0


def _in_scope(item: ItemResult, label: str) -> bool:
    if label == "all pooled":
        return True
    if label.endswith(")") and " pooled (" in label:
        return item.problem_type == label.split(" pooled (")[0]
    return item.source == label


if __name__ == "__main__":
    raise SystemExit(main())
