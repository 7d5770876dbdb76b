"""Creating a workflow: empty or from the measured library (`create_workflow`), or from an export
(`import_workflow`). Neither runs it."""

from __future__ import annotations

from typing import Annotated, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.director.library import LibraryWorkflow, UnknownWorkflowError, library_workflow
from flowsteer_mcp.server.arguments import EntryPoint, ImportSpec, Name, PublicTests, TaskText
from flowsteer_mcp.server.results import CreatedWorkflow, WorkflowOptionsInput
from flowsteer_mcp.server.toolkit import TaskTypeInput, kit_of


async def create_workflow(
    task: Annotated[TaskText, Field(description="the problem the workflow must solve")],
    ctx: Context,
    task_type: Annotated[TaskTypeInput, Field(description="math, code, qa, general, or auto")] = "auto",
    entry_point: Annotated[EntryPoint | None, Field(description="code tasks: the function to implement")] = None,
    public_tests: Annotated[PublicTests | None, Field(description="code tasks: tests visible to the workflow")] = None,
    options: WorkflowOptionsInput | None = None,
    library_workflow: Annotated[
        Name | None,
        Field(description="start from this library workflow (list_library), 'default' for the task type's best"),
    ] = None,
) -> CreatedWorkflow:
    """Create a workflow canvas for a task, empty or holding a library workflow (not run yet); returns its
    workflow_id, state and first observation."""
    kit = kit_of(ctx)
    task_spec = kit.task_from(task, task_type, entry_point, public_tests)
    state = CanvasState(task=task_spec, options=kit.options_from(options))
    if library_workflow is None:
        return await kit.created(state, "Workflow created. Add operators (act or the typed tools), then finish.")
    entry = library_entry(task_spec.task_type, library_workflow)
    state.graph = kit.imported(entry.spec(), "json", state)
    return await kit.created(state, f"Workflow created from the library's {entry.name}: {entry.dsl()}.")


async def import_workflow(
    spec: Annotated[ImportSpec, Field(description="a JSON export or a DSL string")],
    task: Annotated[TaskText, Field(description="the problem the imported workflow is for")],
    ctx: Context,
    format: Annotated[Literal["auto", "json", "dsl"], Field(description="auto detects JSON vs DSL")] = "auto",
    task_type: TaskTypeInput = "auto",
    entry_point: EntryPoint | None = None,
    public_tests: PublicTests | None = None,
    options: WorkflowOptionsInput | None = None,
) -> CreatedWorkflow:
    """Create a workflow from a JSON export or a DSL string (validated like any edit)."""
    kit = kit_of(ctx)
    if len(spec) > kit.settings.max_import_chars:
        raise ToolError(f"spec is {len(spec)} characters; the limit is {kit.settings.max_import_chars}.")
    task_spec = kit.task_from(task, task_type, entry_point, public_tests)
    state = CanvasState(task=task_spec, options=kit.options_from(options))
    kind: Literal["json", "dsl"] = format if format != "auto" else ("json" if spec.lstrip().startswith("{") else "dsl")
    # in a worker thread: a big spec must not stall the other clients of this server
    state.graph = await anyio.to_thread.run_sync(kit.imported, spec, kind, state)
    return await kit.created(state, f"Workflow imported from {kind}.")


def library_entry(task_type: str, name: str) -> LibraryWorkflow:
    """The library workflow `name` ('default': the task type's default) or a ToolError naming the valid ones."""
    try:
        return library_workflow(task_type, None if name == "default" else name)
    except UnknownWorkflowError as error:
        raise ToolError(f"{error} (or 'default'); list_library describes each.") from None
