"""Reproducible evaluation: the seeded executor backend, optionally recorded to JSONL or replayed from it.

`--record FILE` wraps the configured executor in `RecordingBackend`, which appends every request/response
pair to FILE in the replay format of `operators.backends.scripted`. `--replay FILE` answers every executor
request from such a file through `ScriptedBackend` (matched by request fingerprint), so a recorded evaluation
reruns offline with identical answers; a request that was never recorded fails loudly as an episode error.
Policy exchanges share the same file (see `training.evaluate.policy_recording`) and are told apart by
`ChatRequest.operator == "policy"`.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from operators.backends.base import ChatBackend
from operators.backends.config import NamedModelConfig, load_executor_config
from operators.backends.factory import build_backend
from operators.backends.scripted import RecordedExchange, RecordingBackend, ScriptedBackend, load_recordings

log = structlog.get_logger(__name__)

POLICY_OPERATOR = "policy"  # `ChatRequest.operator` of recorded policy turns


def with_seed(named: NamedModelConfig, seed: int | None) -> NamedModelConfig:
    """The executor entry with `seed` in its default sampling (operators use the backend defaults)."""
    if seed is None:
        return named
    config = named.config
    sampling = config.sampling.model_copy(update={"seed": seed})
    return named.model_copy(update={"config": config.model_copy(update={"sampling": sampling})})


def start_recording(path: str | Path) -> Path:
    """Create (or empty) the recording file, so one run never mixes with an older one."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("", encoding="utf-8")
    log.info("recording_started", path=str(file))
    return file


def load_role_recordings(path: str | Path, *, policy: bool) -> list[RecordedExchange]:
    """The executor's (or, with `policy=True`, the policy's) exchanges of a recording file."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"recording file not found: {file}")
    return [e for e in load_recordings(file) if (e.request.operator == POLICY_OPERATOR) == policy]


def replay_backend(path: str | Path, *, policy: bool = False) -> ScriptedBackend:
    exchanges = load_role_recordings(path, policy=policy)
    model = exchanges[0].response.model if exchanges else "replay"
    role = "policy" if policy else "executor"
    return ScriptedBackend(recordings=exchanges, name=f"replay-{role}:{Path(path).name}", model=model)


def executor_backend(
    config_path: str | Path | None = None,
    *,
    seed: int | None = None,
    record: str | Path | None = None,
    replay: str | Path | None = None,
) -> ChatBackend:
    """The executor backend of an evaluation run.

    replay: answer from a recording (config and seed are then irrelevant: the answers are fixed).
    record: build the configured backend (seeded) and record every exchange; the caller empties the file
    first with `start_recording` (policy exchanges are appended to the same file).
    Raises `ConfigError` for a bad configuration, `FileNotFoundError`/`ValueError` for a bad recording.
    """
    if record is not None and replay is not None:
        raise ValueError("--record and --replay exclude each other: replaying records nothing new")
    if replay is not None:
        return replay_backend(replay)
    backend = build_backend(with_seed(load_executor_config(config_path), seed))
    return RecordingBackend(backend, record) if record is not None else backend
