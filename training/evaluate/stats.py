"""Means with 95% confidence intervals for evaluation tables.

Binary scores (math accuracy, code pass@1) get the Wilson score interval: unlike the normal approximation it
stays inside [0, 1] and is sensible at 0/n and n/n, which small benchmark slices hit often. Fractional scores
(QA token F1) get a Student-t interval on the mean, clipped to [0, 1] because scores cannot leave it.
The t quantile is computed here (regularised incomplete beta + bisection) so the harness needs no SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Literal

from pydantic import BaseModel, ConfigDict

IntervalMethod = Literal["wilson", "student_t"]

METHOD_DESCRIPTIONS: dict[IntervalMethod, str] = {
    "wilson": "Wilson score interval (binary scores)",
    "student_t": "Student-t interval on the mean, clipped to [0, 1] (fractional scores)",
}


class Interval(BaseModel):
    """A confidence interval; `low`/`high` are None when it is undefined (too few items)."""

    model_config = ConfigDict(frozen=True)

    method: IntervalMethod
    confidence: float
    low: float | None
    high: float | None


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for `successes` out of `n` Bernoulli trials."""
    _check_confidence(confidence)
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return Interval(method="wilson", confidence=confidence, low=None, high=None)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact bounds at 0/n and n/n (no float residue)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(method="wilson", confidence=confidence, low=low, high=high)


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz evaluation)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return result


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function, for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    tail = 0.5 * regularized_beta(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(probability: float, df: float) -> float:
    """The t value with P(T <= t) = probability, by bisection on the CDF (for probability in (0.5, 1))."""
    if not 0.5 <= probability < 1.0:
        raise ValueError(f"probability must be in [0.5, 1), got {probability}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < probability:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if student_t_cdf(middle, df) < probability:
            low = middle
        else:
            high = middle
        if high - low < 1e-12:
            break
    return (low + high) / 2


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Student-t interval on the mean of `values`, clipped to [0, 1]; undefined for fewer than 2 values."""
    _check_confidence(confidence)
    n = len(values)
    if n < 2:
        return Interval(method="student_t", confidence=confidence, low=None, high=None)
    mean = math.fsum(values) / n
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = student_t_quantile(0.5 + confidence / 2, n - 1) * math.sqrt(variance / n)
    return Interval(method="student_t", confidence=confidence, low=max(0.0, mean - half), high=min(1.0, mean + half))


def is_binary(values: Sequence[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def score_interval(values: Sequence[float], method: IntervalMethod, confidence: float = 0.95) -> Interval:
    """The interval of `method` for a list of scores; Wilson requires every score to be 0 or 1."""
    if method == "wilson":
        if not is_binary(values):
            raise ValueError("the Wilson interval needs binary (0/1) scores; use student_t for fractional scores")
        return wilson_interval(sum(1 for v in values if v == 1.0), len(values), confidence)
    return t_interval(values, confidence)
