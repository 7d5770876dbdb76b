"""The measurements shipped with the library are exactly what the published reports hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flowsteer_mcp.director.library import DEFAULT_WORKFLOW, LIBRARY
from flowsteer_mcp.director.measured import library_measurements, measurements_of

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "library_measurements.py"


def test_the_shipped_file_matches_the_published_reports() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_every_measured_workflow_is_in_the_library_and_every_default_was_measured_on_full_dev_slices() -> None:
    for task_type, entries in library_measurements().workflows.items():
        assert set(entries) <= set(LIBRARY[task_type]), task_type
    for task_type in ("code", "math", "qa"):
        full = [m for m in measurements_of(task_type, DEFAULT_WORKFLOW[task_type]) if m.n >= 82]
        assert full, f"the {task_type} default has no full dev-slice measurement"
        assert all(m.note is None for m in full), "a default measured under today's operators"


def test_the_code_default_reads_as_published() -> None:
    """docs/runs/full-code/README.md, run 2 (direct8-exec-lean): HumanEval 74.4 vs 58.5 at 3084 vs 484 tokens."""
    lean = [m for m in measurements_of("code", "direct8-exec") if m.run.endswith("direct8-exec-lean")]
    humaneval = next(m for m in lean if m.dataset == "humaneval")
    assert (humaneval.n, round(humaneval.score * 100, 1), round(humaneval.direct_score * 100, 1)) == (82, 74.4, 58.5)
    assert (round(humaneval.tokens), round(humaneval.direct_tokens)) == (3084, 484)
