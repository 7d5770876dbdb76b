"""MCP resources (read-only JSON/Mermaid views) and the `flow_director` prompt.

Like the tools, each is a module-level function with its table (`server_resources`); the workflow resources and
the prompt read the server's state from their context (`kit_of`). A static resource gets no context (the SDK
injects one only into templates), so the operator catalogue is bound to the workbench when its row is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, get_args

from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, UserMessage
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import INVALID_PARAMS, Resource
from pydantic import Field

from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.export import export_mermaid
from flowsteer_mcp.canvas.options import FINISH_PRESETS, CanvasLimits, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.canvas.validate import validate_task
from flowsteer_mcp.server.errors import PromptAndResourceErrors
from flowsteer_mcp.server.library import LIBRARY_DESCRIPTION, LIBRARY_URI, library_resource
from flowsteer_mcp.server.toolkit import TaskTypeInput, ToolKit, infer_task_type, kit_of
from flowsteer_mcp.server.tools import catalog_of, detail_of
from flowsteer_mcp.server.workbench import Workbench, WorkflowNotFound

OPERATORS_URI = "flowsteer://operators"
WORKFLOW_URI = "flowsteer://workflows/{workflow_id}"
MERMAID_URI = WORKFLOW_URI + "/mermaid"
TASK_PREVIEW_CHARS = 120
PROMPT_TITLE = "Flow-Director"
PROMPT_DESCRIPTION = "system prompt and first turn for designing a workflow for a task"


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


@dataclass(frozen=True)
class ResourceEntry:
    """One resource as the server registers it: its URI (a template when it has variables), the function that
    reads it, and what the listing shows (the name is the function's, as the SDK would name it)."""

    uri: str
    name: str
    fn: Callable[..., Any]
    title: str
    mime_type: str
    description: str


async def operators_resource(bench: Workbench) -> str:
    return catalog_of(bench).model_dump_json(indent=2)


async def workflow_resource(workflow_id: str, ctx: Context) -> str:
    try:
        async with kit_of(ctx).bench.open(workflow_id, write=False) as canvas:
            return detail_of(workflow_id, canvas).model_dump_json(indent=2)
    except WorkflowNotFound:
        raise unknown_workflow(workflow_id) from None


async def workflow_mermaid(workflow_id: str, ctx: Context) -> str:
    try:
        async with kit_of(ctx).bench.open(workflow_id, write=False) as canvas:
            return export_mermaid(canvas.state.graph)
    except WorkflowNotFound:
        raise unknown_workflow(workflow_id) from None


def server_resources(bench: Workbench) -> list[ResourceEntry]:
    """The resources in the order clients list them (static ones first, then the templates)."""
    json = "application/json"
    return [
        ResourceEntry(LIBRARY_URI, "library_resource", library_resource, "Workflow library", json, LIBRARY_DESCRIPTION),
        ResourceEntry(
            OPERATORS_URI,
            "operators_resource",
            partial(operators_resource, bench),
            "Operator library",
            json,
            "the operator library (names, categories, roles, what each does and when to use it)",
        ),
        ResourceEntry(
            WORKFLOW_URI,
            "workflow_resource",
            workflow_resource,
            "Workflow state",
            json,
            "a workflow's full state, as get_workflow returns it",
        ),
        ResourceEntry(
            MERMAID_URI,
            "workflow_mermaid",
            workflow_mermaid,
            "Workflow diagram (Mermaid)",
            "text/vnd.mermaid",
            "a workflow as a Mermaid flowchart",
        ),
    ]


def register_resources(kit: ToolKit) -> None:
    """The resources, their error codes, the live workflows in resources/list, and the `flow_director` prompt."""
    server = kit.server
    server.middleware.append(PromptAndResourceErrors(server))
    server.middleware.append(LiveWorkflowsListed(kit.bench))
    for entry in server_resources(kit.bench):
        server.resource(
            entry.uri, name=entry.name, title=entry.title, mime_type=entry.mime_type, description=entry.description
        )(entry.fn)
    server.prompt(title=PROMPT_TITLE, description=PROMPT_DESCRIPTION)(flow_director)


async def flow_director(
    task: Annotated[str, Field(description="the problem the workflow must solve")],
    ctx: Context,
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
    """The `flow_director` prompt: the policy's system prompt and first turn for a task."""
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
    kit = kit_of(ctx)
    spec = TaskSpec(problem=task, task_type=infer_task_type(task_type, None, None))
    canvas = Canvas(CanvasState(task=spec), kit.registry)
    system = kit.observer.system_prompt(kit.registry, FINISH_PRESETS[finish])
    first = kit.observer.turn(spec, canvas.view(), None)
    return [UserMessage(content=system + "\n\n" + first)]
