"""The per-trajectory journal the loop writes, and the first-vs-last-quarter trend test that reads it."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from training.advantages import group_advantages
from training.cli import main
from training.reward import RewardConfig, compute_reward
from training.rollout import EpisodeSample, RolloutBatch
from training.rollout.samples import TrajectoryMetrics
from training.train.config import TrainConfig, parse_train_config
from training.train.families import FAMILY_NAMES
from training.train.loop import StepOutcome, Trainer, TrainingRun, _truncate_jsonl, trajectory_row
from training.train.metrics import MetricsLog, read_metrics
from training.train.trend import (
    Point,
    TrendError,
    quarters,
    read_points,
    report_markdown,
    student_t_sf,
    trend_report,
    welch_test,
)
from training.train.trend_matched import first_and_last_draws

FAST = 2000  # resamples in tests: enough for the thresholds below, quick on a shared CPU

VOTE = {"stats": {"total_operators": 2, "unique_types": 2, "operators": ["Custom", "ScEnsemble"], "max_samples": 4}}
SINGLE = {"stats": {"total_operators": 1, "unique_types": 1, "operators": ["Custom"]}}


def episode(index: int, *, correct: float, stats: dict[str, Any], status: str = "ok") -> EpisodeSample:
    reward = compute_reward(
        stats or {"total_operators": 0, "unique_types": 0}, correctness=correct, finished=True, config=RewardConfig()
    )
    return EpisodeSample(
        episode_id=f"s1:p#{index}",
        group_id="p",
        problem_id="p",
        source="gsm8k",
        problem_type="math",
        rollout_index=index,
        reward=reward,
        metrics=TrajectoryMetrics(status=status, valid_action_share=0.5),  # type: ignore[arg-type]
        stats=stats,
    )


def train_config(tmp_path: Path) -> TrainConfig:
    return parse_train_config(
        {
            "run": {"steps": 2, "out_dir": str(tmp_path / "run")},
            "policy": {"model": "tiny-qwen3"},
            "executor": {"backend": "policy-server"},
            "data": {"paths": [str(tmp_path / "data.jsonl")]},
            "rollout": {"problems_per_step": 1, "rollouts_per_problem": 3},
            "logging": {"tensorboard": False},
        }
    )


# -- the journal ----------------------------------------------------------------------------------------------


def test_a_trajectory_row_carries_reward_components_and_families() -> None:
    row = trajectory_row(3, episode(1, correct=1.0, **VOTE))
    assert row["step"] == 3 and row["episode_id"] == "s1:p#1" and row["problem_id"] == "p"
    assert row["source"] == "gsm8k" and row["rollout_index"] == 1 and row["status"] == "ok"
    assert row["reward/C"] == 1.0 and {"reward/total", "reward/S"} <= set(row)
    assert row["valid_action_share"] == 0.5
    assert row["families"] == ["sampling", "vote"]
    assert row["operators"] == VOTE["stats"]["operators"]  # the workflow's size shows padding per trajectory
    assert trajectory_row(3, episode(0, correct=0.0, stats={}, status="error"))["families"] == ["no_workflow"]
    assert row["advantage"] is None and row["kept"] is True  # not grouped yet


def test_a_trajectory_row_carries_its_advantage_once_grouped() -> None:
    grouped = episode(1, correct=1.0, **VOTE).model_copy(update={"advantage": 0.75, "keep": False})
    row = trajectory_row(3, grouped)
    assert row["advantage"] == 0.75 and row["kept"] is False


def test_log_step_writes_the_journal_and_family_shares(tmp_path: Path) -> None:
    config = train_config(tmp_path)
    episodes = [episode(0, correct=1.0, **VOTE), episode(1, correct=0.0, **SINGLE), episode(2, correct=1.0, **VOTE)]
    _, stats = group_advantages([e.reward.total for e in episodes], [e.group_id for e in episodes])
    batch = RolloutBatch(episodes=episodes, advantages=stats, mode="markovian", grouping="problem", wall_s=1.0)
    trainer = Trainer(config)
    with MetricsLog(trainer.out_dir, tensorboard=False) as metrics:
        service = SimpleNamespace(
            replicas=SimpleNamespace(n_alive=1, deaths=0, revivals=0), lora=SimpleNamespace(failed_loads=0)
        )
        run = SimpleNamespace(metrics=metrics, stream=SimpleNamespace(cursor=SimpleNamespace(epoch=0)), service=service)
        outcome = StepOutcome(
            step=1, started=time.monotonic(), problems=[], adapter_used="r@0", batch=batch, learned={}, sync_check={}
        )
        values = trainer._log_step(cast(TrainingRun, run), outcome)
    rows = [json.loads(line) for line in (trainer.out_dir / "trajectories.jsonl").read_text().splitlines()]
    assert [row["episode_id"] for row in rows] == [e.episode_id for e in episodes]
    assert values["family/vote"] == pytest.approx(2 / 3) and values["family/single_call"] == pytest.approx(1 / 3)
    assert "push/operators" not in values  # no episode was given an advantage
    assert values["vllm/replicas_alive"] == 1.0 and values["vllm/adapter_load_failures"] == 0.0
    assert values["family_reward/vote"] == pytest.approx(episodes[0].reward.total)
    assert "family_reward/revision" not in values
    logged = read_metrics(trainer.out_dir / "metrics.jsonl")[0]
    assert logged["family/vote"] == pytest.approx(2 / 3)


def test_resume_drops_journal_rows_of_steps_after_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "trajectories.jsonl"
    rows = [{"step": step, "episode_id": f"s{step}:p#{i}"} for step in (1, 2, 3) for i in range(2)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"step": 4, "episo')
    _truncate_jsonl(path, 2)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 1, 2, 2]


def test_a_fresh_run_removes_a_leftover_journal(tmp_path: Path) -> None:
    config = train_config(tmp_path)
    run = Path(config.run.out_dir)
    run.mkdir(parents=True)
    (run / "trajectories.jsonl").write_text('{"step": 1}\n')
    Trainer(config)._prepare_out_dir()
    assert not (run / "trajectories.jsonl").exists()


# -- statistics -----------------------------------------------------------------------------------------------


def test_student_t_tail_matches_closed_forms() -> None:
    for t in (-2.0, 0.0, 0.7, 3.0, 12.0):
        assert student_t_sf(t, 1.0) == pytest.approx(0.5 - math.atan(t) / math.pi)  # Cauchy
        assert student_t_sf(t, 2.0) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)))
    assert student_t_sf(1.6448536, 1e7) == pytest.approx(0.05, rel=1e-4)  # the normal limit
    assert 0.0 < student_t_sf(12.0, 400.0) < 1e-20  # a far tail stays positive


def test_welch_t_and_degrees_of_freedom_by_hand() -> None:
    test = welch_test([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0])
    assert test is not None
    va, vb = 1.0 / 3, (20.0 / 3) / 4  # sample variances over n
    assert test.t == pytest.approx((5.0 - 2.0) / math.sqrt(va + vb))
    assert test.df == pytest.approx((va + vb) ** 2 / (va**2 / 2 + vb**2 / 3))
    assert welch_test([1.0, 1.0], [1.0, 1.0]) is None and welch_test([1.0], [2.0, 3.0]) is None


def test_quarters_follow_the_stated_rule() -> None:
    points = [Point(step=step, value=0.0) for step in range(1, 11)]
    steps, first, last = quarters(points)
    assert steps == 10
    assert [p.step for p in first] == [1, 2, 3] and [p.step for p in last] == [8, 9, 10]


def synthetic(steps: int, per_step: int, value: Any) -> list[Point]:
    rng = random.Random(7)
    return [Point(step=s, value=value(s, rng)) for s in range(1, steps + 1) for _ in range(per_step)]


def test_a_clear_upward_trend_is_significant() -> None:
    points = synthetic(8, 12, lambda step, rng: 0.1 * step + rng.gauss(0.0, 0.2))
    report = trend_report(points, resamples=FAST, seed=1)
    assert report.difference > 0.5 and report.ci_low > 0
    assert report.permutation_p < 0.01
    assert report.welch is not None and report.welch.p_one_sided < 0.01


def test_identical_quarters_show_no_trend() -> None:
    pattern = [0.0, 0.25, 0.5, 1.0, -1.0, 0.75]
    points = [Point(step=s, value=v) for s in range(1, 9) for v in pattern]
    report = trend_report(points, resamples=FAST, seed=1)
    assert report.difference == pytest.approx(0.0)
    assert report.permutation_p > 0.1
    assert report.welch is not None and report.welch.p_one_sided > 0.1
    assert report.ci_low <= 0.0 <= report.ci_high


def test_the_same_seed_gives_the_same_report() -> None:
    points = synthetic(6, 5, lambda step, rng: rng.random())
    assert trend_report(points, resamples=500, seed=3) == trend_report(points, resamples=500, seed=3)
    assert trend_report(points, resamples=500, seed=3) != trend_report(points, resamples=500, seed=4)


def test_family_shares_moving_to_the_better_family_correlate_positively() -> None:
    def point(step: int, better: bool) -> Point:
        return Point(step=step, value=1.0 if better else 0.0, families=frozenset({"vote" if better else "single_call"}))

    points = [point(step, better=index < step) for step in range(1, 9) for index in range(8)]
    report = trend_report(points, resamples=200, seed=0)
    by_name = {family.family: family for family in report.families}
    assert [family.family for family in report.families] == list(FAMILY_NAMES)
    assert by_name["vote"].share_change > 0 > by_name["single_call"].share_change
    assert by_name["vote"].mean_value == 1.0 and by_name["revision"].mean_value is None
    assert report.share_value_correlation == pytest.approx(1.0)
    assert "shares moved toward the families that score higher" in report_markdown(report)


def test_easier_problems_in_the_last_quarter_are_not_learning_within_problems() -> None:
    """Pooled, the last quarter looks better because it drew the easy problem more often; within each problem
    nothing changed, and the matched test says so."""

    def draws(step: int) -> list[Point]:
        easy_share = 2 if step <= 2 else 6
        return [Point(step=step, value=1.0, problem_id="easy") for _ in range(easy_share)] + [
            Point(step=step, value=0.0, problem_id="hard") for _ in range(8 - easy_share)
        ]

    report = trend_report([point for step in range(1, 9) for point in draws(step)], resamples=FAST, seed=0)
    assert report.difference == pytest.approx(0.5) and report.permutation_p < 0.01
    assert report.matched is not None
    assert report.matched.problems == 2 and report.matched.difference == pytest.approx(0.0)
    assert report.matched.improved == report.matched.worsened == 0
    assert report.matched.permutation_p == pytest.approx(1.0)


def test_a_gain_on_the_same_problems_is_significant_within_problems() -> None:
    rng = random.Random(3)
    difficulty = {"p0": -1.0, "p1": -0.5, "p2": 0.0, "p3": 0.5}
    points = [
        Point(
            step=step, value=difficulty[f"p{index % 4}"] + 0.1 * step + rng.gauss(0.0, 0.2), problem_id=f"p{index % 4}"
        )
        for step in range(1, 9)
        for index in range(8)
    ]
    matched = trend_report(points, resamples=FAST, seed=0).matched
    assert matched is not None and matched.problems == 4 and matched.first_n == matched.last_n == 16
    assert matched.difference > 0.4 and matched.improved == 4
    assert matched.permutation_p < 0.01
    assert "stratified permutation test, one-sided" in report_markdown(trend_report(points, resamples=FAST))


def test_without_problems_in_both_quarters_there_is_no_matched_test() -> None:
    points = [Point(step=step, value=0.1 * step, problem_id=f"p{step}") for step in range(1, 9) for _ in range(3)]
    report = trend_report(points, resamples=FAST, seed=0)
    assert report.matched is None
    assert "no matched test" in report_markdown(report)
    unlabelled = trend_report([Point(step=p.step, value=p.value) for p in points], resamples=FAST, seed=0)
    assert unlabelled.matched is None


def test_each_problem_drawn_twice_is_compared_with_itself() -> None:
    draws = [(1, "a", 0.0), (1, "a", 0.0), (4, "a", 1.0), (9, "a", 1.0), (9, "a", 0.0), (2, "b", 1.0), (5, "c", 0.0)]
    first, last = first_and_last_draws(draws)
    assert first == [("a", 0.0), ("a", 0.0)]
    assert last == [("a", 1.0), ("a", 0.0)]


def test_the_report_compares_first_and_last_draws_across_passes() -> None:
    """Two passes over four problems of different difficulty, each solved more often on its second draw."""
    difficulty = {"p0": 0.0, "p1": 0.25, "p2": 0.5, "p3": 0.75}
    order = ["p0", "p1", "p2", "p3", "p2", "p0", "p3", "p1"]
    points = [
        Point(step=step, value=difficulty[problem] + (0.2 if step > 4 else 0.0) + 0.01 * rollout, problem_id=problem)
        for step, problem in enumerate(order, start=1)
        for rollout in range(4)
    ]
    report = trend_report(points, resamples=FAST, seed=0)
    assert report.redrawn is not None
    assert report.redrawn.problems == 4 and report.redrawn.improved == 4
    assert report.redrawn.difference == pytest.approx(0.2)
    assert report.redrawn.permutation_p < 0.01
    assert "first draw vs last draw, within problems (the 4 drawn in two steps or more" in report_markdown(report)


# -- reading and refusing -------------------------------------------------------------------------------------


def write_journal(path: Path, steps: int, per_step: int = 3) -> Path:
    rows = [
        {
            "step": s,
            "problem_id": f"mbpp/{i}",
            "reward/total": 0.1 * s + 0.01 * i,
            "reward/C": float(i % 2),
            "reward/S": 0.0,
            "families": ["vote"],
        }
        for s in range(1, steps + 1)
        for i in range(per_step)
    ]
    path.mkdir(parents=True, exist_ok=True)
    (path / "trajectories.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_read_points_picks_the_metric_and_ignores_only_a_torn_last_line(tmp_path: Path) -> None:
    journal = write_journal(tmp_path / "run", 4) / "trajectories.jsonl"
    with journal.open("a") as handle:
        handle.write('{"step": 5, "rew')
    points = read_points(journal, "C")
    assert len(points) == 12 and {p.value for p in points} == {0.0, 1.0}
    journal.write_text('{"step": 1}\n{"step": 2, "reward/total": 1.0}\n')
    with pytest.raises(TrendError, match="line 1"):
        read_points(journal, "reward")


def test_too_few_steps_or_an_empty_journal_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TrendError, match="at least 4"):
        trend_report(read_points(write_journal(tmp_path / "short", 3) / "trajectories.jsonl", "reward"))
    with pytest.raises(TrendError, match="empty"):
        trend_report([])


def test_cli_verb_prints_markdown_or_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_journal(tmp_path / "run", 8)
    assert main(["train", "trend", str(run), "--resamples", "300"]) == 0
    text = capsys.readouterr().out
    assert "## Trend of reward/total: first vs last quarter of 8 steps" in text
    assert "permutation test, one-sided" in text and "Welch's t" in text and "| vote |" in text
    assert "within problems (the 3 drawn in both quarters" in text
    assert main(["train", "trend", str(run), "--metric", "C", "--json", "--resamples", "300"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["metric"] == "reward/C" and report["first"]["last_step"] == 2 and report["last"]["first_step"] == 7


def test_cli_verb_refuses_with_an_actionable_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "trend", str(write_journal(tmp_path / "short", 2))]) == 2
    assert "needs at least 4" in capsys.readouterr().err
    assert main(["train", "trend", str(tmp_path / "nowhere")]) == 2
    assert "no trajectory journal" in capsys.readouterr().err
