"""Typed reads of `OperatorRuntime.options`, so a bad setting is an error value, not a crash.

Options the built-in operators read (all optional):
- `node_id` (str): attached to executor requests for usage records.
- `test_max_repairs` (int, 0..10, default 2): repair attempts Test makes after the public tests fail.
- `verify_adopt` ("never" | "high_confidence" | "always", default "never"): when Verify may replace
  the answer it judged wrong by its own independent answer.
- `verify_adopt_threshold` (float in [0, 1], default 0.8): minimum confidence for "high_confidence".
"""

from __future__ import annotations

from collections.abc import Collection

from operators.base import OperatorRuntime
from operators.library._dialogue import Failure

__all__ = ["choice_option", "float_option", "int_option"]


def int_option(runtime: OperatorRuntime, key: str, default: int, *, low: int, high: int) -> int | Failure:
    value = runtime.options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return Failure(f"option {key!r} must be an integer from {low} to {high}; got {value!r}")
    return value


def float_option(runtime: OperatorRuntime, key: str, default: float, *, low: float, high: float) -> float | Failure:
    value = runtime.options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        return Failure(f"option {key!r} must be a number from {low} to {high}; got {value!r}")
    return float(value)


def choice_option(runtime: OperatorRuntime, key: str, default: str, choices: Collection[str]) -> str | Failure:
    value = runtime.options.get(key, default)
    if value not in choices:
        return Failure(f"option {key!r} must be one of {', '.join(sorted(choices))}; got {value!r}")
    return str(value)
