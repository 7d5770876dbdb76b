"""Timeouts, cancellation and progress events."""

from __future__ import annotations

import anyio
import pytest

from flowsteer_mcp.canvas.execution import ExecutionReport, ProgressEvent
from flowsteer_mcp.canvas.model import Stage, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from tests.engine.doubles import TOKENS_PER_CALL, Harness, conditional, loop, make_harness, op, parallel

TASK = TaskSpec(problem="What is 2 + 2?", task_type="math")


def graph(*stages: Stage) -> WorkflowGraph:
    return WorkflowGraph(stages=list(stages), next_index=len(stages) + 1)


async def test_per_call_timeout_fails_only_that_node() -> None:
    h = make_harness(call_timeout_s=0.05)
    report = await h.engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            op("node_2", "SlowSolverDouble", "sleep:30"),
            op("node_3", "FakeSolver", "S3"),
        ),
        TASK,
    )
    assert report.status == "ok"
    assert report.output == "S1|S3"
    slow = report.trace[1]
    assert slow.ok is False
    assert slow.error == "timed out after 0.05s (per-call limit)"
    assert slow.llm_calls == 1  # what it spent before timing out is still counted
    assert h.recorder.slow_cancelled == 1


async def test_per_run_timeout_reports_timeout_with_a_partial_trace() -> None:
    h = make_harness(run_timeout_s=0.1)
    report = await h.engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            op("node_2", "SlowSolverDouble", "sleep:30"),
            op("node_3", "FakeSolver", "S3"),
        ),
        TASK,
    )
    assert report.status == "timeout"
    assert report.output is None
    assert "during stage node_2" in (report.error or "") and "node_2 (SlowSolverDouble)" in (report.error or "")
    assert [(r.node_id, r.ok) for r in report.trace] == [("node_1", True), ("node_2", False)]
    assert "interrupted" in (report.trace[1].error or "")
    assert report.llm_calls == 2 and report.tokens == 2 * TOKENS_PER_CALL
    assert h.recorder.inputs_of("FakeSolver")[-1].instruction == "S1"  # node_3 never started


async def test_per_run_timeout_inside_a_parallel_stage_keeps_finished_branches() -> None:
    h = make_harness(run_timeout_s=0.1)
    report = await h.engine.run(
        graph(parallel("node_1", ("FakeSolver", "A"), ("SlowSolverDouble", "sleep:30"))),
        TASK,
    )
    assert report.status == "timeout"
    assert [(r.node_id, r.ok) for r in report.trace] == [("node_1_p0", True), ("node_1_p1", False)]


async def _cancel_once_slow_started(h: Harness, g: WorkflowGraph) -> list[ExecutionReport]:
    reports: list[ExecutionReport] = []

    async def run() -> None:
        reports.append(await h.engine.run(g, TASK))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            await h.recorder.slow_started.wait()
            group.cancel_scope.cancel()
    return reports


async def test_cancellation_propagates_and_leaves_nothing_running() -> None:
    h = make_harness()
    g = graph(
        op("node_1", "FakeSolver", "S1"),
        parallel("node_2", ("SlowSolverDouble", "sleep:30"), ("SlowSolverDouble", "sleep:30")),
    )
    reports = await _cancel_once_slow_started(h, g)
    assert reports == []  # the run did not swallow the cancellation into a report
    assert h.recorder.slow_cancelled == 2  # both branches were cancelled, none left behind
    assert h.engine.memo is not None and len(h.engine.memo) == 1  # only node_1's completed result


async def test_a_cancelled_run_does_not_poison_the_cache() -> None:
    h = make_harness()
    g = graph(op("node_1", "FakeSolver", "S1"), op("node_2", "SlowSolverDouble", "sleep:30"))
    await _cancel_once_slow_started(h, g)
    assert h.engine.memo is not None and len(h.engine.memo) == 1
    h.recorder.slow_sleep_s = 0  # same graph, same memo key; this time the call completes
    report = await h.engine.run(g, TASK)
    assert report.status == "ok"
    assert [(r.node_id, r.cached) for r in report.trace] == [("node_1", True), ("node_2", False)]
    assert report.output == "slow answer"
    again = await h.engine.run(g, TASK)
    assert again.cache_hits == 2


async def test_progress_events_count_calls_against_an_upper_bound() -> None:
    h = make_harness()
    events: list[ProgressEvent] = []

    async def on_progress(event: ProgressEvent) -> None:
        events.append(event)

    g = graph(
        op("node_1", "FakeSolver", "S1"),
        parallel("node_2", ("FakeSolver", "A"), ("FakeSolver", "B")),
        conditional("node_3", ("FakeChecker", "verdict:pass"), ("FakeReviser", None), None),
        loop("node_4", 3, ("FakeSolver", "x"), ("FakeChecker", "pass-when:x")),
    )
    report = await h.engine.run(g, TASK, progress=on_progress)
    assert report.status == "ok"
    upper_bound = 1 + 2 + 2 + 2 * 3
    assert {e.total for e in events} == {upper_bound}
    calls = len([r for r in report.trace if not r.skipped])  # 1 + 2 + 1 + 2 (loop exits after iteration 1)
    assert calls == 6
    assert [e.phase for e in events].count("started") == calls
    finished = [e for e in events if e.phase == "finished"]
    assert [e.completed for e in finished] == list(range(1, calls + 1))
    assert [e.node_id for e in finished if e.node_id.startswith("node_1") or e.node_id.startswith("node_3")] == [
        "node_1",
        "node_3_cond",
    ]
    # Every call starts before it finishes.
    for node in {e.node_id for e in events}:
        phases = [e.phase for e in events if e.node_id == node]
        assert phases[0] == "started" and phases[-1] == "finished"


async def test_cached_nodes_still_report_progress() -> None:
    h = make_harness()
    g = graph(op("node_1", "FakeSolver", "S1"))
    await h.engine.run(g, TASK)
    events: list[ProgressEvent] = []

    async def on_progress(event: ProgressEvent) -> None:
        events.append(event)

    await h.engine.run(g, TASK, progress=on_progress)
    assert [(e.phase, e.completed, e.total) for e in events] == [("started", 0, 1), ("finished", 1, 1)]


async def test_a_broken_progress_callback_does_not_break_the_run() -> None:
    async def broken(event: ProgressEvent) -> None:
        raise ConnectionError("client went away")

    report = await make_harness().engine.run(graph(op("node_1", "FakeSolver", "S1")), TASK, progress=broken)
    assert report.status == "ok" and report.output == "S1"


def test_invalid_engine_settings_are_rejected_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="call_timeout_s must be a positive number"):
        make_harness(call_timeout_s=0)
    with pytest.raises(ValueError, match="max_reasks must be >= 0"):
        make_harness(max_reasks=-1)
