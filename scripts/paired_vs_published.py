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
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from flowsteer_mcp.director.graded import ItemResult
from training.evaluate.paired import paired_comparisons, pooled_label

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


def scopes(items: Sequence[ItemResult]) -> dict[str, list[ItemResult]]:
    """Each dataset, each task type with several datasets, and all of them together where there are several
    task types: the claim "beats direct on the dev slices" is about the last."""
    found: dict[str, list[ItemResult]] = defaultdict(list)
    for item in items:
        found[item.source].append(item)
    types = list(dict.fromkeys(item.problem_type for item in items))
    for problem_type in types:
        group = [item for item in items if item.problem_type == problem_type]
        sources = list(dict.fromkeys(item.source for item in group))
        if len(sources) > 1:
            found[pooled_label(problem_type, sources)] = group
    if len(types) > 1:
        found["all pooled"] = list(items)
    return found


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
    print(f"| slice | director | n | correct | only director / only {args.baseline} | McNemar p |")
    print("|---|---|---:|---:|---:|---:|")
    for label, group in scopes(items).items():
        for pair in paired_comparisons([item.model_copy(update={"source": label}) for item in group], directors):
            correct = sum(item.correct for item in group if item.director == pair.director)
            print(
                f"| {label} | {pair.director} | {pair.n} | {correct} | "
                f"{pair.better} / {pair.worse} | {pair.p_value:.3g} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
