"""Metrics JSONL + TensorBoard log: round trip, durability, truncation on resume, tolerant reading; and the
progress bar's disabled / formatting behaviour."""

from __future__ import annotations

import io
import json
import math
import os
import sys
from datetime import datetime
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from training.train.metrics import METRICS_FILE, MetricsLog, read_metrics
from training.train.progress import StepProgress, compact_number, format_postfix


def event_scalars(tensorboard_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(tensorboard_dir))
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def write_steps(log: MetricsLog, steps: range) -> None:
    for step in steps:
        log.write(step, {"reward/total": step / 10, "loss/kl": 0.001 * step})


# --- JSONL round trip -------------------------------------------------------------------------------------------


def test_round_trip_stores_nan_and_inf_as_null(tmp_path: Path) -> None:
    with MetricsLog(tmp_path, tensorboard=False) as log:
        log.write(1, {"reward/total": -0.5, "loss/kl": math.nan, "optim/grad_norm": math.inf, "batch/n": 4})
        log.write(2, {"reward/total": 0.25, "loss/kl": 1e-4, "rollout/missing": None})

    text = (tmp_path / METRICS_FILE).read_text()
    assert "NaN" not in text and "Infinity" not in text
    first, second = (json.loads(line) for line in text.splitlines())
    assert first["loss/kl"] is None and first["optim/grad_norm"] is None
    assert first["batch/n"] == 4.0 and isinstance(first["batch/n"], float)

    rows = read_metrics(tmp_path / METRICS_FILE)
    assert [row["step"] for row in rows] == [1, 2]
    assert rows[0]["reward/total"] == -0.5 and rows[0]["loss/kl"] is None
    assert rows[1] == {**second, "reward/total": 0.25, "loss/kl": 1e-4, "rollout/missing": None}
    stamp = datetime.fromisoformat(str(rows[0]["time"]))
    assert stamp.utcoffset() is not None and stamp.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


def test_write_fsyncs_each_line_before_returning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    log = MetricsLog(tmp_path, tensorboard=False)
    log.write(1, {"reward/total": 1.0})
    assert len(synced) == 1
    log.write(2, {"reward/total": 2.0})
    assert len(synced) == 2
    # Read back through a separate handle while the log is still open, as after a kill -9.
    assert [row["step"] for row in read_metrics(tmp_path / METRICS_FILE)] == [1, 2]
    log.close()


def test_lines_survive_a_log_that_is_never_closed(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path, tensorboard=False)
    write_steps(log, range(1, 4))
    # No close(): the data must already be in the file.
    assert [row["step"] for row in read_metrics(tmp_path / METRICS_FILE)] == [1, 2, 3]
    log.close()


def test_reopening_continues_after_last_step_and_rejects_repeats(tmp_path: Path) -> None:
    with MetricsLog(tmp_path, tensorboard=False) as log:
        write_steps(log, range(1, 4))
    with MetricsLog(tmp_path, tensorboard=False) as log:
        assert log.last_step == 3
        with pytest.raises(ValueError, match="truncate_after"):
            log.write(3, {"reward/total": 0.0})
        log.write(4, {"reward/total": 0.4})
    assert [row["step"] for row in read_metrics(tmp_path / METRICS_FILE)] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("step", "values", "error"),
    [
        (1, {"reward/total": "high"}, TypeError),
        (1, {"reward/total": [1.0]}, TypeError),
        (1, {"step": 1.0}, ValueError),
        (1, {"": 1.0}, ValueError),
        (-1, {"reward/total": 1.0}, ValueError),
        (1.5, {"reward/total": 1.0}, ValueError),
    ],
)
def test_bad_input_raises_and_writes_nothing(tmp_path: Path, step: object, values: dict, error: type) -> None:
    with MetricsLog(tmp_path, tensorboard=False) as log:
        with pytest.raises(error):
            log.write(step, values)  # type: ignore[arg-type]
        assert log.last_step is None
    assert (tmp_path / METRICS_FILE).read_text() == ""


