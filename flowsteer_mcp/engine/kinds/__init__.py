"""Stage executors, one module per stage kind, keyed by the kind's name (`canvas/kinds/` declares the kinds).

Adding a kind: write its executor here and register it in `EXECUTORS`; `tests/engine/test_fallback*.py`
checks that every canvas kind has one.
"""

from __future__ import annotations

from flowsteer_mcp.engine.kinds.base import StageExecutor, StageOutcome
from flowsteer_mcp.engine.kinds.conditional import run_conditional
from flowsteer_mcp.engine.kinds.fallback import run_fallback
from flowsteer_mcp.engine.kinds.loop import run_loop
from flowsteer_mcp.engine.kinds.operator import run_operator
from flowsteer_mcp.engine.kinds.parallel import branch_draws, run_parallel

EXECUTORS: dict[str, StageExecutor] = {
    "operator": run_operator,
    "parallel": run_parallel,
    "conditional": run_conditional,
    "loop": run_loop,
    "fallback": run_fallback,
}

__all__ = ["EXECUTORS", "StageExecutor", "StageOutcome", "branch_draws"]
