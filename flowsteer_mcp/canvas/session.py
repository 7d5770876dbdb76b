"""A canvas session: one workflow being built for one task, with rounds, prompt turns and the finish gate.

`CanvasState` (`state.py`) is plain data persisted by the stores; `Canvas` takes steps on it and does nothing
else: each step is a fixed sequence of functions that live elsewhere, one module per step.

    act:  guards -> parse (turn.py) -> validate and apply on a copy (change.py) -> commit (commit.py)
          -> execute (execution.py) -> feedback (reply.py)
    typed tools: the same path without parse; finish runs its gate (finish.py) before it commits.

Every step either completes or leaves the state exactly as it was: an invalid edit raises CanvasError before any
change (only commit writes, and only a validated change reaches it), and an unexpected failure or a
cancellation restores the snapshot taken at the start of the step. An invalid `act` turn is a normal result
(ok=false) that costs its round and changes nothing else.

A valid edit stands whatever its execution does. Running the workflow is a report about the edited graph, not
part of the edit's validity: when the runner fails, or even raises (CanvasError included), the step still
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
from typing import TypeVar

from flowsteer_mcp.canvas.actions import EditAction
from flowsteer_mcp.canvas.change import Apply, Change, EndRequest, plan_edit, plan_turn
from flowsteer_mcp.canvas.commit import budget_spent, commit, end_episode
from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.execution import ExecutionReport, NoRunner, ProgressCallback, WorkflowRunner, execute
from flowsteer_mcp.canvas.feedback import render_feedback
from flowsteer_mcp.canvas.finish import finish_gate
from flowsteer_mcp.canvas.guards import require_no_pending, require_open, require_readable_turn
from flowsteer_mcp.canvas.hints import Hint
from flowsteer_mcp.canvas.reply import Outcome, reply
from flowsteer_mcp.canvas.state import CanvasState, EpisodeEnd, HistoryEntry, PendingEdit, StepSource
from flowsteer_mcp.canvas.stats import GraphStats, graph_stats
from flowsteer_mcp.canvas.step import PromptRequest, StateView, StepResult, execution_view
from flowsteer_mcp.canvas.turn import is_lenient, parse_turn
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.canvas.views import next_hint, state_view
from operators.registry import OperatorRegistry

T = TypeVar("T")


class Canvas:
    def __init__(
        self,
        state: CanvasState,
        registry: OperatorRegistry,
        runner: WorkflowRunner | None = None,
    ) -> None:
        self.state = state
        self.registry = registry
        self.runner: WorkflowRunner = runner or NoRunner()
        self.rules = CanvasRules(registry, state.options)
        self._ran_this_step = False
        self._progress: ProgressCallback | None = None  # the step in progress's, for every run that step makes

    # ----- views -------------------------------------------------------------------------------------
    def stats(self) -> GraphStats:
        return graph_stats(self.state.graph, self.registry)

    def prompt_request(self) -> PromptRequest | None:
        pending = self.state.pending
        return pending.request() if pending is not None else None

    def view(self) -> StateView:
        return state_view(self.state, self.registry)

    def hint(self) -> Hint | None:
        return next_hint(self.state, self.registry)

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
        return self.state.done

    # ----- steps -------------------------------------------------------------------------------------
    async def act(self, text: str, progress: ProgressCallback | None = None) -> StepResult:
        """One Flow-Director turn in the text dialect. Always costs a round; an invalid turn is a normal result."""
        require_open(self.state)
        require_readable_turn(self.state, text)
        return await self._transaction(lambda: self._turn(text), progress)

    async def edit(self, action: EditAction, progress: ProgressCallback | None = None) -> StepResult:
        """A typed edit (assistant tools). Invalid -> CanvasError and nothing changes; valid -> costs a round."""
        require_open(self.state)
        require_no_pending(self.state)
        change = plan_edit(self.state.graph, action, self.rules)  # validate on a copy before spending anything
        return await self._transaction(
            lambda: self._tool_step(change, action.model_dump_json(exclude_none=True)), progress
        )

    async def finish(self, answer: str | None = None, progress: ProgressCallback | None = None) -> StepResult:
        """Ask to end the episode (typed tool). An answer that is not storable raises; a refusal costs a round."""
        require_open(self.state)
        require_no_pending(self.state)
        change = EndRequest(self.rules.answer(answer))
        label = "finish" + (f" answer={change.answer!r}" if change.answer else "")
        return await self._transaction(lambda: self._tool_step(change, label), progress)

    async def run(self, progress: ProgressCallback | None = None) -> ExecutionReport:
        """Execute the current workflow now (no round is used)."""
        return await self._transaction(self._execute, progress)

    # ----- the sequence of a step ----------------------------------------------------------------------
    async def _transaction(self, step: Callable[[], Awaitable[T]], progress: ProgressCallback | None) -> T:
        """Run one step all or nothing: whatever escapes it (a bug, a cancellation) restores the state it found."""
        snapshot = self.state.model_copy(deep=True)
        self._ran_this_step = False
        self._progress = progress
        try:
            return await step()
        except BaseException:
            self.state = snapshot
            raise
        finally:
            self._progress = None

    async def _turn(self, text: str) -> StepResult:
        """An `act` turn: the round is spent first, so a turn that parses or validates to nothing still costs it."""
        self.state.rounds_used += 1
        try:
            turn = parse_turn(text, self.state, self.rules)
            change = plan_turn(turn, self.state, self.rules)
        except CanvasError as error:  # nothing was written: the turn is answered as rejected
            return await self._reply(Outcome.rejected(error), "act", text)
        return await self._carry_out(change, "act", text, lenient=is_lenient(turn))

    async def _tool_step(self, change: Change, text: str) -> StepResult:
        """A typed tool's change, validated before the step began: it spends its round now."""
        self.state.rounds_used += 1
        return await self._carry_out(change, "tool", text)

    async def _carry_out(self, change: Change, source: StepSource, text: str, *, lenient: bool = False) -> StepResult:
        """Commit, execute (an applied edit only) and answer; finish goes through its gate first."""
        if isinstance(change, EndRequest):
            return await self._finish(change.answer, source, text, lenient=lenient)
        commit(self.state, change)
        if isinstance(change, Apply) and self.state.options.execute_each_step:
            await self._execute()
        return await self._reply(Outcome(True, change.message, change.status_label, lenient=lenient), source, text)

    async def _finish(self, answer: str | None, source: StepSource, text: str, *, lenient: bool) -> StepResult:
        """Finish validates through its gate, whose output rule needs the run: so here execute comes before commit."""
        state = self.state
        policy = state.options.finish_policy()
        violations = await finish_gate(
            policy, self.stats(), state.task, registry=self.registry, output=self._output_for_gate
        )
        if violations:
            message = "Finish rejected: " + " ".join(v.message for v in violations)
            return await self._reply(
                Outcome(False, message, error_code="finish_rejected", lenient=lenient), source, text
            )
        end_episode(state, "finished", claimed_answer=answer)
        return await self._reply(Outcome(True, "Workflow finished.", "Finished", lenient=lenient), source, text)

    async def _output_for_gate(self) -> str | None:
        await self._execute_if_stale()
        report = self.state.last_execution
        return report.output if report else None

    async def _execute_if_stale(self) -> None:
        """Run the workflow when it has not run since its last edit (and has something to run)."""
        if self.state.last_execution is None and not self.state.graph.is_empty:
            await self._execute()

    async def _execute(self) -> ExecutionReport:
        report = await execute(self.runner, self.state.graph, self.state.task, self._progress)
        self.state.last_execution = report
        self._ran_this_step = True
        return report

    async def _reply(self, outcome: Outcome, source: StepSource, text: str) -> StepResult:
        """Answer the step; on its last round the episode first ends with the built workflow's result.

        Without per-step execution that workflow has not run yet: it runs once here, so an episode scores what
        it built whether or not `execute_each_step` was on. A pending edit is dropped."""
        if budget_spent(self.state):
            await self._execute_if_stale()
            end_episode(self.state, "budget_exhausted")
        return reply(self.state, self.registry, outcome, source=source, text=text, fresh=self._ran_this_step)


__all__ = ["Canvas", "CanvasState", "EpisodeEnd", "HistoryEntry", "PendingEdit", "execution_view"]
