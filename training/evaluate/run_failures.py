"""Why an evaluation withholds its figures: the episodes that did not run, grouped by director and error.

An evaluation whose policy server died scored every episode of that director 0 and still printed a table, so a
dead endpoint read as a bad director. Run failures (`ItemResult.run_failure`) are not measurements; while any
remain, `flowsteer eval` prints this summary instead of a report and exits non-zero, and `--resume` runs them
again with the graded episodes kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from flowsteer_mcp.director.graded import ItemResult

ERRORS_SHOWN = 3  # distinct (director, error) pairs named; the rest are counted
ERROR_CHARS = 300  # an error message as shown: enough for its type and cause, not a whole traceback


def run_failures(items: Sequence[ItemResult]) -> list[ItemResult]:
    return [item for item in items if item.run_failure]


def run_failure_message(failures: Sequence[ItemResult], total: int, journal: Path) -> str:
    """What failed, how often, and what to do; the graded episodes stay in `journal`."""
    causes = Counter((item.director, (item.error or "no error recorded")[:ERROR_CHARS]) for item in failures)
    lines = [
        f"flowsteer eval: error: {len(failures)} of {total} episodes did not run or could not be graded, "
        "so no figures are reported:"
    ]
    lines += [f"  {count} x {director}: {error}" for (director, error), count in causes.most_common(ERRORS_SHOWN)]
    if len(causes) > ERRORS_SHOWN:
        lines.append(f"  ... and {len(causes) - ERRORS_SHOWN} other errors")
    lines.append(
        f"The graded episodes are kept in {journal}. Fix the cause (is every server up?), then rerun the same "
        "command with --resume: only the failed episodes run again."
    )
    return "\n".join(lines)
