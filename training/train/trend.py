"""Did the policy learn? A test of the trend in a run's per-trajectory journal (`trajectories.jsonl`).

Why per trajectory: step means hide how many trajectories stand behind them, so "the reward rose" cannot be
told from noise. This compares the trajectories of the first and the last quarter of steps.

The rule: with N the highest step in the journal and q = ceil(N / 4), the first quarter holds steps <= q and
the last quarter steps > N - q (N = 10: steps 1-3 against 8-10). Reported: the difference of the means (last
minus first), a percentile bootstrap 95% CI of it, a one-sided permutation p-value (H1: last > first; p =
(1 + #{permuted difference >= observed}) / (1 + resamples)), and Welch's t with its Welch-Satterthwaite degrees
of freedom and one-sided p from Student's t (via the regularised incomplete beta function of
`training.evaluate.stats`, stdlib only). Both
resampling procedures use one `random.Random(seed)`, so a report is reproducible.

Per workflow family (`training.train.families`): its share of the first and of the last quarter, and the mean
value of its trajectories over the whole run; the Pearson correlation between a family's mean value and its
share change says whether the shares moved toward the families that score higher (positive) or away.

Within problems (`training.train.trend_matched`): the same comparison restricted to problems drawn in both
quarters, permuted within each problem, so that a quarter of easier problems cannot pass for learning; and each
problem's first draw against its last, for the problems a run drew more than once.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from statistics import StatisticsError, correlation, fmean, variance
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from training.errors import TrainingError
from training.evaluate.stats import regularized_beta
from training.train.families import FAMILY_NAMES
from training.train.trend_matched import MatchedTest, first_and_last_draws, matched_markdown, matched_test

Metric = Literal["reward", "C", "S"]
METRIC_KEYS: dict[str, str] = {"reward": "reward/total", "C": "reward/C", "S": "reward/S"}
JOURNAL_FILE = "trajectories.jsonl"
MIN_STEPS = 4
DEFAULT_RESAMPLES = 10_000
CI_LEVEL = 0.95


class TrendError(TrainingError, ValueError):
    """The journal cannot support a trend test (missing, empty, too few steps, unreadable)."""


class Point(BaseModel):
    """One trajectory as the test sees it."""

    model_config = ConfigDict(frozen=True)

    step: int
    value: float
    families: frozenset[str] = frozenset()
    problem_id: str | None = None  # journals of older runs lack it; such points stay out of the matched test


class GroupSummary(BaseModel):
    first_step: int
    last_step: int
    n: int
    mean: float
    sd: float | None  # None with a single trajectory


class WelchTest(BaseModel):
    t: float
    df: float
    p_one_sided: float  # P(T >= t) under "no difference": small when the last quarter is higher


class FamilyTrend(BaseModel):
    family: str
    share_first: float
    share_last: float
    share_change: float
    trajectories: int  # over the whole run
    mean_value: float | None  # of its trajectories over the whole run; None when it never occurred


class TrendReport(BaseModel):
    metric: str  # the journal key compared, e.g. reward/total
    steps: int  # N, the highest step
    first: GroupSummary
    last: GroupSummary
    difference: float  # last mean - first mean
    ci_low: float
    ci_high: float
    permutation_p: float
    welch: WelchTest | None  # None when both quarters have zero variance or fewer than 2 trajectories
    matched: MatchedTest | None = None  # None when fewer than 2 problems were drawn in both quarters
    redrawn: MatchedTest | None = None  # each problem's first vs last draw; None when fewer than 2 were drawn twice
    resamples: int
    seed: int
    families: list[FamilyTrend]
    share_value_correlation: float | None  # Pearson r of (mean value, share change) over families that occurred


# ------------------------------------------------------------------------------------------------ reading


def journal_path(run: Path) -> Path:
    """The journal of a run folder (or the journal file itself)."""
    return run if run.is_file() else run / JOURNAL_FILE


def read_points(path: Path, metric: Metric) -> list[Point]:
    """The journal's trajectories with the chosen metric's value; a torn last line (a run killed mid-write) is
    ignored, any other unreadable line is an error."""
    if not path.is_file():
        raise TrendError(
            f"no trajectory journal at {path}: give the run.out_dir of a `flowsteer train` run (runs log "
            f"{JOURNAL_FILE} per step since workflow families were added)"
        )
    key = METRIC_KEYS[metric]
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    points: list[Point] = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
            points.append(
                Point(
                    step=row["step"],
                    value=row[key],
                    families=frozenset(row.get("families") or []),
                    problem_id=row.get("problem_id"),
                )
            )
        except (ValueError, KeyError, TypeError, ValidationError) as error:
            if number == len(lines):
                break
            raise TrendError(f"{path}, line {number}: not a trajectory row with {key!r}: {error}") from error
    return [point for point in points if math.isfinite(point.value)]


# ------------------------------------------------------------------------------------------------ statistics


def bootstrap_ci(
    first: Sequence[float], last: Sequence[float], rng: random.Random, resamples: int, level: float = CI_LEVEL
) -> tuple[float, float]:
    """Percentile bootstrap CI of mean(last) - mean(first), each quarter resampled with replacement."""
    differences = sorted(
        fmean(rng.choices(last, k=len(last))) - fmean(rng.choices(first, k=len(first))) for _ in range(resamples)
    )
    tail = (1.0 - level) / 2.0
    return _quantile(differences, tail), _quantile(differences, 1.0 - tail)


def permutation_p(first: Sequence[float], last: Sequence[float], rng: random.Random, resamples: int) -> float:
    """One-sided p of "last > first": the share of label shuffles whose difference of means reaches the
    observed one (counting the observed labelling, so p is never 0)."""
    observed = fmean(last) - fmean(first)
    pooled = [*first, *last]
    total = math.fsum(pooled)
    n_first, n_last = len(first), len(last)
    tolerance = 1e-12 * max(1.0, abs(observed))  # equal differences must count as reaching the observed one
    reached = 0
    for _ in range(resamples):
        rng.shuffle(pooled)
        first_sum = math.fsum(pooled[:n_first])
        if (total - first_sum) / n_last - first_sum / n_first >= observed - tolerance:
            reached += 1
    return (1 + reached) / (1 + resamples)


def welch_test(first: Sequence[float], last: Sequence[float]) -> WelchTest | None:
    """Welch's t for mean(last) - mean(first) with Welch-Satterthwaite df; None when it is undefined."""
    if len(first) < 2 or len(last) < 2:
        return None
    share_first = variance(first) / len(first)
    share_last = variance(last) / len(last)
    spread = share_first + share_last
    if spread <= 0.0:
        return None
    t = (fmean(last) - fmean(first)) / math.sqrt(spread)
    df = spread**2 / (share_first**2 / (len(first) - 1) + share_last**2 / (len(last) - 1))
    return WelchTest(t=t, df=df, p_one_sided=student_t_sf(t, df))


