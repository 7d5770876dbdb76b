"""Data flow through every role, final answers, and failures that must never become answers."""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import ExecutionReport, WorkflowRunner
from flowsteer_mcp.canvas.model import Stage, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from tests.engine.doubles import TOKENS_PER_CALL, make_harness, op, parallel

TASK = TaskSpec(problem="What is 2 + 2?", task_type="math")


def graph(*stages: Stage) -> WorkflowGraph:
    return WorkflowGraph(stages=list(stages), next_index=len(stages) + 1)


def test_engine_satisfies_the_canvas_runner_protocol() -> None:
    runner: WorkflowRunner = make_harness().engine
    assert callable(runner.run)


async def test_empty_graph_reports_empty() -> None:
    report = await make_harness().engine.run(WorkflowGraph(), TASK)
    assert report.status == "empty"
    assert report.output is None and report.trace == []


async def test_every_role_updates_the_state_as_specified() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(
            op("node_1", "FakePlanner", "outline"),
            op("node_2", "FakeSolver", "S1"),
            op("node_3", "FakeChecker", "verdict:fail"),
            op("node_4", "FakeReviser"),
        ),
        TASK,
    )
    assert report.status == "ok", report.error
    # The planner added guidance but no solution; the solver saw the guidance.
    solver_input = h.recorder.inputs_of("FakeSolver")[0]
    assert solver_input.guidance == ["plan<outline>"]
    assert solver_input.solution is None
    assert solver_input.instruction == "S1"
    # The checker saw the solver's answer and passed it through (empty text) with its feedback.
    checker_input = h.recorder.inputs_of("FakeChecker")[0]
    assert checker_input.solution == "S1"
    reviser_input = h.recorder.inputs_of("FakeReviser")[0]
    assert reviser_input.solution == "S1"
    assert reviser_input.feedback == "feedback on S1"
    assert report.output == "S1|rev[feedback on S1]"
    assert [row.verdict for row in report.trace] == [None, None, False, None]
    assert report.code is None
    # The report (with its trace) is plain JSON and round-trips.
    assert ExecutionReport.model_validate_json(report.model_dump_json()) == report


async def test_problem_and_public_tests_reach_operators_and_nothing_else_is_invented() -> None:
    h = make_harness()
    task = TaskSpec(problem="write f", task_type="code", entry_point="f", public_tests="assert f() == 1")
    await h.engine.run(graph(op("node_1", "FakeCoder", "a")), task)
    seen = h.recorder.inputs_of("FakeCoder")[0]
    assert (seen.problem, seen.task_type, seen.entry_point, seen.public_tests) == (
        "write f",
        "code",
        "f",
        "assert f() == 1",
    )


async def test_a_guidance_only_workflow_has_no_answer() -> None:
    report = await make_harness().engine.run(graph(op("node_1", "FakePlanner", "outline")), TASK)
    assert report.status == "failed"
    assert report.output is None
    assert "plan is not an answer" in (report.error or "")


async def test_failed_last_node_is_reported_and_never_the_answer() -> None:
    report = await make_harness().engine.run(
        graph(op("node_1", "FakeSolver", "S1"), op("node_2", "FailingSolverDouble")), TASK
    )
    assert report.status == "degraded"  # issue 10: a failed last stage keeps the earlier answer
    assert report.output == "S1"  # the error never becomes the answer
    assert "node_2" in (report.error or "") and "model refused to answer" in (report.error or "")
    failed = report.trace[1]
    assert (failed.ok, failed.error, failed.output) == (False, "model refused to answer", "")


async def test_a_failed_middle_node_leaves_the_state_unchanged() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(op("node_1", "FakeSolver", "S1"), op("node_2", "FailingSolverDouble"), op("node_3", "FakeSolver", "S3")),
        TASK,
    )
    assert report.status == "ok"
    assert report.output == "S1|S3"  # node_3 built on node_1's answer, not on node_2's error
    assert h.recorder.inputs_of("FakeSolver")[1].solution == "S1"


async def test_operator_crash_becomes_a_node_error_not_a_crashed_run() -> None:
    report = await make_harness().engine.run(
        graph(op("node_1", "FakeSolver", "S1"), op("node_2", "CrashingOperatorDouble")), TASK
    )
    assert report.status == "degraded"  # issue 10: the crash is reported, node_1's answer is kept
    assert report.trace[1].error == "operator raised RuntimeError: boom"
    assert report.output == "S1"


