"""scripts/paired_vs_published.py: a published director joins a run's paired table on the run's problems only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "paired_vs_published.py"


def item(
    director: str, problem: str, correct: bool, source: str = "mbpp", problem_type: str = "code"
) -> dict[str, object]:
    return {
        "director": director,
        "problem_id": problem,
        "source": source,
        "problem_type": problem_type,
        "correct": correct,
    }


def write_report(path: Path, items: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"items": items}), encoding="utf-8")
    return path


def test_published_items_are_paired_by_problem_and_limited_to_the_run(tmp_path: Path) -> None:
    run = write_report(
        tmp_path / "run.json",
        [
            item("direct", "mbpp/1", False),
            item("direct", "mbpp/2", True),
            item("policy", "mbpp/1", True),
            item("policy", "mbpp/2", True),
            item("direct", "gsm8k/1", False, "gsm8k", "math"),
            item("policy", "gsm8k/1", True, "gsm8k", "math"),
        ],
    )
    published = write_report(
        tmp_path / "published.json",
        [
            item("template:x", "mbpp/1", True),
            item("template:x", "mbpp/2", False),
            item("template:x", "mbpp/3", True),  # not in the run: left out
            item("direct", "mbpp/1", True),  # another director of the published run: left out
        ],
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(run), "--published", f"{published}=template:x"],
        capture_output=True,
        text=True,
        check=True,
        cwd=SCRIPT.parents[1],
    )
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|")[:2]): line for line in result.stdout.splitlines()}
    assert "| 2 | 1 | 1 / 1 |" in rows[("mbpp", "template:x (published)")]  # n 2: mbpp/3 is not the run's
    assert "| 2 | 2 | 1 / 0 |" in rows[("mbpp", "policy")]
    assert "| 3 | 3 | 2 / 0 |" in rows[("all pooled", "policy")]