def test_write_after_close_raises(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path, tensorboard=False)
    log.close()
    log.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        log.write(1, {"reward/total": 1.0})


# --- truncate_after ---------------------------------------------------------------------------------------------


def test_truncate_after_drops_exactly_the_later_rows(tmp_path: Path) -> None:
    with MetricsLog(tmp_path, tensorboard=False) as log:
        write_steps(log, range(1, 8))
    before = read_metrics(tmp_path / METRICS_FILE)
    with MetricsLog(tmp_path, tensorboard=False) as log:
        assert log.truncate_after(4) == 3
        assert log.last_step == 4
        log.write(5, {"reward/total": 99.0})
    after = read_metrics(tmp_path / METRICS_FILE)
    assert after[:4] == before[:4]  # kept rows are byte-for-byte the same values, timestamps included
    assert [row["step"] for row in after] == [1, 2, 3, 4, 5]
    assert after[4]["reward/total"] == 99.0


def test_truncate_after_beyond_the_end_and_on_empty_log(tmp_path: Path) -> None:
    with MetricsLog(tmp_path, tensorboard=False) as log:
        assert log.truncate_after(10) == 0
        write_steps(log, range(1, 4))
        assert log.truncate_after(10) == 0
        assert log.truncate_after(0) == 3
        assert log.last_step is None
        log.write(1, {"reward/total": 0.1})
    assert [row["step"] for row in read_metrics(tmp_path / METRICS_FILE)] == [1]


def test_truncate_after_is_atomic_when_the_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = MetricsLog(tmp_path, tensorboard=False)
    write_steps(log, range(1, 6))
    original = (tmp_path / METRICS_FILE).read_bytes()

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        log.truncate_after(2)
    monkeypatch.undo()

    assert (tmp_path / METRICS_FILE).read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == [METRICS_FILE]  # no temp file left behind
    # The log is still usable afterwards.
    log.write(6, {"reward/total": 0.6})
    log.close()
    assert [row["step"] for row in read_metrics(tmp_path / METRICS_FILE)] == [1, 2, 3, 4, 5, 6]


# --- TensorBoard ------------------------------------------------------------------------------------------------


def test_tensorboard_event_file_holds_the_scalars(tmp_path: Path) -> None:
    with MetricsLog(tmp_path) as log:
        log.write(1, {"reward/total": -0.5, "loss/kl": math.nan})
        log.write(2, {"reward/total": 0.5, "loss/kl": 0.002})
    tensorboard_dir = tmp_path / "tensorboard"
    assert any(p.name.startswith("events.out.tfevents") for p in tensorboard_dir.iterdir())
    assert event_scalars(tensorboard_dir, "reward/total") == [(1, -0.5), (2, 0.5)]
    # The NaN at step 1 is not sent to TensorBoard; float32 storage explains the tolerance.
    [(step, value)] = event_scalars(tensorboard_dir, "loss/kl")
    assert step == 2 and value == pytest.approx(0.002, rel=1e-6)


def test_tensorboard_hides_steps_redone_after_resume(tmp_path: Path) -> None:
    with MetricsLog(tmp_path) as log:
        write_steps(log, range(1, 6))
    with MetricsLog(tmp_path) as log:
        log.truncate_after(3)
        log.write(4, {"reward/total": 40.0})
    scalars = event_scalars(tmp_path / "tensorboard", "reward/total")
    assert [step for step, _ in scalars] == [1, 2, 3, 4]
    assert scalars[-1][1] == 40.0


# --- read_metrics -----------------------------------------------------------------------------------------------


