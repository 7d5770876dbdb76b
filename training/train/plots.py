"""PNG plots and a "did it rise" summary of a run's metrics rows.

Why static PNGs next to TensorBoard: they survive without a running server, can be attached to a report, and
`summary.png` is what the closing note of a run shows. matplotlib is imported inside the functions (and the Agg
canvas is used directly, never pyplot's global backend) so importing this module stays cheap and thread-safe.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MOVING_AVERAGE_WINDOW = 5
_PANEL_WIDTH_IN = 4.6
_PANEL_HEIGHT_IN = 3.2

REWARD_KEYS = ("reward/total", "reward/S", "reward/C", "reward/released")
REWARD_TERM_PREFIX = "reward/S/"
ROLLOUT_KEYS = (
    "rollout/valid_action_share",
    "rollout/finished",
    "rollout/turns",
    "rollout/policy_completion_tokens",
    "rollout/executor_tokens",
    "batch/zero_variance_share",
    "rollout/failed",
)
OPTIMISATION_KEYS = (
    "loss/loss",
    "loss/kl",
    "loss/clip_fraction",
    "loss/entropy",
    "loss/ratio_max",
    "optim/grad_norm",
    "optim/lr",
)
SUMMARY_KEYS = ("reward/total", "reward/S", "rollout/valid_action_share", "loss/kl")
FAMILY_SHARE_PREFIX = "family/"  # the loop's per-step workflow-family shares (training.train.families)
FAMILIES_FILE = "families.png"


def plot_metrics(rows: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Write `rewards.png`, `rollouts.png`, `optimisation.png`, `summary.png` and `families.png` into `out_dir`.

    One subplot per metric that has at least one finite value, except `families.png`: every workflow family's
    share in one panel, so a shift from one family to another reads at a glance. A file whose metrics are all
    absent is not written (and a stale copy from an earlier plot is removed). Returns the written paths in that
    order.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ordered = sorted((row for row in rows if _step(row) is not None), key=lambda row: _step(row) or 0)
    present = {key for row in ordered for key, value in row.items() if key != "step" and _number(value) is not None}
    reward_terms = sorted(key for key in present if key.startswith(REWARD_TERM_PREFIX))
    groups: dict[str, tuple[tuple[str, ...], int]] = {
        "rewards.png": ((*REWARD_KEYS, *reward_terms), 3),
        "rollouts.png": (ROLLOUT_KEYS, 3),
        "optimisation.png": (OPTIMISATION_KEYS, 3),
        "summary.png": (SUMMARY_KEYS, 2),
    }
    written: list[Path] = []
    for name, (keys, columns) in groups.items():
        path = out_dir / name
        shown = [key for key in keys if key in present]
        if not shown:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        _save_panels(ordered, shown, path, columns=columns)
        written.append(path)
    shares = _family_share_keys(present)
    path = out_dir / FAMILIES_FILE
    if shares:
        _save_shares(ordered, shares, path)
        written.append(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return written


def summarise(
    rows: Iterable[Mapping[str, Any]], keys: Iterable[str], *, first: int = 5, last: int = 5
) -> dict[str, dict[str, float]]:
    """Per key: mean of its first `first` and last `last` finite values (rows in the order given), their
    difference, min, max and the count. Keys with no finite value are left out."""
    if first < 1 or last < 1:
        raise ValueError(f"first and last must be at least 1, got first={first}, last={last}")
    rows = list(rows)
    summary: dict[str, dict[str, float]] = {}
    for key in keys:
        values = [number for row in rows if (number := _number(row.get(key))) is not None]
        if not values:
            continue
        head = math.fsum(values[:first]) / len(values[:first])
        tail = math.fsum(values[-last:]) / len(values[-last:])
        summary[key] = {
            "first_mean": head,
            "last_mean": tail,
            "change": tail - head,
            "min": min(values),
            "max": max(values),
            "n": float(len(values)),
        }
    return summary


def summary_markdown(summary: Mapping[str, Mapping[str, float]]) -> str:
    """Render `summarise` output as a Markdown table (one row per metric, in the summary's order)."""
    lines = [
        "| metric | first-k mean | last-k mean | change | min | max | n |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, stats in summary.items():
        lines.append(
            f"| {key} | {stats['first_mean']:.4g} | {stats['last_mean']:.4g} | {stats['change']:+.4g} "
            f"| {stats['min']:.4g} | {stats['max']:.4g} | {int(stats['n'])} |"
        )
    return "\n".join(lines) + "\n"


def moving_average(values: Sequence[float], window: int = MOVING_AVERAGE_WINDOW) -> list[float]:
    """Mean over each full window: element i is the mean of values[i : i + window]."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    return [math.fsum(values[i : i + window]) / window for i in range(len(values) - window + 1)]


def _save_panels(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], path: Path, *, columns: int) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = min(columns, len(keys))
    nrows = math.ceil(len(keys) / columns)
    width, height = _PANEL_WIDTH_IN * columns, _PANEL_HEIGHT_IN * nrows
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    # Fixed margins in inches instead of constrained layout: the panels are uniform, and layout solving
    # would double the rendering time.
    figure.subplots_adjust(
        left=0.75 / width,
        right=1 - 0.15 / width,
        bottom=0.55 / height,
        top=1 - 0.35 / height,
        wspace=0.3,
        hspace=0.9 / (_PANEL_HEIGHT_IN - 0.9),
    )
    steps = [float(_step(row) or 0) for row in rows]
    for index, key in enumerate(keys):
        axes = figure.add_subplot(nrows, columns, index + 1)
        _draw_metric(axes, key, steps, [_number(row.get(key)) for row in rows])
    _write_png(figure, path)


def _family_share_keys(present: Iterable[str]) -> list[str]:
    """The family-share metrics present, in the families' table order (unknown names after, sorted)."""
    from training.train.families import FAMILY_NAMES

    keys = {key for key in present if key.startswith(FAMILY_SHARE_PREFIX)}
    known = [f"{FAMILY_SHARE_PREFIX}{name}" for name in FAMILY_NAMES if f"{FAMILY_SHARE_PREFIX}{name}" in keys]
    return known + sorted(keys.difference(known))


def _save_shares(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2 * _PANEL_WIDTH_IN, 1.5 * _PANEL_HEIGHT_IN))
    FigureCanvasAgg(figure)
    figure.subplots_adjust(left=0.08, right=0.72, bottom=0.12, top=0.9)
    axes = figure.add_subplot(1, 1, 1)
    steps = [float(_step(row) or 0) for row in rows]
    for key in keys:
        values = [_number(row.get(key)) for row in rows]
        shares = [math.nan if value is None else value for value in values]
        axes.plot(steps, shares, linewidth=1.2, marker="o", markersize=2.5, label=key.removeprefix(FAMILY_SHARE_PREFIX))
    axes.set_title("workflow-family share of each step's trajectories", fontsize="medium")
    axes.set_xlabel("optimizer step")
    axes.set_ylim(-0.02, 1.02)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    _write_png(figure, path)


def _write_png(figure: Figure, path: Path) -> None:
    # Write under a temporary name, then rename: a viewer never sees a half-written PNG.
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png.tmp")
    os.close(fd)
    try:
        figure.savefig(tmp_name, format="png", dpi=100, metadata={"Software": None})
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def _draw_metric(axes: Axes, key: str, steps: Sequence[float], values: Sequence[float | None]) -> None:
    # NaN breaks the line, so a missing value shows as a gap rather than a misleading straight segment.
    raw = [math.nan if value is None else value for value in values]
    axes.plot(steps, raw, linewidth=0.8, marker="o", markersize=2.5, alpha=0.75, label="per step")
    points = [(step, value) for step, value in zip(steps, values, strict=True) if value is not None]
    if len(points) >= MOVING_AVERAGE_WINDOW:
        smoothed = moving_average([value for _, value in points])
        # Drawn at each window's centre so the smooth line does not lag behind the raw one.
        half = MOVING_AVERAGE_WINDOW // 2
        centres = [step for step, _ in points][half : half + len(smoothed)]
        axes.plot(centres, smoothed, linewidth=2.0, label=f"mean of {MOVING_AVERAGE_WINDOW}")
        axes.legend(fontsize="x-small", loc="best")
    axes.set_title(key, fontsize="medium")
    axes.set_xlabel("optimizer step")
    axes.grid(alpha=0.3)


def _number(value: object) -> float | None:
    """A finite float, or None for anything missing, non-numeric or non-finite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _step(row: Mapping[str, Any]) -> int | None:
    step = row.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None
