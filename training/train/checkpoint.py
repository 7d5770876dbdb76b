"""Checkpoints that let a killed run continue exactly: adapter, optimizer, scheduler, RNG states, data cursor.

A checkpoint is written to a temporary folder and renamed into place, so a kill mid-write leaves either the
previous checkpoint or the new one, never a half-written one that `--resume` would trust.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
import torch
from pydantic import BaseModel

from training.errors import TrainingError
from training.train.stream import StreamCursor

log = structlog.get_logger(__name__)

_STEP_DIR = re.compile(r"^step-(\d+)$")
STATE_FILE = "state.json"
TRAINER_FILE = "trainer_state.pt"
ADAPTER_DIR = "adapter"


class CheckpointError(TrainingError, RuntimeError):
    """No usable checkpoint, or one that belongs to a different run configuration."""


class CheckpointState(BaseModel):
    step: int  # training steps completed
    cursor: StreamCursor
    fingerprint: str  # TrainConfig.fingerprint() of the run that wrote it
    run_name: str
    created: str


@dataclass
class Restored:
    state: CheckpointState
    folder: Path
    trainer: dict[str, Any]

    @property
    def adapter_dir(self) -> Path:
        return self.folder / ADAPTER_DIR


def rng_state(update_generator: torch.Generator) -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "update_generator": update_generator.get_state(),
    }


def restore_rng(saved: dict[str, Any], update_generator: torch.Generator) -> None:
    random.setstate(saved["python"])
    torch.set_rng_state(saved["torch"])
    update_generator.set_state(saved["update_generator"])


def save_checkpoint(
    root: Path,
    state: CheckpointState,
    *,
    write_adapter: Any,
    trainer: dict[str, Any],
    keep: int,
) -> Path:
    """Write `root/step-N` atomically (`write_adapter(folder)` saves the adapter) and prune older ones."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.step}"
    staging = root / f".step-{state.step}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    write_adapter(staging / ADAPTER_DIR)
    torch.save(trainer, staging / TRAINER_FILE)
    (staging / STATE_FILE).write_text(state.model_dump_json(indent=2), encoding="utf-8")
    _fsync_tree(staging)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    _fsync_dir(root)
    for old in checkpoint_folders(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    log.info("checkpoint_saved", folder=str(final), step=state.step)
    return final


def prepare_run_folder(
    out_dir: Path,
    config_dump: dict[str, Any],
    *,
    resume: bool,
    refusal: str,
    leftover_files: tuple[str, ...] = (),
    leftover_dirs: tuple[str, ...] = (),
) -> None:
    """Make `out_dir` ready for a run: refuse one that holds checkpoints unless resuming (`refusal` says what
    to do instead), remove what a run that died before its first checkpoint left (it describes nothing now),
    and write the resolved config as `config.yaml`."""
    import yaml

    if not resume and checkpoint_folders(out_dir / "checkpoints"):
        raise CheckpointError(f"{out_dir} {refusal}")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        for name in leftover_files:
            (out_dir / name).unlink(missing_ok=True)
        for name in leftover_dirs:
            shutil.rmtree(out_dir / name, ignore_errors=True)
    (out_dir / "config.yaml").write_text(yaml.safe_dump(config_dump, sort_keys=False), encoding="utf-8")


def checkpoint_folders(root: Path) -> list[Path]:
    """Complete checkpoints under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / STATE_FILE).is_file() and (child / TRAINER_FILE).is_file():
            found.append((int(match.group(1)), child))
    return [folder for _, folder in sorted(found)]


def latest_checkpoint(root: Path) -> Path:
    """The newest complete checkpoint's folder."""
    folders = checkpoint_folders(root)
    if not folders:
        raise CheckpointError(f"--resume: no checkpoint in {root} (a run writes them every run.checkpoint_every steps)")
    return folders[-1]


def load_latest(root: Path, *, fingerprint: str) -> Restored:
    """The newest complete checkpoint; refuses one written under a different configuration."""
    return load_checkpoint(latest_checkpoint(root), fingerprint=fingerprint)


def load_checkpoint(folder: Path, *, fingerprint: str) -> Restored:
    """The checkpoint in `folder` (each rank of a data-parallel run loads the one rank 0 picked); refuses one
    written under a different configuration."""
    state = CheckpointState.model_validate_json((folder / STATE_FILE).read_text(encoding="utf-8"))
    if state.fingerprint != fingerprint:
        raise CheckpointError(
            f"--resume: {folder} was written with another configuration (fingerprint {state.fingerprint}, this "
            f"config {fingerprint}); only run.steps, optim.micro_batch_size and logging may change between a run and its resume"
        )
    trainer = torch.load(folder / TRAINER_FILE, weights_only=False)
    log.info("checkpoint_loaded", folder=str(folder), step=state.step)
    return Restored(state=state, folder=folder, trainer=trainer)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
