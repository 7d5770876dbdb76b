"""Per-step training metrics: a durable JSONL log plus TensorBoard scalars.

Why JSONL first: it is the record the plots, the closing summary and `--resume` rely on, so every acknowledged
step is flushed and fsync'd before `write` returns, and non-finite floats are stored as `null` (strict JSON
readers reject `NaN` tokens). TensorBoard is a convenience view of the same numbers. A run killed after its last
checkpoint may have logged steps it will redo; `truncate_after` removes them from both views.
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import structlog

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

log = structlog.get_logger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
_RESERVED_KEYS = frozenset({"step", "time"})

MetricsRow = dict[str, float | str | None]
"""One logged step: `step` (int), `time` (ISO-8601 UTC string) and metric values (float, or None when the
value was missing or not finite)."""


class MetricsLog:
    """Appends one row per optimizer step to `run_dir/metrics.jsonl` and mirrors it to TensorBoard.

    Steps must strictly increase; reopening an existing log continues after its last step (a resumed run calls
    `truncate_after(checkpoint_step)` first). Use as a context manager or call `close()`.
    """

    def __init__(self, run_dir: Path, *, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.tensorboard_dir = self.run_dir / TENSORBOARD_DIR
        self._last_step: int | None = None
        if self.path.exists():
            rows, fragment = _load_rows(self.path)
            if fragment:
                # Appending after a half-written line would glue the next row onto it; drop the fragment.
                log.warning("metrics.dropped_partial_last_line", path=str(self.path))
                _rewrite_atomically(self.path, rows)
            self._last_step = _last_step(rows)
        self._writer: SummaryWriter | None = self._open_writer(purge_step=None) if tensorboard else None
        self._file = self.path.open("a", encoding="utf-8")
        self._closed = False

    @property
    def last_step(self) -> int | None:
        """The highest step in the log, or None when it is empty."""
        return self._last_step

    def write(self, step: int, values: Mapping[str, float | None]) -> None:
        """Append one step's metrics; the line is on disk (fsync'd) when this returns.

        Raises ValueError for a step that does not follow the last one or a reserved/empty key, and TypeError
        for a non-numeric value; nothing is written in either case.
        """
        if self._closed:
            raise RuntimeError(f"MetricsLog for {self.path} is closed")
        step = _as_step(step)
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(
                f"step {step} does not follow the last logged step {self._last_step} in {self.path}; "
                "a resumed run must call truncate_after(<checkpoint step>) before logging"
            )
        clean = {_check_key(key): _clean_value(key, value) for key, value in values.items()}
        row: dict[str, Any] = {"step": step, "time": _utc_now(), **clean}
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._last_step = step
        if self._writer is not None:
            for key, value in clean.items():
                if value is not None:
                    self._writer.add_scalar(key, value, global_step=step)
            self._writer.flush()

    def truncate_after(self, step: int) -> int:
        """Keep only rows with `row.step <= step`; return how many complete rows were dropped.

        The JSONL file is replaced atomically (a crash leaves either the old or the new file), and TensorBoard
        is told to hide its events after `step` so the redone steps do not appear twice.
        """
        if self._closed:
            raise RuntimeError(f"MetricsLog for {self.path} is closed")
        step = _as_step(step)
        rows, fragment = _load_rows(self.path) if self.path.exists() else ([], False)
        kept = [row for row in rows if _row_step(row) <= step]
        dropped = len(rows) - len(kept)
        self._file.close()
        try:
            _rewrite_atomically(self.path, kept)
        finally:
            self._file = self.path.open("a", encoding="utf-8")
        self._last_step = _last_step(kept)
        if self._writer is not None:
            self._writer.close()
            self._writer = self._open_writer(purge_step=step + 1)
        log.info("metrics.truncated", path=str(self.path), after_step=step, dropped=dropped, dropped_fragment=fragment)
        return dropped

    def close(self) -> None:
        """Flush and close the JSONL file and the TensorBoard writer; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._file.close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _open_writer(self, *, purge_step: int | None) -> SummaryWriter:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:  # pragma: no cover - depends on the installed extras
            raise RuntimeError(
                "TensorBoard logging needs the `tensorboard` package; install it or pass tensorboard=False"
            ) from error
        return SummaryWriter(log_dir=str(self.tensorboard_dir), purge_step=purge_step, flush_secs=30)


