"""Step 2 of a turn: validate what it asks for and work out the change, on copies, touching nothing.

Every function here reads the state and returns a `Change` or raises CanvasError; none writes to the state.
That is how a rejected turn or tool call leaves the graph, the pending edit, the history and the counters
exactly as they were: only `commit.py` writes, and only a change that got this far reaches it.

A change says what the step will do once committed: `Apply` a new graph (then the workflow runs), `Hold` an
add or modify until its prompt turns arrive, `Cancel` the pending edit, or `EndRequest` (finish, which the gate
in `finish.py` still has to accept). The typed tools enter here through `plan_edit` (they skip parsing).
"""

from __future__ import annotations

from dataclasses import dataclass

from flowsteer_mcp.canvas.actions import (
    AddStage,
    CanvasAction,
    EditAction,
    Finish,
    ModifyNode,
    apply_edit,
    resolve_node_id,
)
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint, slot_prompts, slots, stage_id, with_prompts
from flowsteer_mcp.canvas.dialect import ActionTurn, CancelTurn, ParsedTurn, PromptTurn
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.state import CanvasState, PendingEdit
from flowsteer_mcp.canvas.validate import CanvasRules

AWAITING_PROMPT = "Pending - awaiting prompt"  # the feedback's status line while an edit waits for prompts


@dataclass(frozen=True)
class Apply:
    """A complete, validated edit: `graph` replaces the workflow's graph (and leaves no prompt turn pending)."""

    graph: WorkflowGraph
    message: str
    status_label: str | None = None


@dataclass(frozen=True)
class Hold:
    """An accepted add or modify that waits for prompt turns; `pending` replaces the pending edit."""

    pending: PendingEdit
    message: str
    status_label: str | None = AWAITING_PROMPT


@dataclass(frozen=True)
class Cancel:
    """The pending edit is dropped; the graph stays as it was."""

    message: str = "Pending edit cancelled; nothing was changed."
    status_label: str | None = None


@dataclass(frozen=True)
class EndRequest:
    """Finish, with the claimed answer already validated; the finish gate decides whether the episode ends."""

    answer: str | None


Change = Apply | Hold | Cancel | EndRequest
GraphChange = Apply | Hold | Cancel  # the changes `commit` writes as they are


def plan_turn(turn: ParsedTurn, state: CanvasState, rules: CanvasRules) -> Change:
    """The change a parsed `act` turn asks for (see `turn.parse_turn`); CanvasError when it is invalid."""
    if isinstance(turn, CancelTurn):
        return Cancel()
    if isinstance(turn, PromptTurn):
        assert state.pending is not None  # parse_turn reads prompts only while an edit is pending
        return plan_prompt(state.pending, turn.text, state.graph, rules)
    assert isinstance(turn, ActionTurn)
    return plan_action(turn.action, state, rules)


def plan_action(action: CanvasAction, state: CanvasState, rules: CanvasRules) -> Change:
    """A dialect action: finish, an edit applied now, or one held for its prompt turns."""
    if isinstance(action, Finish):
        return EndRequest(rules.answer(action.answer))
    applied = plan_edit(state.graph, action, rules)  # validates names, targets, structure
    pending = prompt_slots(action, state, rules)
    if pending is None:
        return applied
    request = pending.request()
    message = f"{_pending_message(pending.action)} Write the prompt for {request.node_id} ({request.operator}) next."
    return Hold(pending, message)


def plan_edit(graph: WorkflowGraph, action: EditAction, rules: CanvasRules) -> Apply:
    """A typed edit applied to a copy of `graph` (`actions.apply_edit`); CanvasError when it is invalid."""
    outcome = apply_edit(graph, action, rules)
    return Apply(outcome.graph, outcome.message)


def plan_prompt(pending: PendingEdit, text: str, graph: WorkflowGraph, rules: CanvasRules) -> Apply | Hold:
    """One prompt turn: recorded while others are missing, else the completed edit applied to a copy."""
    index = pending.next_slot
    prompts = list(pending.prompts)
    prompts[index] = rules.prompt(text)
    if any(p is None for p in prompts):
        held = pending.model_copy(update={"prompts": prompts})
        request = held.request()
        message = (
            f"Prompt recorded for {pending.node_ids[index]}. "
            f"Write the prompt for {request.node_id} ({request.operator}) next."
        )
        return Hold(held, message)
    action = pending.action
    complete: EditAction
    if isinstance(action, AddStage):
        complete = action.model_copy(update={"stage": with_prompts(action.stage, prompts)})
    else:
        complete = action.model_copy(update={"prompt": prompts[0]})
    return plan_edit(graph, complete, rules)  # validated again: the graph is the one the prompts were written for


def prompt_slots(action: EditAction, state: CanvasState, rules: CanvasRules) -> PendingEdit | None:
    """The prompt turns this (already validated) edit needs; None when prompts are inline or prompt turns are off."""
    if not state.options.prompt_turns:
        return None
    graph = state.graph
    if isinstance(action, ModifyNode):
        if action.prompt is not None:
            return None
        node_id = resolve_node_id(graph, action.node_id)  # canonical: no padding, no alias
        operator = rules.operator(action.operator)
        return PendingEdit(
            action=action.model_copy(update={"node_id": node_id, "operator": operator}),
            node_ids=[node_id],
            slots=["modify"],
            operators=[operator],
            prompts=[None],
        )
    if not isinstance(action, AddStage):
        return None
    blueprint = rules.blueprint(action.stage, graph)
    prompts = slot_prompts(blueprint)
    if all(p is not None for p in prompts):
        return None
    base = stage_id(graph.next_index)
    stage_slots = slots(blueprint)
    return PendingEdit(
        action=action.model_copy(update={"stage": blueprint}),
        node_ids=[base + s.suffix for s in stage_slots],
        slots=[s.role for s in stage_slots],
        operators=[s.operator for s in stage_slots],
        prompts=prompts,
    )


def _pending_message(action: AddStage | ModifyNode) -> str:
    if isinstance(action, ModifyNode):
        return f"Modify of {action.node_id} to {action.operator} accepted; it is applied once its new prompt arrives."
    stage = action.stage
    what = stage.operator if isinstance(stage, OperatorBlueprint) else f"{stage.kind} structure"
    return f"Add of {what} accepted; it is applied once its prompts arrive."


__all__ = [
    "AWAITING_PROMPT",
    "Apply",
    "Cancel",
    "Change",
    "EndRequest",
    "GraphChange",
    "Hold",
    "plan_action",
    "plan_edit",
    "plan_prompt",
    "plan_turn",
]
