"""The steps that may run a workflow as a whole: `act` (one Flow-Director turn), `run_workflow` and `finish`.

Each opens the workflow for writing and reports progress (with a heartbeat) while it runs. `act` answers an
unparseable or invalid turn as a normal result (ok=false, one round used): for a policy a wasted turn is part of
the episode."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from flowsteer_mcp.canvas.session import execution_view
from flowsteer_mcp.server.arguments import ActText, AnswerText
from flowsteer_mcp.server.results import RunResult, WorkflowStep
from flowsteer_mcp.server.toolkit import kit_of
from flowsteer_mcp.server.tools.common import WorkflowId, step_of


async def act(
    workflow_id: WorkflowId,
    text: Annotated[
        ActText, Field(description="one Flow-Director turn in the tag dialect, or a prompt text when asked")
    ],
    ctx: Context,
) -> WorkflowStep:
    """Apply one Flow-Director turn (e.g. <action>add</action><operator>Plan</operator>); costs one round."""
    async with kit_of(ctx).working(workflow_id, ctx, "act") as (canvas, progress):
        return step_of(workflow_id, await canvas.act(text, progress))


async def run_workflow(workflow_id: WorkflowId, ctx: Context) -> RunResult:
    """Execute the workflow now (progress notifications per node); no round is used."""
    async with kit_of(ctx).working(workflow_id, ctx, "run_workflow") as (canvas, progress):
        report = await canvas.run(progress)
    view = execution_view(report, fresh=True)
    assert view is not None
    return RunResult(workflow_id=workflow_id, execution=view, trace=report.trace)


async def finish(
    workflow_id: WorkflowId,
    ctx: Context,
    answer: Annotated[
        AnswerText | None,
        Field(description="optional claimed answer (recorded; the executed output is the answer)"),
    ] = None,
) -> WorkflowStep:
    """Ask to finish: the finish gate accepts or names the unmet constraint (a rejection costs a round)."""
    async with kit_of(ctx).working(workflow_id, ctx, "finish") as (canvas, progress):
        return step_of(workflow_id, await canvas.finish(answer, progress))