def read_metrics(path: Path) -> list[MetricsRow]:
    """Read a metrics JSONL file in file order.

    A last line cut off mid-write (no newline, not valid JSON) is skipped with a warning; any other malformed
    line raises ValueError naming its line number.
    """
    rows, fragment = _load_rows(Path(path))
    if fragment:
        log.warning("metrics.ignored_truncated_last_line", path=str(path), line=len(rows) + 1)
    return rows


def _load_rows(path: Path) -> tuple[list[MetricsRow], bool]:
    """Parse every line; return the rows and whether an unterminated, unparsable last line was skipped."""
    raw_lines = path.read_bytes().split(b"\n")
    # After split, the last element is b"" when the file ends with a newline, otherwise an unterminated line.
    unterminated = raw_lines.pop()
    rows: list[MetricsRow] = []
    for number, raw in enumerate(raw_lines, start=1):
        if raw.strip():
            rows.append(_parse_line(raw, path, number))
    if not unterminated.strip():
        return rows, False
    try:
        rows.append(_parse_line(unterminated, path, len(raw_lines) + 1))
    except ValueError:
        return rows, True
    return rows, False


def _parse_line(raw: bytes, path: Path, number: int) -> MetricsRow:
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_non_finite)
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{path}:{number}: not a JSON object ({error})") from error
    if not isinstance(obj, dict):
        raise ValueError(f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
    step = obj.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{path}:{number}: 'step' must be a non-negative integer, got {step!r}")
    if not isinstance(obj.get("time"), str):
        raise ValueError(f"{path}:{number}: 'time' must be an ISO-8601 string, got {obj.get('time')!r}")
    for key, value in obj.items():
        if key not in _RESERVED_KEYS and value is not None and (isinstance(value, bool) or not _is_real(value)):
            raise ValueError(f"{path}:{number}: metric {key!r} must be a number or null, got {value!r}")
    return obj


def _reject_non_finite(token: str) -> float:
    """Strict JSON has no NaN/Infinity; we always write null instead, so such a token means a foreign writer."""
    raise ValueError(f"non-standard JSON token {token}")


def _rewrite_atomically(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write `rows` to a temporary file next to `path`, fsync it, then rename it over `path`."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            for row in rows:
                tmp.write(json.dumps(row, allow_nan=False) + "\n")
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable; some platforms cannot open directories, which is harmless to skip."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _as_step(step: int) -> int:
    if isinstance(step, bool):
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    try:
        value = operator.index(step)
    except TypeError as error:
        raise ValueError(f"step must be a non-negative integer, got {step!r}") from error
    if value < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    return value


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"metric keys must be non-empty strings, got {key!r}")
    if key in _RESERVED_KEYS:
        raise ValueError(f"metric key {key!r} is reserved for the row itself")
    return key


def _clean_value(key: str, value: object) -> float | None:
    """A finite float, or None for missing / NaN / infinite values (stored as JSON null)."""
    if value is None:
        return None
    if isinstance(value, str | bytes):
        raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__}") from error
    return number if math.isfinite(number) else None


def _is_real(value: object) -> bool:
    return isinstance(value, int | float)


def _row_step(row: Mapping[str, Any]) -> int:
    step = row["step"]
    assert isinstance(step, int)  # guaranteed by _parse_line
    return step


def _last_step(rows: Sequence[Mapping[str, Any]]) -> int | None:
    return max((_row_step(row) for row in rows), default=None)


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
