"""`flowsteer eval` under `memo_scope = "charged"` keeps its shared draws in `OUT/memo.sqlite`, so a workflow or
director added on `--resume` is judged on the draws the run already made, as it would have been in one go."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.training.test_evaluate_workflows import SCRIPTED_CONFIG, eval_args, exported_workflow, workspace  # noqa: F401
from training.cli import main

CHARGED = '\n[engine]\nmemo_scope = "charged"\n'
SHARED_NOTE = "the same call made for another workflow"


def items(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "items.jsonl").read_text(encoding="utf-8").splitlines()[1:]]


def test_a_workflow_added_on_resume_reuses_the_draws_of_the_run_before(
    workspace: Path,  # noqa: F811 (fixture)
) -> None:
    (workspace / "executor.toml").write_text(SCRIPTED_CONFIG + CHARGED, encoding="utf-8")
    first, twin = workspace / "vote3.json", workspace / "twin.json"
    twin.write_text(exported_workflow(first), encoding="utf-8")
    out = workspace / "run"
    assert main(eval_args(workspace, "--workflow", str(first), "--out", str(out))) == 0
    assert (out / "memo.sqlite").is_file()

    resumed = ["--workflow", str(first), "--workflow", str(twin), "--out", str(out), "--resume"]
    assert main(eval_args(workspace, *resumed)) == 0
    by_director: dict[str, list[dict[str, Any]]] = {}
    for item in items(out):
        by_director.setdefault(item["director"], []).append(item)
    twin_rows = [row for item in by_director["workflow:twin"] for row in item["trace"]]
    assert twin_rows and all(SHARED_NOTE in (row.get("note") or "") for row in twin_rows)
    tokens = {item["problem_id"]: item["tokens"] for item in by_director["workflow:vote3"]}
    assert {item["problem_id"]: item["tokens"] for item in by_director["workflow:twin"]} == tokens


def test_a_new_run_refuses_a_folder_holding_an_earlier_runs_draws(
    workspace: Path,  # noqa: F811 (fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    (workspace / "executor.toml").write_text(SCRIPTED_CONFIG + CHARGED, encoding="utf-8")
    out = workspace / "run"
    assert main(eval_args(workspace, "--director", "template:greedy-cot", "--out", str(out))) == 0
    (out / "items.jsonl").unlink()
    capsys.readouterr()
    assert main(eval_args(workspace, "--director", "template:greedy-cot", "--out", str(out))) == 2
    assert "memo.sqlite holds the shared draws of an earlier run" in capsys.readouterr().err
    assert not (out / "items.jsonl").exists()


def test_a_run_outside_the_charged_scope_keeps_no_memo_file(workspace: Path) -> None:  # noqa: F811 (fixture)
    out = workspace / "run"
    assert main(eval_args(workspace, "--director", "template:greedy-cot", "--out", str(out))) == 0
    assert not (out / "memo.sqlite").exists()
