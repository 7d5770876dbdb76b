"""Checkpoints: complete or absent, never half-written; refused across configurations; pruned to `keep`."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from training.train.checkpoint import (
    CheckpointError,
    CheckpointState,
    checkpoint_folders,
    load_latest,
    restore_rng,
    rng_state,
    save_checkpoint,
)
from training.train.stream import StreamCursor


def write_adapter(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")


def state(step: int, fingerprint: str = "abc") -> CheckpointState:
    return CheckpointState(
        step=step, cursor=StreamCursor(epoch=1, position=step), fingerprint=fingerprint, run_name="r", created="now"
    )


def test_round_trip_restores_optimizer_scheduler_rng_and_cursor(tmp_path: Path) -> None:
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (s + 1))
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    scheduler.step()
    generator = torch.Generator().manual_seed(5)
    random.seed(11)
    torch.manual_seed(12)
    trainer = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state(generator)}
    save_checkpoint(tmp_path, state(4), write_adapter=write_adapter, trainer=trainer, keep=2)
    expected = (random.random(), torch.rand(2), torch.rand(2, generator=generator))

    random.seed(0)
    torch.manual_seed(0)
    other = torch.Generator().manual_seed(0)
    restored = load_latest(tmp_path, fingerprint="abc")
    restore_rng(restored.trainer["rng"], other)
    assert random.random() == expected[0]
    assert torch.equal(torch.rand(2), expected[1])
    assert torch.equal(torch.rand(2, generator=other), expected[2])
    assert restored.state.step == 4 and restored.state.cursor == StreamCursor(epoch=1, position=4)
    assert (restored.adapter_dir / "adapter_config.json").is_file()

    fresh_optimizer = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=0.1)
    fresh_optimizer.load_state_dict(restored.trainer["optimizer"])
    saved_moments = optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(fresh_optimizer.state_dict()["state"][0]["exp_avg"], saved_moments)
    assert restored.trainer["scheduler"]["last_epoch"] == 1


def test_half_written_checkpoint_is_ignored_and_latest_complete_one_wins(tmp_path: Path) -> None:
    for step in (1, 2):
        save_checkpoint(tmp_path, state(step), write_adapter=write_adapter, trainer={"x": step}, keep=5)
    staging = tmp_path / ".step-3.tmp"  # a kill during the write of step 3
    staging.mkdir()
    (staging / "state.json").write_text("{")
    assert [f.name for f in checkpoint_folders(tmp_path)] == ["step-1", "step-2"]
    assert load_latest(tmp_path, fingerprint="abc").trainer == {"x": 2}


def test_old_checkpoints_are_pruned_to_keep(tmp_path: Path) -> None:
    for step in range(1, 5):
        save_checkpoint(tmp_path, state(step), write_adapter=write_adapter, trainer={}, keep=2)
    assert [f.name for f in checkpoint_folders(tmp_path)] == ["step-3", "step-4"]


def test_checkpoint_of_another_configuration_is_refused(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, state(1, fingerprint="old"), write_adapter=write_adapter, trainer={}, keep=1)
    with pytest.raises(CheckpointError, match="another configuration"):
        load_latest(tmp_path, fingerprint="new")


def test_resume_without_checkpoint_says_so(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_latest(tmp_path / "none", fingerprint="abc")
