"""Figures only from runs that worked.

A benchmark whose runs fail must not print a throughput or a ratio: a figure computed from failed runs (a crash
is fast) looks like a result and lets the benchmark rot unnoticed. Each benchmark collects its report lines and
its failed runs in a `BenchmarkReport`; `publish()` prints the lines only when no run failed, and otherwise
names the failures on stderr and exits non-zero.
"""

from __future__ import annotations

import sys
from typing import NoReturn

FAILED_RUNS_EXIT = 1
_SHOWN_FAILURES = 10


class BenchmarkFailed(SystemExit):
    """Raised by `publish()` when a run failed; the exit status is `FAILED_RUNS_EXIT`."""


class BenchmarkReport:
    """The lines a benchmark would print, held back until every run is known to have worked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: list[str] = []
        self.failures: list[str] = []

    def line(self, text: str = "") -> None:
        self.lines.append(text)

    def fail(self, what: str) -> None:
        """Record one failed run (or a group of them, e.g. "round-synchronous: 32 of 32 trajectories failed")."""
        self.failures.append(what)

    def require(self, condition: bool, what: str) -> None:
        """Record `what` as a failure unless `condition` holds."""
        if not condition:
            self.fail(what)

    def publish(self) -> None:
        """Print the report, or, if any run failed, the failures instead and exit with `FAILED_RUNS_EXIT`."""
        if self.failures:
            self._abort()
        for text in self.lines:
            print(text)

    def _abort(self) -> NoReturn:
        err = sys.stderr
        print(f"{self.name}: {len(self.failures)} failure(s); no figures printed.", file=err)
        for what in self.failures[:_SHOWN_FAILURES]:
            print(f"  - {what}", file=err)
        if len(self.failures) > _SHOWN_FAILURES:
            print(f"  ... and {len(self.failures) - _SHOWN_FAILURES} more", file=err)
        raise BenchmarkFailed(FAILED_RUNS_EXIT)
