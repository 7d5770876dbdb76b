"""Confidence intervals against values computed by hand (and standard t tables)."""

from __future__ import annotations

import math

import pytest

from training.evaluate.stats import (
    score_interval,
    student_t_cdf,
    student_t_quantile,
    t_interval,
    wilson_interval,
)


def hand_wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The textbook formula written out independently of the module."""
    p = successes / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = (z / (1 + z**2 / n)) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return centre - half, centre + half


@pytest.mark.parametrize(("successes", "n"), [(8, 10), (1, 3), (17, 30), (29, 30)])
def test_wilson_matches_the_formula(successes: int, n: int) -> None:
    interval = wilson_interval(successes, n)
    low, high = hand_wilson(successes, n)
    assert interval.low == pytest.approx(low, abs=1e-12)
    assert interval.high == pytest.approx(high, abs=1e-12)


def test_wilson_published_value_for_8_of_10() -> None:
    interval = wilson_interval(8, 10)
    assert (round(interval.low or 0, 4), round(interval.high or 0, 4)) == (0.4902, 0.9433)


def test_wilson_edges_stay_in_unit_interval_and_are_exact() -> None:
    none = wilson_interval(0, 10)
    every = wilson_interval(10, 10)
    assert none.low == 0.0 and none.high == pytest.approx(0.2775, abs=1e-4)
    assert every.high == 1.0 and every.low == pytest.approx(0.7225, abs=1e-4)
    empty = wilson_interval(0, 0)
    assert empty.low is None and empty.high is None


def test_wilson_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=1.0)


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (10, 2.2281), (29, 2.0452), (100, 1.9840)],
)
def test_t_quantile_matches_tables(df: int, expected: float) -> None:
    assert student_t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_t_cdf_is_symmetric() -> None:
    assert student_t_cdf(0.0, 5) == pytest.approx(0.5)
    assert student_t_cdf(-1.3, 7) == pytest.approx(1 - student_t_cdf(1.3, 7))


def test_t_interval_hand_computed() -> None:
    # mean 0.6, sample sd sqrt(0.1), se = sqrt(0.1/5) = 0.141421; t(0.975, 4) = 2.776445 -> half 0.392644
    interval = t_interval([0.2, 0.4, 0.6, 0.8, 1.0])
    assert interval.low == pytest.approx(0.6 - 0.392644, abs=1e-5)
    assert interval.high == pytest.approx(0.6 + 0.392644, abs=1e-5)


def test_t_interval_is_clipped_and_undefined_below_two_values() -> None:
    wide = t_interval([0.0, 1.0, 0.0])
    assert wide.low == 0.0 and wide.high is not None and wide.high <= 1.0
    single = t_interval([0.5])
    assert single.low is None and single.high is None


def test_score_interval_refuses_wilson_for_fractional_scores() -> None:
    with pytest.raises(ValueError, match="binary"):
        score_interval([0.5, 1.0], "wilson")
    assert score_interval([1.0, 0.0, 1.0, 1.0], "wilson") == wilson_interval(3, 4)
