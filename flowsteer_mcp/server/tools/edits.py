"""The typed edits of a workflow's operators: `add_operator`, and of one node: `delete_node`, `modify_node`,
`set_prompt`. Each is one round, and the workflow runs after it when its options say so. (`add_structure`,
whose schema depends on the registered stage kinds, is in structures.py.)"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import Field

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, EditAction, ModifyNode, SetPrompt
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint
from flowsteer_mcp.server.arguments import PromptText
from flowsteer_mcp.server.results import WorkflowStep
from flowsteer_mcp.server.toolkit import kit_of
from flowsteer_mcp.server.tools.common import NodeId, OperatorName, WorkflowId, step_of
from operators.stopping import StopRuleName

UNTIL = (
    "with samples > 1, stop drawing early: 'tests' when the greedy program passes the public tests, 'passes' after "
    "the first wave (1, 3, the rest) holding a program that passes them, 'redraw' as 'passes' without re-asking a "
    "greedy program that fails to load, 'vote' when the answers' vote is decisive"
)


async def edited(ctx: Context, workflow_id: str, phase: str, action: EditAction) -> WorkflowStep:
    """Apply one typed edit to the workflow (a round; the run after it reports progress)."""
    async with kit_of(ctx).working(workflow_id, ctx, phase) as (canvas, progress):
        return step_of(workflow_id, await canvas.edit(action, progress))


async def add_operator(
    workflow_id: WorkflowId,
    operator: OperatorName,
    ctx: Context,
    prompt: Annotated[PromptText | None, Field(description="custom instruction for this node")] = None,
    position: Annotated[int | None, Field(description="0-based stage index; default appends")] = None,
    samples: Annotated[
        int, Field(description="draws (1-16): the first greedy, the rest sampled; candidates for the next stage")
    ] = 1,
    until: Annotated[StopRuleName | None, Field(description=UNTIL)] = None,
) -> WorkflowStep:
    """Add one operator stage (appended, or inserted at `position`)."""
    blueprint = OperatorBlueprint(operator=operator, prompt=prompt, samples=samples, until=until)
    return await edited(ctx, workflow_id, "add_operator", AddStage(stage=blueprint, position=position))


async def delete_node(
    workflow_id: WorkflowId,
    node_id: NodeId,
    ctx: Context,
    with_parent: Annotated[bool, Field(description="deleting a child removes its whole stage")] = False,
) -> WorkflowStep:
    """Delete a stage, or a child node when its structure stays valid."""
    return await edited(ctx, workflow_id, "delete_node", DeleteNode(node_id=node_id, with_parent=with_parent))


async def modify_node(
    workflow_id: WorkflowId,
    node_id: NodeId,
    operator: OperatorName,
    ctx: Context,
    prompt: Annotated[PromptText | None, Field(description="new instruction; omitted = operator default")] = None,
    samples: Annotated[
        int | None, Field(description="draws of this node (1-16, omitted = 1); see add_operator")
    ] = None,
) -> WorkflowStep:
    """Replace the operator of a node (top-level or inside a structure); its id stays the same."""
    action = ModifyNode(node_id=node_id, operator=operator, prompt=prompt, samples=samples)
    return await edited(ctx, workflow_id, "modify_node", action)


async def set_prompt(
    workflow_id: WorkflowId,
    node_id: NodeId,
    prompt: Annotated[PromptText, Field(description="the node's custom instruction")],
    ctx: Context,
) -> WorkflowStep:
    """Set the custom prompt (instruction) of an operator node."""
    return await edited(ctx, workflow_id, "set_prompt", SetPrompt(node_id=node_id, prompt=prompt))
