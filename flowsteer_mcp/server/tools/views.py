"""The read-only views of the workbench (`get_workflow`, `list_workflows`, `export_workflow`, `list_operators`)
and `delete_workflow`, with the documents they answer, which the resources share (resources.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from flowsteer_mcp.canvas.export import export_workflow as render_export
from flowsteer_mcp.canvas.session import Canvas, execution_view
from flowsteer_mcp.server.results import (
    Deleted,
    ExportResult,
    OperatorCatalog,
    OperatorInfo,
    RunResult,
    WorkflowDetail,
    WorkflowList,
    WorkflowSummary,
)
from flowsteer_mcp.server.toolkit import kit_of
from flowsteer_mcp.server.tools.common import WorkflowId
from flowsteer_mcp.server.workbench import Workbench
from flowsteer_mcp.store.base import StoredWorkflow
from operators.registry import OperatorRegistry


async def get_workflow(workflow_id: WorkflowId, ctx: Context) -> WorkflowDetail:
    """Read the full state: graph, DSL, stats, last result, round, status."""
    async with kit_of(ctx).opened(workflow_id, write=False) as canvas:
        return detail_of(workflow_id, canvas)


async def list_operators(ctx: Context) -> OperatorCatalog:
    """The operator library (names, categories, roles, what each does and when to use it)."""
    return catalog_of(kit_of(ctx).bench)


async def export_workflow(
    workflow_id: WorkflowId,
    ctx: Context,
    format: Annotated[
        Literal["json", "dsl", "mermaid"], Field(description="json (round-trippable), dsl, mermaid")
    ] = "json",
) -> ExportResult:
    """Export the workflow as canonical JSON, DSL text or a Mermaid flowchart."""
    async with kit_of(ctx).opened(workflow_id, write=False) as canvas:
        return ExportResult(workflow_id=workflow_id, format=format, content=render_export(canvas.state.graph, format))


async def delete_workflow(workflow_id: WorkflowId, ctx: Context) -> Deleted:
    """Delete a workflow and its stored state."""
    if not await kit_of(ctx).bench.delete(workflow_id):
        raise ToolError(f"Unknown workflow_id {workflow_id!r}; list_workflows shows the live ones.")
    return Deleted(workflow_id=workflow_id, deleted=True)


async def list_workflows(ctx: Context) -> WorkflowList:
    """The workflows this server holds, with status and current DSL."""
    kit = kit_of(ctx)
    return WorkflowList(workflows=[summary_of(record, kit.registry) for record in await kit.bench.list()])


def summary_of(record: StoredWorkflow, registry: OperatorRegistry) -> WorkflowSummary:
    view = Canvas(record.state, registry).view()
    return WorkflowSummary(
        workflow_id=record.workflow_id,
        task_preview=record.state.task.problem[:120],
        task_type=record.state.task.task_type,
        status=view.status,
        round=view.round,
        max_rounds=view.max_rounds,
        dsl=view.dsl,
    )


def detail_of(workflow_id: str, canvas: Canvas) -> WorkflowDetail:
    state = canvas.state
    report = state.last_execution
    view = execution_view(report)
    return WorkflowDetail(
        workflow_id=workflow_id,
        task=state.task,
        options=state.options.model_dump(mode="json"),
        graph=state.graph.model_dump(mode="json"),
        state=canvas.view(),
        last_execution=RunResult(workflow_id=workflow_id, execution=view, trace=report.trace)
        if report and view
        else None,
        end=state.end,
        last_feedback=state.last_feedback,
        history_length=len(state.history),
    )


def catalog_of(bench: Workbench) -> OperatorCatalog:
    return OperatorCatalog(
        operators=[
            OperatorInfo(
                name=s.name,
                category=s.category.value,
                role=s.role.value,
                summary=s.summary,
                when_to_use=s.when_to_use,
                signature=s.signature,
                accepts_prompt=s.accepts_prompt,
                legacy=s.legacy,
            )
            for s in bench.registry.specs()
        ]
    )
