"""Contested problems: a screening collection keeps the training problems where the workflow choice decides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowsteer_mcp.director.graded import ItemResult
from training.evaluate.journal import ItemJournal
from training.evaluate.results import EvalConfig
from training.traces.contested import ContestedScreen, contested_screen, screen_records
from training.train.config import TrainConfig, parse_train_config
from training.train.loop import load_training_problems


def episode(problem_id: str, workflow: str, correctness: float, error: str | None = None) -> dict[str, object]:
    return {"problem_id": problem_id, "workflow": workflow, "correctness": correctness, "error": error}


def test_only_problems_whose_graded_episodes_disagree_are_contested() -> None:
    screen = screen_records(
        [
            episode("mbpp/1", "greedy", 0.0),
            episode("mbpp/1", "direct8-exec", 1.0),  # the choice decides: contested
            episode("mbpp/2", "greedy", 1.0),
            episode("mbpp/2", "direct8-exec", 1.0),  # every workflow solves it
            episode("mbpp/3", "greedy", 0.0),
            episode("mbpp/3", "direct8-exec", 1.0, error="executor timeout"),  # a failed run says nothing
            episode("mbpp/4", "direct8-exec", 1.0),  # one episode: nothing to compare
        ]
    )
    assert screen.contested == ["mbpp/1"]
    assert screen.graded_problems == 2


def write_screen(folder: Path, episodes: list[dict[str, object]]) -> Path:
    folder.mkdir()
    (folder / "traces.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return folder


def config(tmp_path: Path, screen: Path, problems_per_step: int = 1) -> TrainConfig:
    rows = [
        {"id": f"a/{i}", "source": "a", "problem_type": "math", "problem": f"{i}+1?", "ground_truth": str(i + 1)}
        for i in range(6)
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return parse_train_config(
        {
            "run": {"steps": 1, "out_dir": str(tmp_path / "run")},
            "policy": {"model": "tiny-qwen3"},
            "executor": {"backend": "policy-server"},
            "data": {"paths": [str(data)], "skip_per_source": 2, "contested_in": [str(screen)]},
            "rollout": {"problems_per_step": problems_per_step, "rollouts_per_problem": 2},
        }
    )


def test_training_keeps_the_contested_problems_in_data_order(tmp_path: Path) -> None:
    screen = write_screen(
        tmp_path / "screen",
        [episode(f"a/{i}", wf, float(i % 2 == 1 and wf == "b")) for i in (5, 3, 2) for wf in ("a", "b")],
    )
    assert contested_screen([screen]).contested == ["a/3", "a/5"]
    assert [p.id for p in load_training_problems(config(tmp_path, screen))] == ["a/3", "a/5"]


def test_a_screen_of_other_problems_is_refused_not_trained_on_nothing(tmp_path: Path) -> None:
    screen = write_screen(tmp_path / "screen", [episode("a/1", "a", 0.0), episode("a/1", "b", 1.0)])  # a dev item
    with pytest.raises(ValueError, match="none of the 1 contested problems"):
        load_training_problems(config(tmp_path, screen))


def test_a_missing_screen_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the screening transcripts"):
        load_training_problems(config(tmp_path, tmp_path / "absent"))


def test_too_few_contested_problems_for_a_batch_is_refused(tmp_path: Path) -> None:
    screen = write_screen(tmp_path / "screen", [episode("a/3", "a", 0.0), episode("a/3", "b", 1.0)])
    with pytest.raises(ValueError, match=r"fewer than rollout\.problems_per_step"):
        load_training_problems(config(tmp_path, screen, problems_per_step=2))


def test_an_evaluation_journal_is_a_screen_and_its_run_failures_say_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "eval-train"
    journal, _ = ItemJournal.open(
        folder, EvalConfig(directors=["direct", "template:pot4-vote"], concurrency=1), resume=False
    )
    for problem_id, direct, voted, error in [
        ("a/3", 0.0, 1.0, None),  # the workflow decides: contested
        ("a/4", 1.0, 1.0, None),
        ("a/5", 0.0, 1.0, "executor_unavailable"),  # a run failure: not a grade
    ]:
        for director, grade in (("direct", direct), ("template:pot4-vote", voted)):
            journal.append(
                ItemResult(
                    director=director,
                    problem_id=problem_id,
                    source="a",
                    problem_type="math",
                    score=grade,
                    correct=grade == 1.0,
                    error=error if director == "direct" else None,
                )
            )
    journal.close()
    with (folder / "items.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"director": "direct", "problem_id": "a/4", "sco')  # a run killed mid-write
    assert contested_screen([folder]).contested == ["a/3"]
    assert contested_screen([folder / "items.jsonl"]).graded_problems == 2
    assert [p.id for p in load_training_problems(config(tmp_path, folder))] == ["a/3"]


def test_a_published_report_is_a_screen(tmp_path: Path) -> None:
    """A run's `report.json` (what docs/runs publishes; its journal stays in the gitignored runs/) screens too."""
    items = [
        ItemResult(director=d, problem_id=p, source="a", problem_type="math", score=s, correct=s == 1.0, error=e)
        for p, d, s, e in [
            ("a/3", "direct", 0.0, None),
            ("a/3", "template", 1.0, None),  # contested
            ("a/4", "direct", 1.0, None),
            ("a/4", "template", 1.0, None),
            ("a/5", "direct", 0.0, "executor_unavailable"),
            ("a/5", "template", 1.0, None),
        ]
    ]
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"config": {}, "aggregates": [], "items": [i.model_dump() for i in items]}))
    assert contested_screen([report]) == ContestedScreen(contested=["a/3"], graded_problems=2)
    assert [p.id for p in load_training_problems(config(tmp_path, report))] == ["a/3"]


def test_a_json_file_that_is_no_report_is_a_clear_error(tmp_path: Path) -> None:
    other = tmp_path / "settings.json"
    other.write_text(json.dumps({"items": "not a list"}))
    with pytest.raises(ValueError, match="not an evaluation report"):
        load_training_problems(config(tmp_path, other))
