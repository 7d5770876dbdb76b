"""Stage executors, one module per built-in stage kind, keyed by the kind's name (`canvas/kinds/` declares the
kinds).

Adding a kind: register its canvas side (`flowsteer_mcp.canvas.kinds.register_kind`) and its executor here with
`register_executor(name, run_it)`; `tests/engine/test_fallback*.py` checks that every built-in kind has one and
`tests/canvas/test_toy_kind.py` adds a kind from a test alone.
"""

from __future__ import annotations

from flowsteer_mcp.engine.kinds.base import StageExecutor, StageOutcome, applied, skipped_row
from flowsteer_mcp.engine.kinds.conditional import run_conditional
from flowsteer_mcp.engine.kinds.fallback import run_fallback
from flowsteer_mcp.engine.kinds.loop import run_loop
from flowsteer_mcp.engine.kinds.operator import run_operator
from flowsteer_mcp.engine.kinds.parallel import branch_draws, run_parallel
from flowsteer_mcp.engine.kinds.registry import (
    EXECUTORS,
    ExecutorRegistrationError,
    executor_for,
    register_executor,
    registered_executor,
    unregister_executor,
)

for _name, _executor in (
    ("operator", run_operator),
    ("parallel", run_parallel),
    ("conditional", run_conditional),
    ("loop", run_loop),
    ("fallback", run_fallback),
):
    register_executor(_name, _executor, builtin=True)

__all__ = [
    "EXECUTORS",
    "ExecutorRegistrationError",
    "StageExecutor",
    "StageOutcome",
    "applied",
    "branch_draws",
    "executor_for",
    "register_executor",
    "registered_executor",
    "skipped_row",
    "unregister_executor",
]
