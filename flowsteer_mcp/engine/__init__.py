"""The execution engine: runs a canvas workflow graph with operators (docs/design/canvas.md, "Execution").

The canvas only knows the `WorkflowRunner` protocol; `WorkflowEngine` implements it. This package never
imports the MCP layer. How a run ends (ok, degraded: a failed last stage keeps the best earlier solution,
failed, timeout) is documented in `runner.py`; the do-no-harm rule for revisions in
`operators/library/revision.py`. Sampling: every operator call is a draw, greedy first; sampled draws are seeded
from the workflow seed (`WorkflowEngine(seed=...)`), the node id and the draw index, and a node with `samples: k`
behaves like k parallel branches of itself (`stages.py`).
"""

from __future__ import annotations

from flowsteer_mcp.engine.memo import MemoCache
from flowsteer_mcp.engine.metering import MeteredBackend
from flowsteer_mcp.engine.runner import NEW_MEMO, WorkflowEngine
from flowsteer_mcp.engine.state import FlowState

__all__ = ["NEW_MEMO", "FlowState", "MemoCache", "MeteredBackend", "WorkflowEngine"]
