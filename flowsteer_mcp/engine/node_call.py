"""One operator call: memo lookup, metering, per-call timeout, crash capture and its trace row.

Why one place: every stage kind calls operators the same way, and the guarantees (errors are values, a
crash or timeout never escapes, only completed calls are memoised (failures only under the `charged` scope,
outages never), cancellation always propagates)
must hold for all of them.

Sampling: every call is one *draw* with explicit settings (`DrawSettings`: temperature, top-p, seed).
Draw 0 of a node is greedy (temperature 0, no seed), so sampling never removes the greedy answer; draw
i >= 1 uses the sampling temperature and top-p of `CallSettings` and a seed derived from the workflow seed,
the node id and i (`draw_for`), so samples are distinct from each other and the same on every run. The
draw is part of the memo key. `call_draws` runs several draws of one node concurrently; when the backend
supports `n`, the sampled draws' shared first prompt goes out as one request (`SharedPromptBatch`).
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import anyio
import structlog

from flowsteer_mcp.canvas.execution import RUN_SCOPE, NodeTrace
from flowsteer_mcp.canvas.model import OperatorNode
from flowsteer_mcp.engine.context import CallPosition, RunContext
from flowsteer_mcp.engine.memo import MemoCache, MemoEntry, inputs_digest, memo_key
from flowsteer_mcp.engine.metering import MeteredBackend
from flowsteer_mcp.engine.state import FlowState
from operators.backends.base import GREEDY, ChatBackend, DrawSettings, SupportsCompleteMany
from operators.backends.config import MemoScope
from operators.backends.shared_prompt import BatchMember, SharedPromptBatch
from operators.base import (
    DEFAULT_SANDBOX_TIMEOUT_S,
    Operator,
    OperatorInput,
    OperatorOutput,
    OperatorRuntime,
    OperatorSpec,
    Role,
)
from operators.registry import OperatorRegistry, UnknownOperatorError
from operators.sandbox import SandboxRefusedError

log = structlog.get_logger(__name__)


@dataclass
class NodeResult:
    node: OperatorNode
    spec: OperatorSpec | None  # None when the registry does not know the operator
    output: OperatorOutput
    row: NodeTrace

    @property
    def ok(self) -> bool:
        return self.output.ok

    @property
    def role(self) -> Role | None:
        return self.spec.role if self.spec else None

    def describe_failure(self) -> str:
        return f"{self.node.id} ({self.node.operator}): {self.output.error or 'failed without an error message'}"


DEFAULT_SAMPLE_TEMPERATURE = 0.8
DEFAULT_SAMPLE_TOP_P = 0.95


@dataclass(frozen=True)
class CallSettings:
    call_timeout_s: float | None
    max_reasks: int
    runtime_options: dict[str, Any]
    seed: int = 0  # the workflow seed: sampled draws derive their seeds from it
    sample_temperature: float = DEFAULT_SAMPLE_TEMPERATURE
    sample_top_p: float = DEFAULT_SAMPLE_TOP_P
    sandbox_timeout_s: float = DEFAULT_SANDBOX_TIMEOUT_S  # each sandbox run an operator makes
    sampled_reasks: int | None = None  # re-asks of a sampled draw; None: as many as `max_reasks`
    memo_scope: MemoScope = "workflow"  # which runs share memoised results, and who pays (EngineConfig)

    def reasks_for(self, draw: DrawSettings) -> int:
        """Re-asks allowed after an unusable reply. A sampled draw may get fewer than the greedy one: a broken
        sample is one candidate less, while re-asking it costs a whole exchange with a longer prompt."""
        if draw.greedy or self.sampled_reasks is None:
            return self.max_reasks
        return self.sampled_reasks

    def with_greedy_reasks(self, reasks: int | None) -> CallSettings:
        """These settings with the greedy draw's re-asks capped at `reasks` (None: unchanged). A stopping rule
        asks this when it treats an unusable greedy reply as a failed check (`operators.stopping`)."""
        if reasks is None or reasks >= self.max_reasks:
            return self
        sampled = self.max_reasks if self.sampled_reasks is None else self.sampled_reasks
        return replace(self, max_reasks=reasks, sampled_reasks=sampled)

    def fingerprint(self) -> dict[str, Any]:
        """The settings that can change an operator's result, for the memo key (a longer sandbox limit can
        turn a timed-out program into a passing one)."""
        return {
            "max_reasks": self.max_reasks,
            "sampled_reasks": self.sampled_reasks,
            "options": self.runtime_options,
            "sandbox_s": self.sandbox_timeout_s,
        }


def derived_seed(workflow_seed: int, node_id: str, draw: int) -> int:
    """A 31-bit seed, stable across runs and processes (no `hash()`), distinct per node and draw."""
    blob = f"{workflow_seed}:{node_id}:{draw}".encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") & 0x7FFFFFFF


def draw_for(settings: CallSettings, node_id: str, draw: int) -> DrawSettings:
    """Draw 0 is greedy; draw i >= 1 samples with a seed derived from the workflow seed, node and i."""
    if draw == 0:
        return GREEDY
    return DrawSettings(
        temperature=settings.sample_temperature,
        top_p=settings.sample_top_p,
        seed=derived_seed(settings.seed, node_id, draw),
    )


def describe_draw(draw: DrawSettings, index: int, count: int) -> str:
    where = f"draw {index + 1} of {count}" if count > 1 else "sampled draw"
    if draw.greedy:
        return f"{where}: greedy"
    return f"{where}: temperature {draw.temperature:g}, top_p {draw.top_p:g}, seed {draw.seed}"


class NodeCaller:
    """Calls operator nodes for one run; never raises except for cancellation."""

    def __init__(
        self,
        *,
        registry: OperatorRegistry,
        backend: ChatBackend,
        memo: MemoCache | None,
        settings: CallSettings,
        context: RunContext,
    ) -> None:
        self._registry = registry
        self._backend = backend
        self._memo = memo
        self._settings = settings
        self._ctx = context
        self._backend_key = backend.cache_key()
        # The run's requests share a replica of a multi-endpoint executor: all runs of one workflow where the
        # workbench names it (their prompts share the task and earlier nodes' outputs), else this run alone.
        self._affinity = RUN_SCOPE.get() or f"run-{uuid.uuid4().hex}"

    @property
    def sandbox_timeout_s(self) -> float:
        """The limit of each sandbox run, for checks the engine makes itself (a stopping rule's tests)."""
        return self._settings.sandbox_timeout_s

    def spec_of(self, node: OperatorNode) -> OperatorSpec | None:
        try:
            return self._registry.spec(node.operator)
        except UnknownOperatorError:
            return None

    def draw(self, node_id: str, index: int) -> DrawSettings:
        return draw_for(self._settings, node_id, index)

    async def call_draws(
        self,
        node: OperatorNode,
        state: FlowState,
        draws: Sequence[int],
        *,
        sinks: Sequence[list[NodeTrace]],
        greedy_reasks: int | None = None,
    ) -> list[NodeResult]:
        """Run the draws `draws` (indices, see `draw_for`) of `node` concurrently, one trace sink each.

        Sampled draws share their first prompt in one `n` request when the backend supports it. `greedy_reasks`
        caps the greedy draw's re-asks (`CallSettings.with_greedy_reasks`)."""
        settings = [self.draw(node.id, index) for index in draws]
        sampled = sum(1 for d in settings if not d.greedy)
        batch = (
            SharedPromptBatch(self._backend, sampled)
            if sampled > 1 and isinstance(self._backend, SupportsCompleteMany)
            else None
        )
        results: list[NodeResult | None] = [None] * len(draws)

        async def one(position: int) -> None:
            draw = settings[position]
            member = batch.member() if batch is not None and not draw.greedy else None
            try:
                results[position] = await self.call(
                    node,
                    state,
                    sink=sinks[position],
                    draw=draw,
                    via=member,
                    note=describe_draw(draw, position, len(draws)),
                    position=CallPosition(draw=position, draws=len(draws)),
                    greedy_reasks=greedy_reasks,
                )
            finally:
                if member is not None:
                    member.finished()

        async with anyio.create_task_group() as group:
            for position in range(len(draws)):
                group.start_soon(one, position)
        return [r for r in results if r is not None]

    async def call(
        self,
        node: OperatorNode,
        state: FlowState,
        *,
        sink: list[NodeTrace],
        iteration: int | None = None,
        draw: DrawSettings = GREEDY,
        via: ChatBackend | None = None,
        note: str | None = None,
        position: CallPosition | None = None,
        greedy_reasks: int | None = None,
    ) -> NodeResult:
        """Run `node` on `state`; its trace row is appended to `sink` (also when the call is interrupted).

        `draw` is the call's sampling (part of the memo key); `via` replaces the backend for this call (a
        shared-prompt batch member: same model and results, so the memo key is unchanged); `greedy_reasks`
        caps the re-asks of a greedy draw, not of a sampled one (part of the memo key: fewer re-asks can give
        another result)."""
        settings = self._settings.with_greedy_reasks(greedy_reasks) if draw.greedy else self._settings
        inputs = state.to_input(node.prompt)
        spec = self.spec_of(node)
        keys = self._memo_keys(node, inputs, iteration, draw, settings)
        charged = self._settings.memo_scope == "charged"
        row = NodeTrace(
            node_id=node.id,
            operator=node.operator,
            ok=False,
            iteration=iteration,
            inputs_digest=inputs_digest(inputs),
            note=note,
        )
        position = position or CallPosition(iteration=iteration)
        await self._ctx.node_started(node, position)
        found = await self._cached(keys, wait=charged, via=via)
        if found is not None:
            key, cached = found
            output = cached.output
            await self._reuse(key, cached, row, charged=charged, via=via)
        else:
            async with self._memo.computing(keys[0]) if self._memo is not None else nullcontext():
                output, first = await self._compute(node, spec, inputs, row, sink, draw, via, settings)
                self._remember(keys, output, row, first)
        _record(row, output)
        sink.append(row)
        await self._ctx.node_finished(node, position)
        return NodeResult(node=node, spec=spec, output=output, row=row)

    def _memo_keys(
        self,
        node: OperatorNode,
        inputs: OperatorInput,
        iteration: int | None,
        draw: DrawSettings,
        settings: CallSettings,
    ) -> list[str]:
        """The call's memo key, then, for a greedy draw with capped re-asks, the key of the same draw under the
        engine's re-asks: when that draw's first reply was accepted, the re-asks were never sent, so either is
        the other's result."""

        def key_under(call_settings: CallSettings) -> str:
            return memo_key(
                node_id=node.id,
                operator=node.operator,
                prompt=node.prompt,
                inputs=inputs,
                iteration=iteration,
                backend_key=self._backend_key,
                settings=call_settings.fingerprint(),
                draw=draw,
                scope=RUN_SCOPE.get() if self._settings.memo_scope == "workflow" else None,
            )

        own = key_under(settings)
        return [own] if settings is self._settings else [own, key_under(self._settings)]

    async def _cached(
        self, keys: Sequence[str], *, wait: bool, via: ChatBackend | None
    ) -> tuple[str, MemoEntry] | None:
        """The memoised result under the call's own key, else under an equivalent key (`_memo_keys`) when it was
        accepted at its first reply; with the key it was found under (who pays is recorded per key)."""
        for number, key in enumerate(keys):
            cached = await self._lookup(key, wait=wait, via=via)
            if cached is not None and (number == 0 or _first_reply_accepted(cached)):
                return key, cached
        return None

    def _remember(self, keys: Sequence[str], output: OperatorOutput, row: NodeTrace, first: dict[str, Any]) -> None:
        """Memoise a result under its own key, and under the equivalent keys when it was accepted at its first
        reply (`_memo_keys`). A success always; under `charged` also a failure that is not an outage (an
        unusable reply after its re-asks, a failed check, an operator error: the same call would fail the same
        way), so the workflows compared are judged on the same calls and it is made once. An outage
        (`unavailable`: backend down, per-call timeout) never is."""
        memoised = output.ok or (self._settings.memo_scope == "charged" and not output.unavailable)
        if not memoised or self._memo is None:
            return
        payer = RUN_SCOPE.get()
        entry = MemoEntry(
            output=output,
            llm_calls=row.llm_calls,
            tokens=row.tokens,
            latency_s=row.latency_s or 0.0,
            paid_by={payer} if payer else set(),
            **first,
        )
        for key in keys if _first_reply_accepted(entry) else keys[:1]:
            self._memo.put(key, entry)

    async def _lookup(self, key: str, *, wait: bool, via: ChatBackend | None) -> MemoEntry | None:
        """The memoised result of `key`; with `wait`, an identical call under way elsewhere is waited for
        rather than made twice (a draw that waits leaves its shared-prompt batch, so the batch goes ahead)."""
        if self._memo is None:
            return None
        cached = self._memo.get(key)
        while cached is None and wait and self._memo.is_computing(key):
            if isinstance(via, BatchMember):
                via.finished()
            await self._memo.wait_for(key)
            cached = self._memo.get(key)
        return cached

    async def _reuse(
        self, key: str, cached: MemoEntry, row: NodeTrace, *, charged: bool, via: ChatBackend | None
    ) -> None:
        """A memo hit is free, except under `charged` the first time a workflow uses another's call: then it
        pays what the call would have cost it, made in its own requests (`MemoEntry.charge`). A sampled draw
        of a shared-prompt batch pays the prompt only when no draw of its batch sent the request that would
        have carried it, and then only one of them does."""
        if charged and self._memo is not None and self._memo.charge(key, RUN_SCOPE.get()):
            pays = await via.pays_unsent_prompt() if isinstance(via, BatchMember) else True
            row.tokens, row.llm_calls = cached.charge(pays_first_request=pays)
            row.latency_s = cached.latency_s
            self._ctx.add_usage(row.llm_calls, row.tokens)
            shared = "the same call made for another workflow, charged at its cost"
            row.note = f"{row.note}; {shared}" if row.note else shared
            return
        row.cached = True
        self._ctx.cache_hits += 1

    async def _compute(
        self,
        node: OperatorNode,
        spec: OperatorSpec | None,
        inputs: OperatorInput,
        row: NodeTrace,
        sink: list[NodeTrace],
        draw: DrawSettings,
        via: ChatBackend | None,
        settings: CallSettings,
    ) -> tuple[OperatorOutput, dict[str, Any]]:
        """The operator's checked output, and its first request's facts for the memo (`MemoEntry`)."""
        try:
            operator_cls = self._registry.implementation(node.operator)
        except UnknownOperatorError as exc:
            return OperatorOutput(ok=False, error=str(exc.args[0]) if exc.args else str(exc)), {}
        metered = MeteredBackend(via or self._backend, node_id=node.id, operator=node.operator, affinity=self._affinity)
        options = {**settings.runtime_options, "node_id": node.id}  # operators stamp it on requests
        runtime = OperatorRuntime(
            llm=metered,
            max_reasks=settings.reasks_for(draw),
            sandbox_timeout_s=settings.sandbox_timeout_s,
            options=options,
            draw=draw,
        )
        started = time.perf_counter()
        try:
            output = await self._invoke(node, operator_cls, inputs, runtime)
        except anyio.get_cancelled_exc_class():
            # Interrupted by the run timeout or by the caller: keep what it cost, then propagate.
            row.error = "interrupted before finishing (run timeout or cancellation)"
            self._count(row, metered, via)
            row.latency_s = time.perf_counter() - started
            sink.append(row)
            raise
        row.latency_s = time.perf_counter() - started
        first = self._count(row, metered, via)
        return _checked(output, spec), first

    def _count(self, row: NodeTrace, metered: MeteredBackend, via: ChatBackend | None) -> dict[str, Any]:
        """Requests actually sent and tokens used: a first request that rode along in another draw's `n`
        request is not a call of its own (its share of the tokens is already split by the backend). Returns
        the first request's facts (`MemoEntry`), so a workflow reusing the call pays as its batching would."""
        rode_along = isinstance(via, BatchMember) and via.requests_saved > 0
        calls = metered.calls - (1 if rode_along else 0)
        row.llm_calls, row.tokens = calls, metered.tokens
        self._ctx.add_usage(calls, metered.tokens)
        shared = via.shared_prompt_tokens if isinstance(via, BatchMember) else None
        return {
            "requested": metered.calls > 0,
            "first_prompt_tokens": shared if shared is not None else metered.first_prompt_tokens,
            "paid_prompt_tokens": metered.first_prompt_tokens,
            "first_call_counted": 1 if metered.calls > 0 and not rode_along else 0,
        }

    async def _invoke(
        self, node: OperatorNode, operator_cls: type[Operator], inputs: OperatorInput, runtime: OperatorRuntime
    ) -> OperatorOutput:
        limit = self._settings.call_timeout_s
        output: OperatorOutput | None = None
        try:
            with anyio.move_on_after(math.inf if limit is None else limit) as scope:
                output = await operator_cls().run(inputs, runtime)
        except SandboxRefusedError as exc:  # the host's problem, not the operator's: the node reports the fix
            log.warning("sandbox_refused", node_id=node.id, operator=node.operator)
            return OperatorOutput(ok=False, error=str(exc), unavailable=True)
        except Exception as exc:  # an operator bug: report it on the node, never crash the run
            log.error("operator_crashed", node_id=node.id, operator=node.operator, exc_info=True)
            return OperatorOutput(ok=False, error=f"operator raised {type(exc).__name__}: {exc}")
        if scope.cancelled_caught:
            return OperatorOutput(ok=False, error=f"timed out after {limit:g}s (per-call limit)", unavailable=True)
        if not isinstance(output, OperatorOutput):
            return OperatorOutput(
                ok=False, error=f"operator returned {type(output).__name__} instead of an OperatorOutput"
            )
        return output


def _first_reply_accepted(entry: MemoEntry) -> bool:
    """Whether the call's first reply was its result, which makes it the same call whatever re-asks it was
    allowed (a failure after one reply may have been re-asked under another cap)."""
    return entry.output.ok and entry.llm_calls == 1


def _record(row: NodeTrace, output: OperatorOutput) -> None:
    """What the call gave, on its trace row."""
    row.ok = output.ok
    if output.ok and output.note:
        row.note = f"{row.note}; {output.note}" if row.note else output.note
    row.output = output.text if output.ok else ""
    row.error = None if output.ok else output.error
    row.unavailable = not output.ok and output.unavailable
    row.verdict = output.verdict if output.ok else None


def _checked(output: OperatorOutput, spec: OperatorSpec | None) -> OperatorOutput:
    """Reject results that cannot be used: a failure without a reason, or an empty answer from a solver."""
    if not output.ok:
        return output if output.error else output.model_copy(update={"error": "failed without an error message"})
    if spec is not None and spec.role is Role.SOLUTION and not output.text.strip() and not output.code:
        return OperatorOutput(ok=False, error="returned an empty answer")
    return output
