"""Conditional, loop and parallel control flow."""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import ExecutionReport
from flowsteer_mcp.canvas.model import Stage, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from tests.engine.doubles import conditional, loop, make_harness, op, parallel

TASK = TaskSpec(problem="What is 2 + 2?", task_type="math")


def graph(*stages: Stage) -> WorkflowGraph:
    return WorkflowGraph(stages=list(stages), next_index=len(stages) + 1)


def rows(report: ExecutionReport) -> list[tuple[str, bool]]:
    return [(r.node_id, r.skipped) for r in report.trace]


# --- conditional `C ? F : P` -------------------------------------------------------------------------------


async def test_failed_check_runs_on_fail_with_the_checkers_feedback() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            conditional("node_2", ("FakeChecker", "verdict:fail"), ("FakeReviser", None), ("FakeSolver", "P")),
        ),
        TASK,
    )
    assert report.status == "ok"
    assert report.output == "S1|rev[feedback on S1]"
    assert rows(report) == [("node_1", False), ("node_2_cond", False), ("node_2_fail", False), ("node_2_pass", True)]
    assert report.trace[1].verdict is False
    assert report.trace[3].ok and report.trace[3].note == "not taken: the check failed"


async def test_passed_check_runs_on_pass_and_skips_on_fail() -> None:
    report = await make_harness().engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            conditional("node_2", ("FakeChecker", "verdict:pass"), ("FakeReviser", None), ("FakeSolver", "P")),
        ),
        TASK,
    )
    assert report.output == "S1|P"
    assert rows(report) == [("node_1", False), ("node_2_cond", False), ("node_2_pass", False), ("node_2_fail", True)]


async def test_passed_check_with_done_keeps_the_solution() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            conditional("node_2", ("FakeChecker", "verdict:pass"), ("FakeReviser", None), None),
        ),
        TASK,
    )
    assert report.status == "ok"
    assert report.output == "S1"
    assert h.recorder.inputs_of("FakeReviser") == []
    assert rows(report) == [("node_1", False), ("node_2_cond", False), ("node_2_fail", True)]


async def test_no_verdict_takes_the_pass_branch_and_says_so() -> None:
    report = await make_harness().engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            conditional("node_2", ("FakeChecker", "verdict:none"), ("FakeReviser", None), None),
        ),
        TASK,
    )
    assert report.output == "S1"
    check = report.trace[1]
    assert check.verdict is None
    assert "no verdict" in (check.note or "")
    assert report.trace[2].skipped


async def test_a_crashed_check_reports_no_failure_so_nothing_is_revised_blind() -> None:
    report = await make_harness().engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            conditional("node_2", ("CrashingCheckerDouble", None), ("FakeReviser", None), None),
        ),
        TASK,
    )
    assert report.status == "ok"  # the pass branch (done) ran; the crash is on the check's row
    assert report.output == "S1"
    assert "reported no failed check; the on_pass branch runs" in (report.trace[1].note or "")
    assert report.trace[1].error == "operator raised ValueError: checker bug"
    assert report.trace[2].operator == "FakeReviser" and report.trace[2].skipped


async def test_a_crashed_check_takes_an_explicit_pass_branch() -> None:
    report = await make_harness().engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            conditional("node_2", ("CrashingCheckerDouble", None), ("FakeReviser", None), ("FakeSolver", "S2")),
        ),
        TASK,
    )
    assert report.output == "S1|S2"  # the on_pass solver ran on the unchanged solution


async def test_a_failed_taken_branch_fails_the_last_stage() -> None:
    report = await make_harness().engine.run(
        graph(
            op("node_1", "FakeSolver", "S1"),
            conditional("node_2", ("FakeChecker", "verdict:fail"), ("FailingSolverDouble", None), None),
        ),
        TASK,
    )
    assert report.status == "degraded"  # issue 10: the failed stage keeps the earlier answer
    assert report.output == "S1"
    assert "node_2_fail (FailingSolverDouble): model refused to answer" in (report.error or "")


# --- loops ---------------------------------------------------------------------------------------------------


async def test_loop_stops_after_the_first_iteration_whose_check_passed() -> None:
    report = await make_harness().engine.run(
        graph(loop("node_1", 5, ("FakeSolver", "x"), ("FakeChecker", "pass-when:x|x|x"))),
        TASK,
    )
    assert report.status == "ok"
    assert report.output == "x|x|x"
    assert [(r.node_id, r.iteration) for r in report.trace] == [
        ("node_1_l0", 1),
        ("node_1_l1", 1),
        ("node_1_l0", 2),
        ("node_1_l1", 2),
        ("node_1_l0", 3),
        ("node_1_l1", 3),
    ]
    assert [r.verdict for r in report.trace[1::2]] == [False, False, True]
    assert "stops after iteration 3 of 5" in (report.trace[-1].note or "")


async def test_loop_runs_its_full_count_when_the_check_never_passes() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(
            op("node_1", "FakeSolver", "a"), loop("node_2", 3, ("FakeChecker", "verdict:fail"), ("FakeReviser", None))
        ),
        TASK,
    )
    body = report.trace[1:]
    assert [(r.node_id, r.iteration) for r in body] == [
        ("node_2_l0", 1),
        ("node_2_l1", 1),
        ("node_2_l0", 2),
        ("node_2_l1", 2),
        ("node_2_l0", 3),
        ("node_2_l1", 3),
    ]
    assert [r.verdict for r in body[::2]] == [False, False, False]
    assert len(h.recorder.inputs_of("FakeReviser")) == 3
    assert report.status == "ok"
    last_revise = h.recorder.inputs_of("FakeReviser")[-1]
    assert report.output == f"{last_revise.solution}|rev[{last_revise.feedback}]"
    assert last_revise.solution == "a|rev[feedback on a]|rev[feedback on a|rev[feedback on a]]"


async def test_loop_without_checker_runs_every_iteration() -> None:
    report = await make_harness().engine.run(graph(loop("node_1", 4, ("FakeSolver", "y"))), TASK)
    assert report.output == "y|y|y|y"
    assert [r.iteration for r in report.trace] == [1, 2, 3, 4]


async def test_loop_revise_sees_the_feedback_of_its_own_iteration() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(
            op("node_1", "FakeSolver", "a"), loop("node_2", 2, ("FakeChecker", "verdict:fail"), ("FakeReviser", None))
        ),
        TASK,
    )
    first, second = h.recorder.inputs_of("FakeReviser")
    assert (first.solution, first.feedback) == ("a", "feedback on a")
    assert second.solution == "a|rev[feedback on a]"
    assert second.feedback == "feedback on a|rev[feedback on a]"
    assert report.output == "a|rev[feedback on a]|rev[feedback on a|rev[feedback on a]]"


# --- parallel --------------------------------------------------------------------------------------------------


async def test_parallel_branches_run_concurrently() -> None:
    # Each gate branch waits until all three are running at once; run one after another, they would
    # never open the gate and the per-call timeout would fail them.
    h = make_harness(call_timeout_s=5)
    h.recorder.gate_expected = 3
    report = await h.engine.run(
        graph(parallel("node_1", ("GateSolverDouble", "a"), ("GateSolverDouble", "b"), ("GateSolverDouble", "c"))),
        TASK,
    )
    assert report.status == "ok", report.error
    assert h.recorder.max_active == 3
    assert report.output == "gate a"
