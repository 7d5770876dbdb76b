"""Each step's training sequences, as the update saw them (`logging.sequences: true`).

Why: an update can then be replayed and audited offline, e.g. to check that the data-parallel learner's step
equals one process's on the very batch a run trained on (tests/training/test_cluster_e2e.py). One JSON line per
sequence, `{"advantage": A, "sample": TurnSample}`, in the update's order, in `sequences/step-N.jsonl`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from training.rollout.samples import TurnSample

SEQUENCES_DIR = "sequences"


def sequences_path(out_dir: Path, step: int) -> Path:
    return out_dir / SEQUENCES_DIR / f"step-{step}.jsonl"


def write_sequences(out_dir: Path, step: int, sequences: Sequence[tuple[TurnSample, float]]) -> Path:
    """Write step `step`'s sequences whole (a redone step after `--resume` replaces its file)."""
    path = sequences_path(out_dir, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with open(partial, "w", encoding="utf-8") as handle:
        for sample, advantage in sequences:
            handle.write(json.dumps({"advantage": advantage, "sample": sample.model_dump(mode="json")}) + "\n")
    partial.replace(path)
    return path


def read_sequences(path: Path) -> list[tuple[TurnSample, float]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(TurnSample.model_validate(row["sample"]), float(row["advantage"])) for row in rows]
