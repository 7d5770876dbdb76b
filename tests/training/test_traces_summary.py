"""`flowsteer traces summary`: per library workflow, how it scored on the collection's training problems."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from training.cli import main

pytestmark = pytest.mark.usefixtures("no_cli_logging_setup")


def record(problem: str, workflow: str, correctness: float, tokens: int, task_type: str = "code") -> dict[str, object]:
    base = workflow.split("~")[0]
    return {
        "problem_id": problem,
        "task_type": task_type,
        "workflow": workflow,
        "base_workflow": base,
        "correctness": correctness,
        "tokens": tokens,
        "error": None,
    }


def test_rows_rank_workflows_by_mean_correctness_within_a_task_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        record("p1", "greedy", 0.0, 300),
        record("p2", "greedy", 1.0, 300),
        record("p1", "direct8-exec", 1.0, 2000),
        record("p2", "direct8-exec~1", 1.0, 2200),  # a variation counts toward its library workflow
        record("m1", "greedy", 1.0, 400, task_type="math"),  # the same name on another task type is its own row
    ]
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (tmp_path / "traces.jsonl.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    assert main(["traces", "summary", str(tmp_path), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [(r["task_type"], r["workflow"], r["episodes"], r["problems"]) for r in table] == [
        ("code", "direct8-exec", 2, 2),
        ("code", "greedy", 2, 2),
        ("math", "greedy", 1, 1),
    ]
    assert [r["mean_correctness"] for r in table] == [1.0, 0.5, 1.0]
    assert table[0]["mean_tokens"] == 2100.0


def test_an_empty_or_missing_collection_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["traces", "summary", str(tmp_path / "none")]) == 2
    assert "no transcript file or folder" in capsys.readouterr().err
    (tmp_path / "traces.jsonl").write_text("", encoding="utf-8")
    assert main(["traces", "summary", str(tmp_path)]) == 2
    assert "holds no episodes" in capsys.readouterr().err


def test_the_table_ends_with_the_contested_problem_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        record("p1", "greedy", 0.0, 300),
        record("p1", "direct8-exec", 1.0, 2000),  # the workflows disagree
        record("p2", "greedy", 1.0, 300),
        record("p2", "direct8-exec", 1.0, 2000),
    ]
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert main(["traces", "summary", str(tmp_path)]) == 0
    assert "Contested problems (graded episodes disagree on C): 1 of 2" in capsys.readouterr().out
