"""LLM calls per canvas trajectory with and without per-node memoisation, on the same action traces.

Each trace is a fixed sequence of typed canvas edits (`apply_edit` with the real validation rules). As the
canvas does with `execute_each_step`, the workflow runs after every edit. Both modes use the real built-in
operators and a fresh deterministic executor double (`ScriptedBackend` answering per operator, behind a
fixed per-call latency), so the only difference between the columns is the memo cache.

    .venv/bin/python benchmarks/memoisation.py [--quick] [--latency-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from dataclasses import dataclass

import structlog
from _guard import BenchmarkReport

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, EditAction, ModifyNode, SetPrompt, apply_edit
from flowsteer_mcp.canvas.blueprint import ConditionalBlueprint, LoopBlueprint, OperatorBlueprint, ParallelBlueprint
from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.engine import MemoCache, WorkflowEngine
from operators.backends.base import ChatRequest, ChatResponse
from operators.backends.scripted import ScriptedBackend
from operators.registry import OperatorRegistry, default_registry

TASK = TaskSpec(
    problem="A shop sells pens at $3 each. How much do 14 pens cost after a 10% discount?", task_type="math"
)

_REPLIES = {
    "Plan": "<steps>\n1. Multiply 14 by 3.\n2. Take 10% off the total.\n</steps>",
    "Decompose": "<subproblems>\n1. Cost of 14 pens at $3.\n2. Apply a 10% discount.\n</subproblems>",
    "Programmer": "```python\ndef solve():\n    return 14 * 3 * 0.9\n```",
    "Custom": "14 pens cost 42 dollars; 10% off leaves 37.8 dollars.\n37.8",
    "AnswerGenerate": "<thought>42 * 0.9</thought>\n<answer>37.8</answer>",
    "ScEnsemble": "<choice>1</choice>",
    "Aggregate": "<reason>the candidates agree</reason>\n<answer>37.8</answer>",
    "Verify": "<independent_answer>37.8</independent_answer>\n<verdict>incorrect</verdict>\n"
    "<confidence>medium</confidence>\n<feedback>Give the amount with its currency.</feedback>",
    "Revise": "<solution>The pens cost $37.80 in total.\n37.8</solution>",
    "Format": "<answer>37.8</answer>",
}


def _executor_rule(request: ChatRequest) -> str | None:
    if request.operator == "Review":
        revised = "$37.80" in request.messages[-1].content
        verdict = "pass" if revised else "fail"
        return f"<feedback>{'Correct.' if revised else 'State the currency.'}</feedback>\n<verdict>{verdict}</verdict>"
    return _REPLIES.get(request.operator or "")


class FixedLatencyBackendDouble:
    """Executor double: the scripted replies above, each after a fixed latency (like a fast endpoint)."""

    def __init__(self, latency_s: float) -> None:
        self._inner = ScriptedBackend(rules=[_executor_rule], name="memo-benchmark")
        self._latency_s = latency_s

    @property
    def model(self) -> str:
        return self._inner.model

    def cache_key(self) -> str:
        return self._inner.cache_key()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        await asyncio.sleep(self._latency_s)
        return await self._inner.complete(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _op(name: str, prompt: str | None = None) -> AddStage:
    return AddStage(stage=OperatorBlueprint(operator=name, prompt=prompt))


TRACES: dict[str, list[EditAction]] = {
    # The reference's example episode, then a prompt edit in the middle and an operator swap in a branch.
    "plan-parallel-verify": [
        _op("Plan", "Plan the arithmetic in two steps."),
        AddStage(stage=ParallelBlueprint(operators=["Programmer", "Custom"])),
        _op("ScEnsemble"),
        AddStage(stage=ConditionalBlueprint(check="Verify", on_fail="Revise")),
        _op("Format", "Output only the number."),
        SetPrompt(node_id="node_4_cond", prompt="Recompute the discount independently."),
        ModifyNode(node_id="node_2_p1", operator="AnswerGenerate", prompt="Answer with the number only."),
    ],
    # A review loop: edits at the front re-run everything, edits at the end almost nothing.
    "solve-review-loop": [
        _op("Custom", "Compute the total cost step by step."),
        AddStage(stage=LoopBlueprint(operators=["Review", "Revise"], count=3)),
        _op("Format", "Output only the number."),
        SetPrompt(node_id="node_3", prompt="Output only the final number, no units."),
        SetPrompt(node_id="node_1", prompt="Compute 14 * 3, then subtract 10 percent."),
        DeleteNode(node_id="node_3"),
        _op("Format", "Give just the number."),
    ],
    # Decompose and aggregate, then an insertion at the front (everything downstream changes).
    "decompose-aggregate": [
        _op("Decompose", "Split into price and discount."),
        AddStage(stage=ParallelBlueprint(operators=["Custom", "AnswerGenerate"])),
        _op("Aggregate", "Combine into one final amount."),
        AddStage(stage=ConditionalBlueprint(check="Review", on_fail="Revise", on_pass="Format")),
        SetPrompt(node_id="node_4_pass", prompt="Output only the number."),
        AddStage(stage=OperatorBlueprint(operator="Plan", prompt="Plan before decomposing."), position=0),
    ],
}


EXPECTED_ANSWER = "37.8"
_OUTCOMES = frozenset({"ok", "failed"})  # "failed" is an outcome (e.g. a lone Plan has no answer); others are not


@dataclass
class TrajectoryResult:
    llm_calls: int
    cache_hits: int
    seconds: float
    outputs: list[str | None]
    statuses: list[str]

    def failures(self, label: str) -> list[str]:
        """Why this replay measured nothing useful: a run that could not run, or a trace that never got its answer."""
        found = [
            f"{label}: edit {i + 1} ended {status}" for i, status in enumerate(self.statuses) if status not in _OUTCOMES
        ]
        last = self.outputs[-1] if self.outputs else None
        if self.statuses[-1:] != ["ok"] or last is None or EXPECTED_ANSWER not in last:
            found.append(f"{label}: the final workflow did not answer {EXPECTED_ANSWER} (got {last!r})")
        if not self.llm_calls:
            found.append(f"{label}: no executor call was made")
        return found


async def replay(
    trace: list[EditAction], registry: OperatorRegistry, *, memoise: bool, latency_s: float
) -> TrajectoryResult:
    engine = WorkflowEngine(registry, FixedLatencyBackendDouble(latency_s), memo=MemoCache() if memoise else None)
    rules = CanvasRules(registry, CanvasOptions())
    graph = WorkflowGraph()
    calls = hits = 0
    outputs: list[str | None] = []
    statuses: list[str] = []
    started = time.perf_counter()
    for action in trace:
        graph = apply_edit(graph, action, rules).graph
        report = await engine.run(graph, TASK)
        calls += report.llm_calls
        hits += report.cache_hits
        outputs.append(report.output if report.ok else f"<{report.status}: {report.error}>")
        statuses.append(report.status)
    return TrajectoryResult(calls, hits, time.perf_counter() - started, outputs, statuses)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="replay only the first trace")
    parser.add_argument("--latency-ms", type=float, default=10.0, help="executor latency per call (default 10)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # keep the table clean
    registry = default_registry()
    latency_s = args.latency_ms / 1000
    names = list(TRACES)[:1] if args.quick else list(TRACES)

    report = BenchmarkReport("memoisation")
    report.line(
        f"memoisation benchmark: {len(names)} trace(s), workflow run after every edit, executor latency {args.latency_ms:g} ms"
    )
    header = (
        f"{'trace':<22} {'edits':>5} {'calls off':>9} {'calls on':>8} {'ratio':>6} {'hits':>5} {'s off':>6} {'s on':>6}"
    )
    report.line(header)
    report.line("-" * len(header))
    total_off = total_on = 0
    for name in names:
        trace = TRACES[name]
        off = await replay(trace, registry, memoise=False, latency_s=latency_s)
        on = await replay(trace, registry, memoise=True, latency_s=latency_s)
        for failure in [*off.failures(f"{name}, memo off"), *on.failures(f"{name}, memo on")]:
            report.fail(failure)
        report.require(
            off.outputs == on.outputs, f"{name}: memoisation changed the outputs ({off.outputs} vs {on.outputs})"
        )
        total_off += off.llm_calls
        total_on += on.llm_calls
        ratio = off.llm_calls / on.llm_calls if on.llm_calls else float("inf")
        report.line(
            f"{name:<22} {len(trace):>5} {off.llm_calls:>9} {on.llm_calls:>8} {ratio:>5.2f}x {on.cache_hits:>5} "
            f"{off.seconds:>6.2f} {on.seconds:>6.2f}"
        )
    report.line("-" * len(header))
    overall = total_off / total_on if total_on else float("inf")
    report.line(
        f"{'total':<22} {'':>5} {total_off:>9} {total_on:>8} {overall:>5.2f}x  (outputs identical with and without)"
    )
    rules = CanvasRules(registry, CanvasOptions())
    final = WorkflowGraph()
    for action in TRACES[names[-1]]:
        final = apply_edit(final, action, rules).graph
    report.line(f"last workflow of {names[-1]}: {render(final)}")
    report.publish()


if __name__ == "__main__":
    asyncio.run(main())
