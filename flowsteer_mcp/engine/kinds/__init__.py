"""Stage runners, one module per built-in stage kind, keyed by the kind's name (`canvas/kinds/` declares the
kinds).

Adding a kind: register its canvas side (`flowsteer_mcp.canvas.kinds.register_kind`) and its stage runner here with
`register_stage_runner(name, run_it)`; `tests/engine/test_fallback*.py` checks that every built-in kind has one and
`tests/canvas/test_toy_kind.py` adds a kind from a test alone.
"""

from __future__ import annotations

from flowsteer_mcp.engine.kinds.base import StageOutcome, StageRunner, applied, skipped_row
from flowsteer_mcp.engine.kinds.conditional import run_conditional
from flowsteer_mcp.engine.kinds.fallback import run_fallback
from flowsteer_mcp.engine.kinds.loop import run_loop
from flowsteer_mcp.engine.kinds.operator import run_operator
from flowsteer_mcp.engine.kinds.parallel import branch_draws, run_parallel
from flowsteer_mcp.engine.kinds.registry import (
    STAGE_RUNNERS,
    StageRunnerRegistrationError,
    register_stage_runner,
    registered_stage_runner,
    stage_runner_for,
    unregister_stage_runner,
)

for _name, _runner in (
    ("operator", run_operator),
    ("parallel", run_parallel),
    ("conditional", run_conditional),
    ("loop", run_loop),
    ("fallback", run_fallback),
):
    register_stage_runner(_name, _runner, builtin=True)

__all__ = [
    "STAGE_RUNNERS",
    "StageOutcome",
    "StageRunner",
    "StageRunnerRegistrationError",
    "applied",
    "branch_draws",
    "register_stage_runner",
    "registered_stage_runner",
    "skipped_row",
    "stage_runner_for",
    "unregister_stage_runner",
]
