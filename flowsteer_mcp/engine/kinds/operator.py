"""Operator: one node call; a node with `samples: k > 1` runs as a parallel stage of itself (k candidates).

A node with a stopping rule (`until`, operators/stopping.py) draws in the rule's waves instead, asks the rule
after each wave whether more draws could change what the next stage picks, and stops when not; its
candidates are the draws it made. The rule's verdict is noted on the last draw's trace row, and a program it saw
pass every public test keeps that score in the state (the feedback's `[Evidence]`, when it becomes the answer).
"""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.kinds import OperatorNode, ParallelStage
from flowsteer_mcp.engine.kinds.base import StageOutcome, applied
from flowsteer_mcp.engine.kinds.parallel import candidates_outcome, run_parallel
from flowsteer_mcp.engine.node_call import NodeCaller, NodeResult
from flowsteer_mcp.engine.state import FlowState
from operators.stopping import STOP_RULES, Decision, Draw, TaskView


async def run_operator(node: OperatorNode, state: FlowState, sink: list[NodeTrace], caller: NodeCaller) -> StageOutcome:
    if node.samples > 1 and node.until is not None:
        return await run_until(node, state, sink, caller)
    if node.samples > 1:  # k draws of itself, as a parallel stage
        return await run_parallel(ParallelStage(id=node.id, branches=[node]), state, sink, caller)
    result = await caller.call(node, state, sink=sink)
    return StageOutcome(applied(state, result), None if result.ok else result.describe_failure())


async def run_until(node: OperatorNode, state: FlowState, sink: list[NodeTrace], caller: NodeCaller) -> StageOutcome:
    """The node's draws in waves, until its stopping rule says the rest could not change the pick."""
    assert node.until is not None
    rule = STOP_RULES[node.until]
    task = TaskView(task_type=state.task_type, public_tests=state.public_tests, entry_point=state.entry_point)
    results: list[NodeResult] = []
    stopped: Decision | None = None
    waves = rule.waves(node.samples)
    for number, size in enumerate(waves, start=1):
        draws = list(range(len(results), len(results) + size))
        rows: list[list[NodeTrace]] = [[] for _ in draws]
        try:
            greedy_reasks = rule.greedy_reasks if number == 1 else None  # the greedy draw is the first wave's
            results.extend(await caller.call_draws(node, state, draws, sinks=rows, greedy_reasks=greedy_reasks))
        finally:
            for draw_rows in rows:
                sink.extend(draw_rows)
        if number == len(waves):
            break
        drawn = [Draw(text=r.output.text, code=r.output.code) for r in results if r.ok]
        decision = await rule.decide(drawn, task, timeout_s=caller.sandbox_timeout_s)
        last = results[-1].row
        verdict = f"until {rule.name} after {len(results)} of {node.samples} draws: {decision.reason}"
        last.note = f"{last.note}; {verdict}" if last.note else verdict
        if decision.stop:
            stopped = decision
            break
    outcome = candidates_outcome(state, results)
    if stopped is not None and stopped.passing is not None and stopped.score is not None:
        outcome.state = outcome.state.established_tests(stopped.passing, stopped.score)  # for the feedback
    return outcome
