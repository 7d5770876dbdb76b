"""MCP resources (read-only JSON/Mermaid views) and the `flow_director` prompt."""

from __future__ import annotations

from typing import Annotated, Any, get_args

from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import UserMessage
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import INVALID_PARAMS, Resource
from pydantic import Field

from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.export import export_mermaid
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import FINISH_PRESETS, CanvasLimits, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.canvas.validate import validate_task
from flowsteer_mcp.server.errors import PromptAndResourceErrors
from flowsteer_mcp.server.toolkit import TaskTypeInput, infer_task_type
from flowsteer_mcp.server.tools import catalog_of, detail_of
from flowsteer_mcp.server.workbench import Workbench, WorkflowNotFound

OPERATORS_URI = "flowsteer://operators"
WORKFLOW_URI = "flowsteer://workflows/{workflow_id}"
MERMAID_URI = WORKFLOW_URI + "/mermaid"
TASK_PREVIEW_CHARS = 120


class LiveWorkflowsListed:
    """Middleware for resources/list: after the static resources, each live workflow's state (WORKFLOW_URI).

    Why: hosts that offer resources from the list (not from templates) can then offer workflows too, and the
    list changes exactly on create, delete and expiry, which `subscriptions` announces (`listChanged`)."""

    def __init__(self, bench: Workbench) -> None:
        self.bench = bench

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "resources/list" or not isinstance(result, dict):
            return result
        listed = [
            Resource(
                uri=WORKFLOW_URI.format(workflow_id=record.workflow_id),
                name=record.workflow_id,
                title=f"Workflow {record.workflow_id}",
                description=record.state.task.problem[:TASK_PREVIEW_CHARS],
                mime_type="application/json",
            ).model_dump(by_alias=True, mode="json", exclude_none=True)
            for record in await self.bench.list()
        ]
        return {**result, "resources": [*result.get("resources", []), *listed]}


def unknown_workflow(workflow_id: str) -> ResourceNotFoundError:
    """Not found (not an internal error): the client names a workflow that does not exist (any more)."""
    return ResourceNotFoundError(
        f"Unknown workflow_id {workflow_id!r} (never created, deleted, or expired); list_workflows shows the live ones."
    )


def register_resources(server: MCPServer, bench: Workbench, observer: ObservationBuilder) -> None:
    server.middleware.append(PromptAndResourceErrors(server))
    server.middleware.append(LiveWorkflowsListed(bench))

    @server.resource(
        OPERATORS_URI,
        title="Operator library",
        mime_type="application/json",
        description="the operator library (names, categories, roles, what each does and when to use it)",
    )
    async def operators_resource() -> str:
        return catalog_of(bench).model_dump_json(indent=2)

    @server.resource(
        WORKFLOW_URI,
        title="Workflow state",
        mime_type="application/json",
        description="a workflow's full state, as get_workflow returns it",
    )
    async def workflow_resource(workflow_id: str) -> str:
        try:
            async with bench.open(workflow_id, write=False) as canvas:
                return detail_of(workflow_id, canvas).model_dump_json(indent=2)
        except WorkflowNotFound:
            raise unknown_workflow(workflow_id) from None

    @server.resource(
        MERMAID_URI,
        title="Workflow diagram (Mermaid)",
        mime_type="text/vnd.mermaid",
        description="a workflow as a Mermaid flowchart",
    )
    async def workflow_mermaid(workflow_id: str) -> str:
        try:
            async with bench.open(workflow_id, write=False) as canvas:
                return export_mermaid(canvas.state.graph)
        except WorkflowNotFound:
            raise unknown_workflow(workflow_id) from None

    register_prompt(server, bench, observer)


def register_prompt(server: MCPServer, bench: Workbench, observer: ObservationBuilder) -> None:
    """The `flow_director` prompt: the policy's system prompt and first turn for a task."""

    @server.prompt(
        title="Flow-Director", description="system prompt and first turn for designing a workflow for a task"
    )
    async def flow_director(
        task: Annotated[str, Field(description="the problem the workflow must solve")],
        task_type: Annotated[
            str, Field(description=f"one of {', '.join(get_args(TaskTypeInput))}; auto picks general")
        ] = "auto",
        finish: Annotated[
            str,
            Field(
                description="finish gate: 'paper' (>= 5 operators, a structure, solver + checker) "
                "or 'relaxed' (>= 1 operator)"
            ),
        ] = "paper",
    ) -> list[UserMessage]:
        from flowsteer_mcp.canvas.text import excerpt  # what came is quoted only as a short excerpt

        # Only an MCPError reaches the client with its message; anything else becomes "Internal server error".
        # The arguments' sizes, names and Unicode are checked before this runs (server/errors.py).
        if not task.strip():
            raise MCPError(INVALID_PARAMS, "task is empty: pass the problem statement the workflow should solve.")
        if task_type not in get_args(TaskTypeInput):
            raise MCPError(
                INVALID_PARAMS,
                f"Unknown task_type {excerpt(task_type)}; use one of {', '.join(get_args(TaskTypeInput))}.",
            )
        if finish not in FINISH_PRESETS:
            raise MCPError(
                INVALID_PARAMS, f"Unknown finish preset {excerpt(finish)}; use one of {', '.join(FINISH_PRESETS)}."
            )
        try:
            validate_task(CanvasLimits(), problem=task)
        except CanvasError as error:
            raise MCPError(INVALID_PARAMS, error.message) from None
        kind = infer_task_type(task_type, None, None)
        policy = FINISH_PRESETS[finish]
        spec = TaskSpec(problem=task, task_type=kind)
        canvas = Canvas(CanvasState(task=spec), bench.registry)
        system = observer.system_prompt(bench.registry, policy)
        first = observer.turn(spec, canvas.view(), None)
        return [UserMessage(content=system + "\n\n" + first)]
