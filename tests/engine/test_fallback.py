"""The fallback kind in the engine: `A ?? B` runs B only when A failed or gave no answer."""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import ExecutionReport
from flowsteer_mcp.canvas.kinds import KINDS, FallbackStage
from flowsteer_mcp.canvas.model import Stage, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.engine.context import planned_total
from flowsteer_mcp.engine.kinds import STAGE_RUNNERS
from tests.engine.doubles import make_harness, op

TASK = TaskSpec(problem="What is 2 + 2?", task_type="math")


def graph(*stages: Stage) -> WorkflowGraph:
    return WorkflowGraph(stages=list(stages), next_index=len(stages) + 1)


def fallback(stage_id: str, attempt: tuple[str, str | None], other: tuple[str, str | None]) -> FallbackStage:
    return FallbackStage(id=stage_id, attempt=op(f"{stage_id}_try", *attempt), fallback=op(f"{stage_id}_else", *other))


def rows(report: ExecutionReport) -> list[tuple[str, bool, bool]]:
    return [(r.node_id, r.ok, r.skipped) for r in report.trace]


def test_every_canvas_kind_has_a_stage_runner() -> None:
    assert set(STAGE_RUNNERS) == set(KINDS)


async def test_a_failed_attempt_runs_the_fallback() -> None:
    h = make_harness()
    report = await h.engine.run(graph(fallback("node_1", ("FailingSolverDouble", None), ("FakeSolver", "B"))), TASK)
    assert report.status == "ok" and report.output == "B"
    assert rows(report) == [("node_1_try", False, False), ("node_1_else", True, False)]
    assert report.trace[0].note == "failed, so the fallback runs"


async def test_an_empty_attempt_runs_the_fallback_on_the_same_solution() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(op("node_1", "FakeSolver", "S1"), fallback("node_2", ("EmptySolverDouble", None), ("FakeSolver", "B"))),
        TASK,
    )
    assert report.status == "ok" and report.output == "S1|B"
    assert rows(report)[1:] == [("node_2_try", False, False), ("node_2_else", True, False)]  # blank = no answer


async def test_an_answering_attempt_skips_the_fallback() -> None:
    h = make_harness()
    report = await h.engine.run(graph(fallback("node_1", ("FakeSolver", "A"), ("FakeSolver", "B"))), TASK)
    assert report.status == "ok" and report.output == "A"
    assert rows(report) == [("node_1_try", True, False), ("node_1_else", True, True)]
    assert report.trace[1].note == "not taken: node_1_try answered"
    assert [name for name, _ in h.recorder.seen] == ["FakeSolver"]


async def test_a_failed_fallback_fails_the_stage_but_keeps_the_earlier_answer() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            fallback("node_2", ("FailingSolverDouble", None), ("FailingSolverDouble", None)),
        ),
        TASK,
    )
    assert report.status == "degraded" and report.output == "S1"
    assert "node_2_else" in (report.error or "")


def test_a_fallback_plans_two_calls() -> None:
    assert planned_total(graph(fallback("node_1", ("FakeSolver", None), ("FakeSolver", None)))) == 2
