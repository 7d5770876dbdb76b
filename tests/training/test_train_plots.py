"""PNG plots of a run's metrics and the first-k / last-k summary table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from training.train.plots import moving_average, plot_metrics, summarise, summary_markdown

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ONE_PANEL_PX = (460, 320)  # 4.6 x 3.2 inches at 100 dpi


def full_rows(n: int = 8) -> list[dict[str, Any]]:
    return [
        {
            "step": step,
            "time": "2025-01-01T00:00:00+00:00",
            "reward/total": -1.0 + 0.1 * step,
            "reward/S": 0.05 * step,
            "reward/S/format": 0.5,
            "reward/S/operators": 0.02 * step,
            "rollout/valid_action_share": 0.5 + 0.05 * step,
            "rollout/turns": 3.0,
            "loss/kl": 1e-4 * step,
            "optim/grad_norm": 1.0,
        }
        for step in range(1, n + 1)
    ]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 1000
    assert data.startswith(PNG_SIGNATURE)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plots_write_all_four_pngs(tmp_path: Path) -> None:
    paths = plot_metrics(full_rows(), tmp_path / "plots")
    assert [p.name for p in paths] == ["rewards.png", "rollouts.png", "optimisation.png", "summary.png"]
    for path in paths:
        assert_png(path)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(p.name for p in paths)


def test_absent_metrics_are_skipped_and_empty_files_not_written(tmp_path: Path) -> None:
    rows = [{"step": s, "reward/total": float(s), "reward/C": math.nan} for s in range(1, 4)]
    paths = plot_metrics(rows, tmp_path)
    # Only reward/total has a finite value: rewards.png and summary.png each get a single panel.
    assert [p.name for p in paths] == ["rewards.png", "summary.png"]
    assert not (tmp_path / "rollouts.png").exists() and not (tmp_path / "optimisation.png").exists()
    assert png_size(paths[0]) == png_size(paths[1]) == ONE_PANEL_PX


def test_panel_grid_follows_the_metrics_present(tmp_path: Path) -> None:
    rewards, rollouts, optimisation, summary = plot_metrics(full_rows(), tmp_path)
    # rewards: total, S and two S terms = 4 panels in 3 columns; summary: all four of its panels in 2 x 2.
    assert png_size(rewards) == (3 * ONE_PANEL_PX[0], 2 * ONE_PANEL_PX[1])
    assert png_size(summary) == (2 * ONE_PANEL_PX[0], 2 * ONE_PANEL_PX[1])
    # rollouts: valid_action_share and turns; optimisation: kl and grad_norm -> one row of two.
    assert png_size(rollouts) == png_size(optimisation) == (2 * ONE_PANEL_PX[0], ONE_PANEL_PX[1])


def test_none_gaps_and_out_of_order_rows_are_handled(tmp_path: Path) -> None:
    rows = full_rows(10)
    for row in rows[2:5]:
        row["reward/total"] = None
        row["loss/kl"] = None
    rows[6].pop("rollout/turns")
    rows.reverse()
    rows.append({"time": "no step here", "reward/total": 5.0})
    paths = plot_metrics(rows, tmp_path)
    assert len(paths) == 4
    for path in paths:
        assert_png(path)


def one_metric_rows(n: int) -> list[dict[str, Any]]:
    return [{"step": s, "reward/total": math.sin(s)} for s in range(1, n + 1)]


def test_replot_overwrites_and_is_deterministic(tmp_path: Path) -> None:
    [first, _] = plot_metrics(one_metric_rows(8), tmp_path)
    content = first.read_bytes()
    [again, _] = plot_metrics(one_metric_rows(8), tmp_path)
    assert again == first and again.read_bytes() == content
    plot_metrics(one_metric_rows(12), tmp_path)
    assert first.read_bytes() != content
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_stale_file_is_removed_when_its_metrics_disappear(tmp_path: Path) -> None:
    plot_metrics([{"step": 1, "loss/kl": 0.1}], tmp_path)
    assert (tmp_path / "optimisation.png").exists()
    plot_metrics([{"step": 1, "reward/total": 1.0}], tmp_path)
    assert not (tmp_path / "optimisation.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rewards.png", "summary.png"]


def test_no_rows_writes_nothing(tmp_path: Path) -> None:
    assert plot_metrics([], tmp_path) == []


def test_moving_average_uses_full_windows() -> None:
    assert moving_average([1, 2, 3, 4, 5, 6, 7]) == [3.0, 4.0, 5.0]
    assert moving_average([1.0, 2.0]) == []
    with pytest.raises(ValueError):
        moving_average([1.0], window=0)


def test_summarise_on_a_hand_made_example() -> None:
    rows: list[dict[str, Any]] = [
        {"step": 1, "r": 1.0, "k": 10.0},
        {"step": 2, "r": 2.0},
        {"step": 3, "r": None, "k": math.nan},
        {"step": 4, "r": 4.0, "k": 40.0},
        {"step": 5, "r": 8.0, "k": "not a number"},
        {"step": 6, "r": 0.0},
    ]
    summary = summarise(rows, ["r", "k", "absent"], first=2, last=3)
    # r's finite values in order: 1, 2, 4, 8, 0
    assert summary["r"] == {"first_mean": 1.5, "last_mean": 4.0, "change": 2.5, "min": 0.0, "max": 8.0, "n": 5.0}
    # k's finite values: 10, 40 (windows overlap when there are fewer values than first + last)
    assert summary["k"] == {"first_mean": 25.0, "last_mean": 25.0, "change": 0.0, "min": 10.0, "max": 40.0, "n": 2.0}
    assert "absent" not in summary
    with pytest.raises(ValueError):
        summarise(rows, ["r"], first=0)


def test_summary_markdown_renders_a_table() -> None:
    summary = summarise([{"step": s, "reward/total": float(s)} for s in range(1, 11)], ["reward/total"])
    table = summary_markdown(summary)
    lines = table.strip().splitlines()
    assert lines[0] == "| metric | first-k mean | last-k mean | change | min | max | n |"
    assert lines[1].startswith("|---|")
    assert lines[2] == "| reward/total | 3 | 8 | +5 | 1 | 10 | 10 |"
    assert len(lines) == 3
