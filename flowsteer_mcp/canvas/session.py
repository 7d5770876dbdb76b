"""A canvas session: one workflow being built for one task, with rounds, prompt turns and the finish gate.

`CanvasState` is plain data (persisted by the stores); `Canvas` applies steps to it. Every step either
completes or leaves the state exactly as it was: an invalid edit raises CanvasError before any change, and an
unexpected failure or a cancellation restores the snapshot taken at the start of the step. An invalid `act`
turn is a normal result (ok=false) that costs its round and changes nothing else.

A valid edit stands whatever its execution does. Running the workflow is a report about the edited graph, not
part of the edit's validity: when the executor fails, or even raises (CanvasError included), the step still
reports ok=true with the edit applied and `execution.status == "failed"` with the error. This holds alike for
act, typed edits, the turn that completes a prompt request, finish and run; so `ok` always tells whether the
edit (or finish) took effect, and the DSL never shows an edit that a step reported as failed.

What gets scored: the output of the last run when it produced an answer (`ExecutionReport.ok`: status "ok",
or "degraded" when the last stage failed but an earlier stage left a valid solution). Finish accepts a
degraded run's answer like any other and records it as `EpisodeEnd.final_answer`.

Every piece of user text is bounded and must be valid Unicode (stores write UTF-8); messages echo user input
only as a short excerpt and are clipped before they are stored in the history and the last feedback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

import structlog
from pydantic import BaseModel, Field

from flowsteer_mcp.canvas.actions import (
    AddStage,
    EditAction,
    Finish,
    ModifyNode,
    apply_edit,
    resolve_node_id,
)
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint, blueprint_of, slot_prompts, slots, stage_id, with_prompts
from flowsteer_mcp.canvas.dialect import (
    ActionTurn,
    CancelTurn,
    PromptTurn,
    parse_action_turn,
    parse_prompt_turn,
)
from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.execution import ExecutionReport, NoExecutor, ProgressCallback, WorkflowExecutor
from flowsteer_mcp.canvas.feedback import render_feedback
from flowsteer_mcp.canvas.finish import finish_violations, output_violations, structural_violations
from flowsteer_mcp.canvas.hints import Hint, advise
from flowsteer_mcp.canvas.model import OperatorNode, Stage, WorkflowGraph, children
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.stats import GraphStats, graph_stats
from flowsteer_mcp.canvas.step import (
    CanvasStatus,
    ExecutionView,
    NodeView,
    PromptRequest,
    StateView,
    StepResult,
)
from flowsteer_mcp.canvas.text import clip, require_unicode
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import OperatorRegistry

log = structlog.get_logger(__name__)
HISTORY_TEXT_CHARS = 2000
MESSAGE_CHARS = 2000  # a step message (stored in the history and the last feedback every round)
EXECUTOR_ERROR_CHARS = 2000
T = TypeVar("T")


class PendingEdit(BaseModel):
    """An add/modify waiting for prompt turns; applied atomically once every prompt has arrived."""

    action: AddStage | ModifyNode
    node_ids: list[str]
    slots: list[str]
    operators: list[str]
    prompts: list[str | None]

    @property
    def next_slot(self) -> int:
        return next(i for i, p in enumerate(self.prompts) if p is None)


class HistoryEntry(BaseModel):
    round: int
    source: Literal["act", "tool"]
    input: str
    ok: bool
    message: str
    dsl: str


class EpisodeEnd(BaseModel):
    reason: Literal["finished", "budget_exhausted"]
    round: int
    final_answer: str | None = None  # the executed output of an ok or degraded run; this is what gets scored
    final_code: str | None = None
    claimed_answer: str | None = None  # the `<answer>` a policy wrote with finish: recorded, never scored


class CanvasState(BaseModel):
    task: TaskSpec
    options: CanvasOptions = Field(default_factory=CanvasOptions)
    graph: WorkflowGraph = Field(default_factory=WorkflowGraph)
    status: CanvasStatus = "building"
    rounds_used: int = 0
    pending: PendingEdit | None = None
    last_execution: ExecutionReport | None = None
    last_feedback: str = ""
    history: list[HistoryEntry] = Field(default_factory=list)
    end: EpisodeEnd | None = None


class Canvas:
    def __init__(
        self,
        state: CanvasState,
        registry: OperatorRegistry,
        executor: WorkflowExecutor | None = None,
    ) -> None:
        self.state = state
        self.registry = registry
        self.executor: WorkflowExecutor = executor or NoExecutor()
        self.rules = CanvasRules(registry, state.options)
        self._ran_this_step = False
        self._step_start: CanvasState | None = None  # the state before the step in progress
        self._progress: ProgressCallback | None = None  # the step in progress's, for a run the budget's end starts

    # ----- views -------------------------------------------------------------------------------------
    def stats(self) -> GraphStats:
        return graph_stats(self.state.graph, self.registry)

    def prompt_request(self) -> PromptRequest | None:
        pending = self.state.pending
        if pending is None:
            return None
        i = pending.next_slot
        return PromptRequest(
            node_id=pending.node_ids[i],
            operator=pending.operators[i],
            slot=pending.slots[i],
            index=i + 1,
            total=len(pending.prompts),
            edit="add" if isinstance(pending.action, AddStage) else "modify",
        )

    def view(self) -> StateView:
        nodes: list[NodeView] = []
        for stage in self.state.graph.stages:
            if isinstance(stage, OperatorNode):
                nodes.append(NodeView(id=stage.id, kind="operator", operator=stage.operator, prompt=stage.prompt))
                continue
            nodes.append(NodeView(id=stage.id, kind=stage.kind, count=getattr(stage, "count", None)))
            for slot, child in zip(slots_of_stage(stage), children(stage), strict=True):
                nodes.append(
                    NodeView(
                        id=child.id,
                        kind="operator",
                        operator=child.operator,
                        parent=stage.id,
                        slot=slot,
                        prompt=child.prompt,
                    )
                )
        return StateView(
            dsl=render(self.state.graph),
            nodes=nodes,
            stats=self.stats(),
            round=self.state.rounds_used,
            max_rounds=self.state.options.max_rounds,
            status=self.state.status,
            awaiting_prompt_for=self.prompt_request(),
        )

    def hint(self) -> Hint | None:
        if not self.state.options.hints:
            return None
        stats = self.stats()
        output = self.state.last_execution.output if self.state.last_execution else None
        policy = self.state.options.finish_policy()
        violations = finish_violations(policy, stats, self.state.task, output, registry=self.registry)
        return advise(
            self.state.graph,
            stats,
            self.state.task,
            violations,
            self.state.last_execution,
            policy,
            registry=self.registry,
        )

    def feedback(self, message: str) -> str:
        """Feedback text for the current state without taking a step (e.g. right after creation)."""
        return render_feedback(
            ok=True,
            message=message,
            state=self.view(),
            execution=self.state.last_execution,
            hint=None if self.done else self.hint(),
        )

    @property
    def done(self) -> bool:
        return self.state.status in ("finished", "exhausted")

    # ----- steps -------------------------------------------------------------------------------------
    async def act(self, text: str, progress: ProgressCallback | None = None) -> StepResult:
        """One Flow-Director turn in the text dialect. Always costs a round; an invalid turn is a normal result."""
        self._require_open()
        if len(text) > self.state.options.limits.max_act_chars:
            raise CanvasError(
                ErrorCode.LIMIT_EXCEEDED,
                f"The turn is {len(text)} characters; the limit is {self.state.options.limits.max_act_chars}.",
            )
        require_unicode(text, "The turn")
        return await self._transaction(lambda: self._act(text, progress), progress)

    async def edit(self, action: EditAction, progress: ProgressCallback | None = None) -> StepResult:
        """A typed edit (assistant tools). Invalid -> CanvasError and nothing changes; valid -> costs a round."""
        self._require_open()
        self._require_no_pending()
        outcome = apply_edit(self.state.graph, action, self.rules)  # validate before touching anything
        return await self._transaction(
            lambda: self._commit_edit(outcome.graph, outcome.message, "tool", _describe_action(action), progress),
            progress,
        )

    async def finish(self, answer: str | None = None, progress: ProgressCallback | None = None) -> StepResult:
        self._require_open()
        self._require_no_pending()
        claimed = self.rules.answer(answer)
        return await self._transaction(lambda: self._finish("tool", claimed, progress), progress)

    async def run(self, progress: ProgressCallback | None = None) -> ExecutionReport:
        """Execute the current workflow now (no round is used)."""
        return await self._transaction(lambda: self._execute(progress), progress)

    # ----- internals ---------------------------------------------------------------------------------
    def _require_open(self) -> None:
        if self.done:
            end = self.state.end
            raise CanvasError(
                ErrorCode.EPISODE_OVER,
                f"This workflow's episode is over ({end.reason if end else self.state.status}); "
                "read it with get_workflow or start a new one with create_workflow.",
            )

    def _require_no_pending(self) -> None:
        request = self.prompt_request()
        if request is not None:
            raise CanvasError(
                ErrorCode.WRONG_STATE,
                f"A prompt turn is pending for {request.node_id} ({request.operator}): send the prompt with act, "
                "or cancel it with act('<action>cancel</action>') first.",
            )

    async def _transaction(self, step: Callable[[], Awaitable[T]], progress: ProgressCallback | None) -> T:
        snapshot = self._step_start = self.state.model_copy(deep=True)
        self._ran_this_step = False
        self._progress = progress
        try:
            return await step()
        except BaseException:
            self.state = snapshot
            raise
        finally:
            self._step_start = None
            self._progress = None

    def _undo_turn(self) -> None:
        """Back to the state before this step (an invalid turn changes nothing but its round count)."""
        assert self._step_start is not None
        self.state = self._step_start.model_copy(deep=True)
        self._ran_this_step = False

    async def _act(self, text: str, progress: ProgressCallback | None) -> StepResult:
        self.state.rounds_used += 1
        try:
            if self.state.pending is not None:
                return await self._prompt_turn(text, progress)
            turn = parse_action_turn(text, self.rules, lenient=self.state.options.lenient)
            if isinstance(turn, CancelTurn):
                raise CanvasError(ErrorCode.WRONG_STATE, "Nothing to cancel: no prompt turn is pending.")
            assert isinstance(turn, ActionTurn)
            action = turn.action
            if isinstance(action, Finish):
                answer = self.rules.answer(action.answer)
                return await self._finish("act", answer, progress, text=text, lenient=turn.lenient)
            return await self._start_edit(action, text, progress, lenient=turn.lenient)
        except CanvasError as error:
            self._undo_turn()
            self.state.rounds_used += 1
            return await self._failed(error, "act", text)

    async def _start_edit(
        self, action: EditAction, text: str, progress: ProgressCallback | None, *, lenient: bool
    ) -> StepResult:
        outcome = apply_edit(self.state.graph, action, self.rules)  # validates names, targets, structure
        missing = self._prompt_slots(action)
        if not missing:
            return await self._commit_edit(outcome.graph, outcome.message, "act", text, progress, lenient=lenient)
        assert isinstance(action, AddStage | ModifyNode)
        self.state.pending = missing
        self.state.status = "awaiting_prompt"
        request = self.prompt_request()
        assert request is not None
        message = (
            f"{_pending_message(missing.action)} Write the prompt for {request.node_id} ({request.operator}) next."
        )
        return await self._result(True, message, "act", text, status_label="Pending - awaiting prompt", lenient=lenient)

    def _prompt_slots(self, action: EditAction) -> PendingEdit | None:
        """The prompt turns this edit needs (None when prompts are inline or prompt turns are off)."""
        if not self.state.options.prompt_turns:
            return None
        if isinstance(action, ModifyNode):
            if action.prompt is not None:
                return None
            node_id = resolve_node_id(self.state.graph, action.node_id)  # canonical: no padding, no alias
            operator = self.rules.operator(action.operator)
            return PendingEdit(
                action=action.model_copy(update={"node_id": node_id, "operator": operator}),
                node_ids=[node_id],
                slots=["modify"],
                operators=[operator],
                prompts=[None],
            )
        if not isinstance(action, AddStage):
            return None
        blueprint = self.rules.blueprint(action.stage, self.state.graph)
        prompts = slot_prompts(blueprint)
        if all(p is not None for p in prompts):
            return None
        base = stage_id(self.state.graph.next_index)
        stage_slots = slots(blueprint)
        return PendingEdit(
            action=action.model_copy(update={"stage": blueprint}),
            node_ids=[base + s.suffix for s in stage_slots],
            slots=[s.role for s in stage_slots],
            operators=[s.operator for s in stage_slots],
            prompts=prompts,
        )

    async def _prompt_turn(self, text: str, progress: ProgressCallback | None) -> StepResult:
        pending = self.state.pending
        assert pending is not None
        turn = parse_prompt_turn(text)
        if isinstance(turn, CancelTurn):
            self.state.pending = None
            self.state.status = "building"
            return await self._result(True, "Pending edit cancelled; nothing was changed.", "act", text)
        assert isinstance(turn, PromptTurn)
        index = pending.next_slot
        prompts = list(pending.prompts)
        prompts[index] = self.rules.prompt(turn.text)
        if any(p is None for p in prompts):
            pending.prompts = prompts
            request = self.prompt_request()
            assert request is not None
            message = f"Prompt recorded for {pending.node_ids[index]}. Write the prompt for {request.node_id} ({request.operator}) next."
            return await self._result(True, message, "act", text, status_label="Pending - awaiting prompt")
        action = pending.action
        complete: EditAction
        if isinstance(action, AddStage):
            complete = action.model_copy(update={"stage": with_prompts(action.stage, prompts)})
        else:
            complete = action.model_copy(update={"prompt": prompts[0]})
        outcome = apply_edit(self.state.graph, complete, self.rules)  # validate before changing anything
        self.state.pending = None
        self.state.status = "building"
        return await self._commit_edit(outcome.graph, outcome.message, "act", text, progress)

    async def _commit_edit(
        self,
        graph: WorkflowGraph,
        message: str,
        source: Literal["act", "tool"],
        text: str,
        progress: ProgressCallback | None,
        *,
        lenient: bool = False,
    ) -> StepResult:
        if source == "tool":
            self.state.rounds_used += 1
        self.state.graph = graph
        self.state.last_execution = None
        if self.state.options.execute_each_step:
            await self._execute(progress)
        return await self._result(True, message, source, text, lenient=lenient)

    async def _execute(self, progress: ProgressCallback | None) -> ExecutionReport:
        if self.state.graph.is_empty:
            report = ExecutionReport(status="empty")
        else:
            try:
                report = await self.executor.run(self.state.graph, self.state.task, progress=progress)
            except CanvasError as error:  # the executor refused this graph: a failed run, the edit still stands
                log.warning("executor_rejected_workflow", code=error.code.value)
                report = ExecutionReport(
                    status="failed",
                    error=clip(f"executor rejected the workflow: {error.message}", EXECUTOR_ERROR_CHARS),
                )
            except Exception as error:  # an executor bug must not take the canvas down
                log.exception("executor_crashed")
                report = ExecutionReport(
                    status="failed",
                    error=clip(f"executor error: {type(error).__name__}: {error}", EXECUTOR_ERROR_CHARS),
                )
        self.state.last_execution = report
        self._ran_this_step = True
        return report

    async def _finish(
        self,
        source: Literal["act", "tool"],
        answer: str | None,
        progress: ProgressCallback | None,
        *,
        text: str = "",
        lenient: bool = False,
    ) -> StepResult:
        if source == "tool":
            self.state.rounds_used += 1
        policy, stats, task = self.state.options.finish_policy(), self.stats(), self.state.task
        # The structural verdict needs no run: a workflow that fails it is refused before anything executes.
        violations = structural_violations(policy, stats, task, registry=self.registry)
        if not violations:
            if self.state.last_execution is None and not self.state.graph.is_empty:
                await self._execute(progress)
            report = self.state.last_execution
            violations = output_violations(policy, stats, task, report.output if report else None)
        report = self.state.last_execution
        label = text or ("finish" + (f" answer={answer!r}" if answer else ""))
        if violations:
            message = "Finish rejected: " + " ".join(v.message for v in violations)
            error = CanvasError(ErrorCode.WRONG_STATE, message)
            return await self._failed(error, source, label, code="finish_rejected", lenient=lenient)
        self.state.status = "finished"
        self.state.end = EpisodeEnd(
            reason="finished",
            round=self.state.rounds_used,
            final_answer=report.output if report and report.ok else None,
            final_code=report.code if report and report.ok else None,
            claimed_answer=answer,
        )
        return await self._result(True, "Workflow finished.", source, label, status_label="Finished", lenient=lenient)

    async def _failed(
        self,
        error: CanvasError,
        source: Literal["act", "tool"],
        text: str,
        *,
        code: str | None = None,
        lenient: bool = False,
    ) -> StepResult:
        return await self._result(
            False, error.message, source, text, error_code=code or error.code.value, lenient=lenient
        )

    async def _result(
        self,
        ok: bool,
        message: str,
        source: Literal["act", "tool"],
        text: str,
        *,
        status_label: str | None = None,
        error_code: str | None = None,
        lenient: bool = False,
    ) -> StepResult:
        await self._close_if_budget_spent()
        message = clip(message, MESSAGE_CHARS)
        state = self.state
        if state.status == "exhausted":
            status_label = "Budget exhausted"
            message += f" Round budget of {state.options.max_rounds} exhausted: the episode is over."
        view = self.view()
        report = state.last_execution
        feedback = render_feedback(
            ok=ok,
            message=message,
            state=view,
            execution=report,
            hint=None if self.done else self.hint(),
            status_label=status_label,
            lenient=lenient,
        )
        state.last_feedback = feedback
        state.history.append(
            HistoryEntry(
                round=state.rounds_used,
                source=source,
                input=text[:HISTORY_TEXT_CHARS],
                ok=ok,
                message=message,
                dsl=view.dsl,
            )
        )
        end = state.end
        return StepResult(
            ok=ok,
            message=message,
            feedback=feedback,
            state=view,
            execution=execution_view(report, fresh=self._ran_this_step),
            done=self.done,
            error_code=error_code,
            end_reason=end.reason if end else None,
            final_answer=end.final_answer if end else None,
        )

    async def _close_if_budget_spent(self) -> None:
        """End the episode on its last round with the built workflow's result.

        A pending edit is dropped. Without per-step execution the workflow has not run yet: it runs once here,
        so an episode scores what it built whether or not `execute_each_step` was on.
        """
        state = self.state
        if state.status in ("building", "awaiting_prompt") and state.rounds_used >= state.options.max_rounds:
            state.status = "exhausted"
            state.pending = None
            if state.last_execution is None and not state.graph.is_empty:
                await self._execute(self._progress)
            report = state.last_execution
            state.end = EpisodeEnd(
                reason="budget_exhausted",
                round=state.rounds_used,
                final_answer=report.output if report and report.ok else None,
                final_code=report.code if report and report.ok else None,
            )


def execution_view(report: ExecutionReport | None, *, fresh: bool = False) -> ExecutionView | None:
    if report is None:
        return None
    return ExecutionView(
        fresh=fresh,
        status=report.status,
        ok=report.ok,
        output=report.output,
        error=report.error,
        llm_calls=report.llm_calls,
        tokens=report.tokens,
        duration_s=report.duration_s,
        cache_hits=report.cache_hits,
        evidence=report.evidence,
    )


def slots_of_stage(stage: Stage) -> list[str]:
    return [s.role for s in slots(blueprint_of(stage))]


def _pending_message(action: AddStage | ModifyNode) -> str:
    if isinstance(action, ModifyNode):
        return f"Modify of {action.node_id} to {action.operator} accepted; it is applied once its new prompt arrives."
    stage = action.stage
    what = stage.operator if isinstance(stage, OperatorBlueprint) else f"{stage.kind} structure"
    return f"Add of {what} accepted; it is applied once its prompts arrive."


def _describe_action(action: EditAction) -> str:
    return action.model_dump_json(exclude_none=True)


__all__ = ["Canvas", "CanvasState", "EpisodeEnd", "HistoryEntry", "PendingEdit"]
