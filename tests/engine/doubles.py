"""Test doubles for the engine tests: deterministic fake operators and a fake chat backend.

Every double is named as one. Behaviour is driven by the node prompt (the operator's `instruction`) so a
test can say what a node does right in the graph it builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from flowsteer_mcp.canvas.model import ConditionalStage, LoopStage, OperatorNode, ParallelStage
from flowsteer_mcp.engine import WorkflowEngine
from operators.backends.base import ChatMessage, ChatRequest, ChatResponse, Usage
from operators.base import Category, Operator, OperatorInput, OperatorOutput, OperatorRuntime, OperatorSpec, Role
from operators.registry import OperatorRegistry

TOKENS_PER_CALL = 10  # 7 prompt + 3 completion, see FakeChatBackendDouble


class FakeChatBackendDouble:
    """Answers every request instantly (or after `latency_s`) with fixed usage; records what it was asked."""

    def __init__(self, *, key: str = "double-v1", latency_s: float = 0.0) -> None:
        self.key = key
        self.latency_s = latency_s
        self.requests: list[ChatRequest] = []

    @property
    def model(self) -> str:
        return "fake-model"

    def cache_key(self) -> str:
        return f"fake-backend:{self.key}"

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if self.latency_s:
            await anyio.sleep(self.latency_s)
        return ChatResponse(text="ok", model=self.model, usage=Usage(prompt_tokens=7, completion_tokens=3))

    async def aclose(self) -> None:
        return None


@dataclass
class Recorder:
    """What the fake operators saw, plus hooks for concurrency and cancellation tests."""

    seen: list[tuple[str, OperatorInput]] = field(default_factory=list)
    gate_expected: int = 2
    gate_arrived: int = 0
    gate_open: anyio.Event = field(default_factory=anyio.Event)
    active: int = 0
    max_active: int = 0
    slow_started: anyio.Event = field(default_factory=anyio.Event)
    slow_cancelled: int = 0
    slow_sleep_s: float | None = None  # overrides the `sleep:<seconds>` prompt without changing the memo key

    def inputs_of(self, operator: str) -> list[OperatorInput]:
        return [inputs for name, inputs in self.seen if name == operator]


async def _ask(runtime: OperatorRuntime, text: str) -> None:
    await runtime.llm.complete(ChatRequest(messages=[ChatMessage(role="user", content=text)]))


def _spec(name: str, category: Category, role: Role, *, needs_candidates: bool = False) -> OperatorSpec:
    return OperatorSpec(
        name=name,
        category=category,
        role=role,
        summary=f"{name} test double",
        when_to_use="tests only",
        signature=f"{name}(...) -> {{text}}",
        needs_candidates=needs_candidates,
    )


def build_registry(recorder: Recorder) -> OperatorRegistry:
    """A registry of fake operators that record their inputs into `recorder`."""

    class _Recording(Operator):
        async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            recorder.seen.append((self.spec.name, inputs))
            return await self.act(inputs, runtime)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            raise NotImplementedError

    class FakePlanner(_Recording):
        """GUIDANCE: returns `plan<instruction>`."""

        spec = _spec("FakePlanner", Category.PLANNING, Role.GUIDANCE)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            await _ask(runtime, inputs.problem)
            return OperatorOutput(text=f"plan<{inputs.instruction}>")

    class FakeSolver(_Recording):
        """SOLUTION: appends its instruction as a marker to the current solution (`S1`, then `S1|S2`)."""

        spec = _spec("FakeSolver", Category.SOLVING, Role.SOLUTION)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            await _ask(runtime, inputs.problem)
            marker = inputs.instruction or "S"
            return OperatorOutput(text=f"{inputs.solution}|{marker}" if inputs.solution else marker)

    class FakeCoder(_Recording):
        """SOLUTION for code tasks: text and code both name the instruction."""

        spec = _spec("FakeCoder", Category.SOLVING, Role.SOLUTION)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            await _ask(runtime, inputs.problem)
            return OperatorOutput(
                text=f"candidate {inputs.instruction}", code=f"def f():\n    return {inputs.instruction!r}\n"
            )

    class FakeChecker(_Recording):
        """CHECKER; the instruction picks the verdict: `verdict:pass|fail|none`, `pass-when:X` (X in the
        solution), `verdict:repair` (fails and repairs code); feedback names the checked solution."""

        spec = _spec("FakeChecker", Category.VERIFICATION, Role.CHECKER)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            await _ask(runtime, inputs.problem)
            rule = inputs.instruction or "verdict:pass"
            feedback = f"feedback on {inputs.solution}"
            if rule.startswith("pass-when:"):
                return OperatorOutput(
                    text="", verdict=rule.split(":", 1)[1] in (inputs.solution or ""), feedback=feedback
                )
            if rule == "verdict:repair":
                return OperatorOutput(
                    text=f"{inputs.solution}|repaired",
                    code="def f():\n    return 'repaired'\n",
                    verdict=False,
                    feedback=feedback,
                )
            verdict = {"verdict:pass": True, "verdict:fail": False, "verdict:none": None}[rule]
            return OperatorOutput(text="", verdict=verdict, feedback=feedback)

    class FakeReviser(_Recording):
        """SOLUTION (revision): `<solution>|rev[<feedback>]`."""

        spec = _spec("FakeReviser", Category.REVISION, Role.SOLUTION)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            await _ask(runtime, inputs.problem)
            return OperatorOutput(text=f"{inputs.solution}|rev[{inputs.feedback}]")

    class FakeEnsemble(_Recording):
        """ENSEMBLE: returns candidate number `pick:<i>` verbatim, without any LLM call."""

        spec = _spec("FakeEnsemble", Category.ENSEMBLE, Role.SOLUTION, needs_candidates=True)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            if not inputs.candidates:
                return OperatorOutput(ok=False, error="no candidates to choose from")
            index = int((inputs.instruction or "pick:0").split(":", 1)[1])
            return OperatorOutput(text=inputs.candidates[index])

    class FailingSolverDouble(_Recording):
        """SOLUTION that always fails cleanly (an error value)."""

        spec = _spec("FailingSolverDouble", Category.SOLVING, Role.SOLUTION)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            await _ask(runtime, inputs.problem)
            return OperatorOutput(ok=False, error="model refused to answer")

    class CrashingOperatorDouble(_Recording):
        """An operator with a bug: raises instead of returning an error value."""

        spec = _spec("CrashingOperatorDouble", Category.SOLVING, Role.SOLUTION)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            raise RuntimeError("boom")

    class CrashingCheckerDouble(_Recording):
        spec = _spec("CrashingCheckerDouble", Category.VERIFICATION, Role.CHECKER)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            raise ValueError("checker bug")

    class EmptySolverDouble(_Recording):
        spec = _spec("EmptySolverDouble", Category.SOLVING, Role.SOLUTION)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            return OperatorOutput(text="   ")

    class GateSolverDouble(_Recording):
        """Waits until `recorder.gate_expected` instances are running at once: only concurrent branches pass."""

        spec = _spec("GateSolverDouble", Category.SOLVING, Role.SOLUTION)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            recorder.active += 1
            recorder.max_active = max(recorder.max_active, recorder.active)
            recorder.gate_arrived += 1
            if recorder.gate_arrived >= recorder.gate_expected:
                recorder.gate_open.set()
            try:
                await recorder.gate_open.wait()
            finally:
                recorder.active -= 1
            return OperatorOutput(text=f"gate {inputs.instruction}")

    class SlowSolverDouble(_Recording):
        """Makes one LLM call, then sleeps `sleep:<seconds>`; counts cancellations."""

        spec = _spec("SlowSolverDouble", Category.SOLVING, Role.SOLUTION)

        async def act(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
            await _ask(runtime, inputs.problem)
            recorder.slow_started.set()
            try:
                prompted = float((inputs.instruction or "sleep:30").split(":", 1)[1])
                await anyio.sleep(prompted if recorder.slow_sleep_s is None else recorder.slow_sleep_s)
            except anyio.get_cancelled_exc_class():
                recorder.slow_cancelled += 1
                raise
            return OperatorOutput(text="slow answer")

    registry = OperatorRegistry()
    for cls in (
        FakePlanner,
        FakeSolver,
        FakeCoder,
        FakeChecker,
        FakeReviser,
        FakeEnsemble,
        FailingSolverDouble,
        CrashingOperatorDouble,
        CrashingCheckerDouble,
        EmptySolverDouble,
        GateSolverDouble,
        SlowSolverDouble,
    ):
        registry.register(cls)
    registry.add_spec(_spec("UnimplementedDouble", Category.SOLVING, Role.SOLUTION))
    return registry


# Small graph builders, so tests read like the DSL they exercise.


def op(node_id: str, operator: str, prompt: str | None = None) -> OperatorNode:
    return OperatorNode(id=node_id, operator=operator, prompt=prompt)


def parallel(stage_id: str, *branches: tuple[str, str | None]) -> ParallelStage:
    return ParallelStage(
        id=stage_id, branches=[op(f"{stage_id}_p{i}", name, prompt) for i, (name, prompt) in enumerate(branches)]
    )


def conditional(
    stage_id: str,
    check: tuple[str, str | None],
    on_fail: tuple[str, str | None],
    on_pass: tuple[str, str | None] | None,
) -> ConditionalStage:
    return ConditionalStage(
        id=stage_id,
        check=op(f"{stage_id}_cond", *check),
        on_fail=op(f"{stage_id}_fail", *on_fail),
        on_pass=op(f"{stage_id}_pass", *on_pass) if on_pass else None,
    )


def loop(stage_id: str, count: int, *body: tuple[str, str | None]) -> LoopStage:
    return LoopStage(
        id=stage_id, count=count, body=[op(f"{stage_id}_l{i}", name, prompt) for i, (name, prompt) in enumerate(body)]
    )


@dataclass
class Harness:
    engine: WorkflowEngine
    recorder: Recorder
    backend: FakeChatBackendDouble


def make_harness(**engine_options: Any) -> Harness:
    """An engine over the fake operators and the fake backend (engine options pass through)."""
    recorder = Recorder()
    backend = FakeChatBackendDouble()
    engine = WorkflowEngine(build_registry(recorder), backend, **engine_options)
    return Harness(engine=engine, recorder=recorder, backend=backend)
