"""How a policy director drives this server's own canvas, in process (`KitLink`).

Why not an MCP client: `solve(director="policy")` already runs inside a tool call, on the server that holds the
canvas; each turn goes through the same `Canvas.act` as the `act` tool, under the same busy rule and progress
reporting, without a second connection. Its own module so that where the policy is found (`policy.py`, which
the server's state holds) does not depend on the tools it drives.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.director.link import CanvasCallError
from flowsteer_mcp.server.toolkit import ToolKit
from flowsteer_mcp.server.tools import detail_of, step_of


class KitLink:
    """`CanvasCalls` on this server's own canvas: what the policy director calls, without an MCP round trip.

    Only the three tools a policy episode uses are here; each answers the JSON its MCP tool would."""

    def __init__(self, kit: ToolKit, ctx: Context, options: CanvasOptions) -> None:
        self.kit = kit
        self.ctx = ctx
        self.options = options
        self.workflow_id: str | None = None

    async def create(self, task: TaskSpec, options: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            created = await self.kit.created(
                CanvasState(task=task, options=self.options), "Workflow created for the Flow-Director."
            )
        except ToolError as error:
            raise CanvasCallError(f"create_workflow: {error}") from None
        self.workflow_id = created.workflow_id
        return created.model_dump(mode="json")

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        workflow_id = str(arguments["workflow_id"])
        try:
            if tool == "act":
                async with self.kit.working(workflow_id, self.ctx, "solve") as (canvas, progress):
                    step = step_of(workflow_id, await canvas.act(str(arguments["text"]), progress))
                return step.model_dump(mode="json")
            if tool == "get_workflow":
                async with self.kit.opened(workflow_id, write=False) as canvas:
                    return detail_of(workflow_id, canvas).model_dump(mode="json")
        except ToolError as error:
            raise CanvasCallError(f"{tool}: {error}") from None
        raise CanvasCallError(f"{tool}: not offered to an in-process director")