def student_t_sf(t: float, df: float) -> float:
    """P(T >= t) for Student's t with `df` degrees of freedom, computed on the tail itself (not as 1 - CDF, which
    rounds small p-values to 0): I_{df/(df+t^2)}(df/2, 1/2) / 2 for t >= 0."""
    upper = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return upper if t >= 0 else 1.0 - upper


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r, or None with fewer than 2 pairs or a constant side."""
    try:
        return correlation(xs, ys)
    except StatisticsError:
        return None


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# ------------------------------------------------------------------------------------------------ the report


def quarters(points: Sequence[Point]) -> tuple[int, list[Point], list[Point]]:
    """N and the trajectories of the first (steps <= ceil(N/4)) and last (steps > N - ceil(N/4)) quarters."""
    if not points:
        raise TrendError("the trajectory journal is empty: train for at least 4 steps first")
    distinct = len({point.step for point in points})
    if distinct < MIN_STEPS:
        raise TrendError(
            f"the journal holds {distinct} step(s); a trend test needs at least {MIN_STEPS} "
            "(continue the run with `flowsteer train --resume` and a higher run.steps)"
        )
    steps = max(point.step for point in points)
    q = math.ceil(steps / 4)
    first = [point for point in points if point.step <= q]
    last = [point for point in points if point.step > steps - q]
    if not first or not last:
        raise TrendError(f"steps 1..{q} or {steps - q + 1}..{steps} have no trajectories in the journal")
    return steps, first, last


def trend_report(
    points: Sequence[Point], *, metric: Metric = "reward", resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> TrendReport:
    if resamples < 1:
        raise TrendError(f"resamples must be at least 1, got {resamples}")
    steps, first, last = quarters(points)
    a, b = [point.value for point in first], [point.value for point in last]
    rng = random.Random(seed)
    ci_low, ci_high = bootstrap_ci(a, b, rng, resamples)
    families = _family_trends(points, first, last)
    occurred = [family for family in families if family.mean_value is not None]
    return TrendReport(
        metric=METRIC_KEYS[metric],
        steps=steps,
        first=_summary(first),
        last=_summary(last),
        difference=fmean(b) - fmean(a),
        ci_low=ci_low,
        ci_high=ci_high,
        permutation_p=permutation_p(a, b, rng, resamples),
        welch=welch_test(a, b),
        matched=matched_test(_labelled(first), _labelled(last), rng, resamples),
        redrawn=matched_test(
            *first_and_last_draws([(p.step, p.problem_id, p.value) for p in points if p.problem_id is not None]),
            rng,
            resamples,
        ),
        resamples=resamples,
        seed=seed,
        families=families,
        share_value_correlation=pearson(
            [family.mean_value for family in occurred if family.mean_value is not None],
            [family.share_change for family in occurred],
        ),
    )


def _labelled(points: Sequence[Point]) -> list[tuple[str, float]]:
    return [(point.problem_id, point.value) for point in points if point.problem_id is not None]


def _summary(points: Sequence[Point]) -> GroupSummary:
    values = [point.value for point in points]
    return GroupSummary(
        first_step=min(point.step for point in points),
        last_step=max(point.step for point in points),
        n=len(values),
        mean=fmean(values),
        sd=math.sqrt(variance(values)) if len(values) > 1 else None,
    )


def _family_trends(points: Sequence[Point], first: Sequence[Point], last: Sequence[Point]) -> list[FamilyTrend]:
    trends = []
    for name in FAMILY_NAMES:
        share_first = sum(name in point.families for point in first) / len(first)
        share_last = sum(name in point.families for point in last) / len(last)
        members = [point.value for point in points if name in point.families]
        trends.append(
            FamilyTrend(
                family=name,
                share_first=share_first,
                share_last=share_last,
                share_change=share_last - share_first,
                trajectories=len(members),
                mean_value=fmean(members) if members else None,
            )
        )
    return trends


def report_markdown(report: TrendReport) -> str:
    first, last = report.first, report.last
    lines = [
        f"## Trend of {report.metric}: first vs last quarter of {report.steps} steps",
        "",
        "| | first quarter | last quarter |",
        "|---|---:|---:|",
        f"| steps | {first.first_step}-{first.last_step} | {last.first_step}-{last.last_step} |",
        f"| trajectories | {first.n} | {last.n} |",
        f"| mean | {first.mean:.4f} | {last.mean:.4f} |",
        f"| sd | {_number(first.sd)} | {_number(last.sd)} |",
        "",
        f"- difference (last - first): {report.difference:+.4f}, bootstrap {CI_LEVEL:.0%} CI "
        f"[{report.ci_low:+.4f}, {report.ci_high:+.4f}] ({report.resamples} resamples, seed {report.seed})",
        f"- permutation test, one-sided (last > first): p = {report.permutation_p:.4g}{_floor_note(report)}",
    ]
    if report.welch is None:
        lines.append("- Welch's t: undefined (a quarter with fewer than 2 trajectories, or no variance)")
    else:
        welch = report.welch
        lines.append(f"- Welch's t = {welch.t:.3f}, df = {welch.df:.1f}, one-sided p = {welch.p_one_sided:.4g}")
    lines.append(
        matched_markdown(report.matched, within="drawn in both quarters", earlier="first quarter", later="last quarter")
    )
    lines.append(
        matched_markdown(report.redrawn, within="drawn in two steps or more", earlier="first draw", later="last draw")
    )
    lines += [
        "",
        f"| family | share first | share last | change | mean {report.metric} (run) | trajectories |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for family in report.families:
        lines.append(
            f"| {family.family} | {family.share_first:.3f} | {family.share_last:.3f} | {family.share_change:+.3f} "
            f"| {_number(family.mean_value)} | {family.trajectories} |"
        )
    lines += ["", _correlation_sentence(report.share_value_correlation)]
    return "\n".join(lines) + "\n"


def _correlation_sentence(r: float | None) -> str:
    if r is None:
        return "- family shares vs mean value: undefined (fewer than 2 families occurred, or no spread)"
    direction = "toward" if r > 0 else "away from" if r < 0 else "neither toward nor away from"
    return (
        f"- family shares vs mean value: Pearson r = {r:+.3f}: shares moved {direction} the families that score higher"
    )


def _floor_note(report: TrendReport) -> str:
    at_floor = report.permutation_p <= 1.0 / (1 + report.resamples)
    return f" (the smallest p {report.resamples} resamples can show)" if at_floor else ""


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
