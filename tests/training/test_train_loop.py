"""Trainer pieces that need no model or server: run folders, data selection, per-trajectory seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.train.checkpoint import CheckpointError, CheckpointState, save_checkpoint
from training.train.config import TrainConfig, parse_train_config
from training.train.loop import Trainer, load_training_problems, rollout_seed
from training.train.stream import StreamCursor


def config(tmp_path: Path, **data: object) -> TrainConfig:
    return parse_train_config(
        {
            "run": {"steps": 2, "out_dir": str(tmp_path / "run")},
            "policy": {"model": "tiny-qwen3"},
            "executor": {"backend": "policy-server"},
            "data": {"paths": [str(tmp_path / "data.jsonl")], **data},
            "rollout": {"problems_per_step": 2, "rollouts_per_problem": 2},
        }
    )


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    rows = [
        {
            "id": f"{source}/{i}",
            "source": source,
            "problem_type": "math",
            "problem": f"{i}+1?",
            "ground_truth": str(i + 1),
        }
        for source in ("a", "b")
        for i in range(5)
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_skip_then_limit_per_source_leaves_the_evaluation_items_out(tmp_path: Path, data_file: Path) -> None:
    problems = load_training_problems(config(tmp_path, skip_per_source=2, limit_per_source=2))
    assert [p.id for p in problems] == ["a/2", "a/3", "b/2", "b/3"]


def test_too_few_problems_for_a_batch_is_refused(tmp_path: Path, data_file: Path) -> None:
    with pytest.raises(ValueError, match=r"fewer than rollout\.problems_per_step"):
        load_training_problems(config(tmp_path, skip_per_source=4, sources=["a"]))


def test_fresh_run_clears_leftovers_but_never_overwrites_a_checkpointed_run(tmp_path: Path, data_file: Path) -> None:
    cfg = config(tmp_path)
    run = Path(cfg.run.out_dir)
    (run / "plots").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1, "time": "t"}\n')  # a run that died before any checkpoint
    Trainer(cfg)._prepare_out_dir()
    assert not (run / "metrics.jsonl").exists() and not (run / "plots").exists()
    assert (run / "config.yaml").is_file()

    state = CheckpointState(step=1, cursor=StreamCursor(), fingerprint=cfg.fingerprint(), run_name="r", created="t")
    save_checkpoint(run / "checkpoints", state, write_adapter=lambda f: f.mkdir(), trainer={}, keep=1)
    with pytest.raises(CheckpointError, match="pass --resume"):
        Trainer(cfg)._prepare_out_dir()
    Trainer(cfg, resume=True)._prepare_out_dir()
    assert (run / "checkpoints" / "step-1").is_dir()


def test_rollout_seeds_are_stable_and_distinct() -> None:
    seeds = {rollout_seed(0, step, pid, i) for step in (1, 2) for pid in ("x", "y") for i in range(4)}
    assert len(seeds) == 16
    assert rollout_seed(0, 1, "x", 0) == rollout_seed(0, 1, "x", 0) != rollout_seed(1, 1, "x", 0)
    assert all(0 <= s < 2**31 for s in seeds)
