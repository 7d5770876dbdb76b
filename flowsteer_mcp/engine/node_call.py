"""One operator call: memo lookup, metering, per-call timeout, crash capture and its trace row.

Why one place: every stage kind calls operators the same way, and the guarantees (errors are values, a
crash or timeout never escapes, only completed successes are memoised, cancellation always propagates)
must hold for all of them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.model import OperatorNode
from flowsteer_mcp.engine.context import RunContext
from flowsteer_mcp.engine.memo import MemoCache, MemoEntry, inputs_digest, memo_key
from flowsteer_mcp.engine.metering import MeteredBackend
from flowsteer_mcp.engine.state import FlowState
from operators.backends.base import ChatBackend
from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime, OperatorSpec, Role
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


@dataclass(frozen=True)
class CallSettings:
    call_timeout_s: float | None
    max_reasks: int
    runtime_options: dict[str, Any]

    def fingerprint(self) -> dict[str, Any]:
        """The settings that can change an operator's result, for the memo key."""
        return {"max_reasks": self.max_reasks, "options": self.runtime_options}


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

    def spec_of(self, node: OperatorNode) -> OperatorSpec | None:
        try:
            return self._registry.spec(node.operator)
        except UnknownOperatorError:
            return None

    async def call(
        self, node: OperatorNode, state: FlowState, *, sink: list[NodeTrace], iteration: int | None = None
    ) -> NodeResult:
        """Run `node` on `state`; its trace row is appended to `sink` (also when the call is interrupted)."""
        inputs = state.to_input(node.prompt)
        spec = self.spec_of(node)
        key = memo_key(
            node_id=node.id,
            operator=node.operator,
            prompt=node.prompt,
            inputs=inputs,
            iteration=iteration,
            backend_key=self._backend_key,
            settings=self._settings.fingerprint(),
        )
        row = NodeTrace(
            node_id=node.id, operator=node.operator, ok=False, iteration=iteration, inputs_digest=inputs_digest(inputs)
        )
        await self._ctx.node_started(node)
        cached = self._memo.get(key) if self._memo is not None else None
        if cached is not None:
            output = cached.output
            row.cached = True
            self._ctx.cache_hits += 1
        else:
            output = await self._compute(node, spec, inputs, row, sink)
            if output.ok and self._memo is not None:
                self._memo.put(key, MemoEntry(output=output, llm_calls=row.llm_calls, tokens=row.tokens))
        row.ok = output.ok
        row.output = output.text if output.ok else ""
        row.error = None if output.ok else output.error
        row.verdict = output.verdict if output.ok else None
        sink.append(row)
        await self._ctx.node_finished(node)
        return NodeResult(node=node, spec=spec, output=output, row=row)

    async def _compute(
        self,
        node: OperatorNode,
        spec: OperatorSpec | None,
        inputs: OperatorInput,
        row: NodeTrace,
        sink: list[NodeTrace],
    ) -> OperatorOutput:
        try:
            operator_cls = self._registry.implementation(node.operator)
        except UnknownOperatorError as exc:
            return OperatorOutput(ok=False, error=str(exc.args[0]) if exc.args else str(exc))
        metered = MeteredBackend(self._backend, node_id=node.id, operator=node.operator)
        options = {**self._settings.runtime_options, "node_id": node.id}  # operators stamp it on requests
        runtime = OperatorRuntime(llm=metered, max_reasks=self._settings.max_reasks, options=options)
        started = time.perf_counter()
        try:
            output = await self._invoke(node, operator_cls, inputs, runtime)
        except anyio.get_cancelled_exc_class():
            # Interrupted by the run timeout or by the caller: keep what it cost, then propagate.
            row.error = "interrupted before finishing (run timeout or cancellation)"
            row.llm_calls, row.tokens = metered.calls, metered.tokens
            row.latency_s = time.perf_counter() - started
            self._ctx.add_usage(metered.calls, metered.tokens)
            sink.append(row)
            raise
        row.latency_s = time.perf_counter() - started
        row.llm_calls, row.tokens = metered.calls, metered.tokens
        self._ctx.add_usage(metered.calls, metered.tokens)
        return _checked(output, spec)

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
            return OperatorOutput(ok=False, error=str(exc))
        except Exception as exc:  # an operator bug: report it on the node, never crash the run
            log.error("operator_crashed", node_id=node.id, operator=node.operator, exc_info=True)
            return OperatorOutput(ok=False, error=f"operator raised {type(exc).__name__}: {exc}")
        if scope.cancelled_caught:
            return OperatorOutput(ok=False, error=f"timed out after {limit:g}s (per-call limit)")
        if not isinstance(output, OperatorOutput):
            return OperatorOutput(
                ok=False, error=f"operator returned {type(output).__name__} instead of an OperatorOutput"
            )
        return output


def _checked(output: OperatorOutput, spec: OperatorSpec | None) -> OperatorOutput:
    """Reject results that cannot be used: a failure without a reason, or an empty answer from a solver."""
    if not output.ok:
        return output if output.error else output.model_copy(update={"error": "failed without an error message"})
    if spec is not None and spec.role is Role.SOLUTION and not output.text.strip() and not output.code:
        return OperatorOutput(ok=False, error="returned an empty answer")
    return output