async def test_unimplemented_and_unknown_operators_fail_their_node() -> None:
    h = make_harness()
    report = await h.engine.run(graph(op("node_1", "UnimplementedDouble")), TASK)
    assert report.status == "failed"
    assert "no implementation registered" in (report.trace[0].error or "")
    report = await h.engine.run(graph(op("node_1", "NoSuchOperator")), TASK)
    assert "unknown operator 'NoSuchOperator'" in (report.trace[0].error or "")


async def test_an_empty_answer_from_a_solver_is_a_failure() -> None:
    report = await make_harness().engine.run(
        graph(op("node_1", "FakeSolver", "S1"), op("node_2", "EmptySolverDouble")), TASK
    )
    assert report.status == "degraded"  # issue 10: the empty answer is a failure, node_1's answer is kept
    assert report.trace[1].error == "returned an empty answer"
    assert report.output == "S1"


async def test_parallel_candidates_reach_only_the_next_stage() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(
            parallel("node_1", ("FakeSolver", "A"), ("FailingSolverDouble", None), ("FakeSolver", "B")),
            op("node_2", "FakeEnsemble", "pick:1"),
            op("node_3", "FakeSolver", "F"),
        ),
        TASK,
    )
    assert report.status == "ok", report.error
    ensemble_input = h.recorder.inputs_of("FakeEnsemble")[0]
    assert ensemble_input.candidates == ["A", "B"]  # successful branches, in branch order
    assert ensemble_input.solution == "A"  # the first successful candidate
    assert h.recorder.inputs_of("FakeSolver")[2].candidates == []  # cleared after the ensemble stage
    assert report.output == "B|F"
    assert [row.node_id for row in report.trace[:3]] == ["node_1_p0", "node_1_p1", "node_1_p2"]


async def test_parallel_with_every_branch_failing_fails_the_stage() -> None:
    report = await make_harness().engine.run(
        graph(parallel("node_1", ("FailingSolverDouble", None), ("CrashingOperatorDouble", None))), TASK
    )
    assert report.status == "failed"
    assert "all 2 parallel branches failed" in (report.error or "")
    assert "boom" in (report.error or "")


async def test_code_task_final_answer_is_the_program_of_the_chosen_candidate() -> None:
    h = make_harness()
    task = TaskSpec(problem="write f", task_type="code", entry_point="f", public_tests="assert f() == 'b'")
    report = await h.engine.run(
        graph(
            parallel("node_1", ("FakeCoder", "a"), ("FakeCoder", "b")),
            op("node_2", "FakeEnsemble", "pick:1"),
            op("node_3", "FakeChecker", "verdict:pass"),
        ),
        task,
    )
    assert report.status == "ok"
    assert report.code == "def f():\n    return 'b'\n"
    assert report.output == report.code


async def test_checker_repairs_code_for_code_tasks() -> None:
    task = TaskSpec(problem="write f", task_type="code", entry_point="f")
    report = await make_harness().engine.run(
        graph(op("node_1", "FakeCoder", "a"), op("node_2", "FakeChecker", "verdict:repair")), task
    )
    assert report.code == "def f():\n    return 'repaired'\n"
    assert report.status == "ok"


async def test_usage_is_counted_per_node_and_in_total() -> None:
    h = make_harness()
    report = await h.engine.run(
        graph(
            op("node_1", "FakePlanner", "outline"),
            parallel("node_2", ("FakeSolver", "A"), ("FakeSolver", "B")),
            op("node_3", "FakeEnsemble", "pick:0"),  # no LLM call
        ),
        TASK,
    )
    assert [(row.node_id, row.llm_calls, row.tokens) for row in report.trace] == [
        ("node_1", 1, TOKENS_PER_CALL),
        ("node_2_p0", 1, TOKENS_PER_CALL),
        ("node_2_p1", 1, TOKENS_PER_CALL),
        ("node_3", 0, 0),
    ]
    assert (report.llm_calls, report.tokens) == (3, 3 * TOKENS_PER_CALL)
    assert all(row.latency_s >= 0 and row.inputs_digest for row in report.trace)
    # Requests reaching the backend are attributed to their node and operator.
    assert sorted((r.node_id, r.operator) for r in h.backend.requests) == [
        ("node_1", "FakePlanner"),
        ("node_2_p0", "FakeSolver"),
        ("node_2_p1", "FakeSolver"),
    ]
