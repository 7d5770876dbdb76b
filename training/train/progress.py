"""A progress bar over optimizer steps with an ETA and a few compact metrics.

Why a wrapper: a resumed run must start the bar at its checkpoint step and estimate the ETA from this run's
pace only (tqdm's `initial` does both), and logs piped to a file must not fill with carriage-return noise, so the
bar is off unless stderr is a terminal.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import Self

from tqdm import tqdm


class StepProgress:
    """tqdm over `total` optimizer steps on stderr, starting at `initial`; a no-op when disabled."""

    def __init__(self, total: int, *, initial: int = 0, enabled: bool = True, desc: str = "train") -> None:
        active = enabled and sys.stderr is not None and sys.stderr.isatty()
        self._bar: tqdm[None] | None = (
            tqdm(total=total, initial=initial, desc=desc, unit="step", file=sys.stderr, dynamic_ncols=True)
            if active
            else None
        )

    def update(self, step: int, postfix: Mapping[str, float | None] | None = None) -> None:
        """Move the bar to absolute `step` (never backwards) and show `postfix`, e.g. `R=-0.62 kl=1.2e-04`."""
        if self._bar is None:
            return
        if postfix:
            self._bar.set_postfix_str(format_postfix(postfix), refresh=False)
        advance = step - self._bar.n
        if advance > 0:
            self._bar.update(advance)
        else:
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def format_postfix(postfix: Mapping[str, float | None]) -> str:
    """`{"R": -0.62, "kl": 0.00012}` -> `R=-0.62 kl=1.2e-04`."""
    return " ".join(f"{name}={compact_number(value)}" for name, value in postfix.items())


def compact_number(value: float | None) -> str:
    """Two decimals for ordinary magnitudes, two significant digits in exponent form for tiny or huge ones."""
    if value is None or not math.isfinite(value):
        return "nan" if value is None or math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value == 0:
        return "0"
    if 0.01 <= abs(value) < 10_000:
        return f"{value:.2f}"
    return f"{value:.1e}"
