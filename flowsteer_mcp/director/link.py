"""A thin typed wrapper over an MCP client for the canvas tools: structured results or a clear error.

`CanvasCalls` is what a director needs of it; the server's `solve` tool passes an in-process implementation
(flowsteer_mcp/server/policy.py) so the policy director drives the server's own canvas without a second MCP
connection.
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.errors import FlowSteerError


class CanvasCallError(FlowSteerError, RuntimeError):
    """A canvas tool answered with an error (the message is the server's actionable text)."""


class CanvasCalls(Protocol):
    """The canvas tools a director calls, by name, with their structured (JSON) results."""

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]: ...

    async def create(self, task: TaskSpec, options: dict[str, Any] | None = None) -> dict[str, Any]: ...


class CanvasLink:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, {k: v for k, v in arguments.items() if v is not None})
        if result.is_error or result.structured_content is None:
            text = " ".join(getattr(block, "text", "") for block in result.content)
            raise CanvasCallError(f"{tool}: {text or 'no structured result'}")
        return result.structured_content

    async def create(self, task: TaskSpec, options: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.call(
            "create_workflow",
            task=task.problem,
            task_type=task.task_type,
            entry_point=task.entry_point,
            public_tests=task.public_tests,
            options=options,
        )