def test_truncated_last_line_is_ignored_with_a_warning(tmp_path: Path) -> None:
    with MetricsLog(tmp_path, tensorboard=False) as log:
        write_steps(log, range(1, 3))
    path = tmp_path / METRICS_FILE
    with path.open("a") as handle:
        handle.write('{"step": 3, "time": "2025-01-01T00:00:00+00:00", "reward/to')
    with capture_logs() as logs:
        rows = read_metrics(path)
    assert [row["step"] for row in rows] == [1, 2]
    assert any(entry["log_level"] == "warning" and entry["line"] == 3 for entry in logs)


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 1, "time": "t", "a": 1.0}\n{"step": 2, "time": "t", "a": 2.0}')
    assert [row["a"] for row in read_metrics(path)] == [1.0, 2.0]


def test_reopening_after_a_kill_mid_write_drops_the_fragment(tmp_path: Path) -> None:
    with MetricsLog(tmp_path, tensorboard=False) as log:
        write_steps(log, range(1, 3))
    path = tmp_path / METRICS_FILE
    with path.open("a") as handle:
        handle.write('{"step": 3, "ti')
    with MetricsLog(tmp_path, tensorboard=False) as log:
        assert log.last_step == 2
        log.write(3, {"reward/total": 0.3})
    assert [row["step"] for row in read_metrics(path)] == [1, 2, 3]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "not a JSON object"),
        ("[1, 2]", "expected a JSON object"),
        ('{"time": "t", "a": 1.0}', "'step'"),
        ('{"step": 2, "a": 1.0}', "'time'"),
        ('{"step": 2, "time": "t", "a": "x"}', "metric 'a'"),
        ('{"step": 2, "time": "t", "a": NaN}', "non-standard JSON token NaN"),
    ],
)
def test_malformed_middle_line_raises_with_its_line_number(tmp_path: Path, bad_line: str, message: str) -> None:
    path = tmp_path / METRICS_FILE
    good = '{"step": 1, "time": "t", "a": 1.0}'
    path.write_text(f"{good}\n{bad_line}\n{good.replace('1,', '3,')}\n")
    with pytest.raises(ValueError, match=rf"{METRICS_FILE}:2: .*{message}"):
        read_metrics(path)


def test_malformed_terminated_last_line_is_not_mistaken_for_truncation(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 1, "time": "t"}\n{"step": 2, "ti\n')
    with pytest.raises(ValueError, match=":2:"):
        read_metrics(path)


# --- StepProgress -----------------------------------------------------------------------------------------------


def test_disabled_progress_does_nothing_and_never_raises(capsys: pytest.CaptureFixture[str]) -> None:
    with StepProgress(10, initial=3, enabled=False) as progress:
        progress.update(4, {"R": -0.62, "kl": math.nan})
        progress.update(2, {})
        progress.update(50, {"x": None})
    progress.close()
    progress.update(5, {"R": 1.0})
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_progress_is_off_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    with StepProgress(10, enabled=True) as progress:
        progress.update(1, {"R": 0.5})
    assert pipe.getvalue() == ""


class TerminalStream(io.StringIO):
    """A StringIO that claims to be a terminal, so the bar renders into it."""

    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_starts_at_initial_and_shows_postfix(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = TerminalStream()
    monkeypatch.setattr(sys, "stderr", terminal)
    with StepProgress(20, initial=10, enabled=True) as progress:
        progress.update(12, {"R": -0.62, "S": 0.3, "valid": 0.75, "kl": 1.2e-4})
    output = terminal.getvalue()
    assert "10/20" in output and "12/20" in output
    assert "R=-0.62 S=0.30 valid=0.75 kl=1.2e-04" in output


def test_compact_number_formats() -> None:
    assert format_postfix({"R": -0.62, "S": 0.3, "valid": 0.75, "kl": 1.2e-4}) == "R=-0.62 S=0.30 valid=0.75 kl=1.2e-04"
    assert compact_number(0.0) == "0"
    assert compact_number(12345.0) == "1.2e+04"
    assert compact_number(None) == "nan"
    assert compact_number(math.nan) == "nan"
    assert compact_number(-math.inf) == "-inf"
