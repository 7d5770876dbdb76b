"""Where prepared models live, and the file lock that keeps two `prepare` runs from racing."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"


def models_home(home: Path | None = None) -> Path:
    """The cache folder: explicit `home`, else `$FLOWSTEER_HOME/models`, `$XDG_CACHE_HOME/flowsteer/models`,
    or `~/.cache/flowsteer/models`."""
    if home is not None:
        return Path(home).expanduser()
    if flowsteer_home := os.environ.get("FLOWSTEER_HOME"):
        return Path(flowsteer_home).expanduser() / "models"
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "flowsteer" / "models"
    return Path.home() / ".cache" / "flowsteer" / "models"


def model_dir(name: str, home: Path | None = None) -> Path:
    return models_home(home) / name


@contextlib.contextmanager
def prepare_lock(name: str, home: Path | None = None, *, poll_s: float = 0.5) -> Iterator[None]:
    """Exclusive, process-wide lock per model name; released automatically if the holder dies."""
    root = models_home(home)
    root.mkdir(parents=True, exist_ok=True)
    lock_path = root / f".{name}.lock"
    with open(lock_path, "a+") as handle:
        waited = False
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited:
                    log.info("model_prepare_waiting_for_lock", name=name, lock=str(lock_path))
                    waited = True
                time.sleep(poll_s)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def remove_leftovers(name: str, home: Path | None = None) -> None:
    """Delete work folders of `name` left behind by a killed prepare (call only while holding its lock)."""
    root = models_home(home)
    for prefix in (TMP_PREFIX, TRASH_PREFIX):
        for leftover in root.glob(f"{prefix}{name}-*"):
            log.info("model_prepare_removing_leftover", path=str(leftover))
            shutil.rmtree(leftover, ignore_errors=True)
