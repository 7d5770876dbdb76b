"""The `[Evidence]` line (issue #35): what the sandbox and the votes already know about the final answer.

The engine carries a public-test score (Test, Revise, ScEnsemble's execution judge) and an ensemble's candidate
agreement from the stage that established them to `ExecutionReport.evidence`, while the answer is still the one
they were established for; the feedback renders them on one line. Real operators, sandbox and vote on the
scripted executor double; sampled draws are told apart by their seeds as in test_engine_until.py.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.actions import AddStage
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint
from flowsteer_mcp.canvas.execution import AnswerEvidence, ExecutionReport
from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.feedback import render_evidence, render_execution
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.engine.node_call import derived_seed
from flowsteer_mcp.engine.state import FlowState
from operators.backends.base import ChatRequest, draw_seed
from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorOutput, Role
from operators.library.ensemble import CandidateAgreement, EnsembleOutput
from operators.registry import default_registry

CODE_TASK = TaskSpec(
    problem="Write add(a, b) that returns the sum of a and b.",
    task_type="code",
    entry_point="add",
    public_tests="assert add(1, 2) == 3\nassert add(0, 0) == 0",
)
MATH_TASK = TaskSpec(problem="What is 6 * 7?", task_type="math")
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"  # passes add(0, 0) == 0 only
# Three programs that differ as text but behave alike, so only execution can tell that they agree.
RIGHT = [
    "```python\ndef add(a, b):\n    return a + b\n```",
    "```python\ndef add(a, b):\n    return b + a\n```",
    "```python\ndef add(a, b):\n    return sum((a, b))\n```",
]


def sampled_member(request: ChatRequest) -> int | None:
    """Which sampled draw of node_1 (0, 1, 2 for draws 2..4) a request is; None for the greedy draw."""
    if request.draw is None or request.draw.greedy:
        return None
    first = derived_seed(0, "node_1", 1)  # draws 2..k share one `n` request seeded by draw 2
    return next((i for i in range(8) if request.draw.seed == draw_seed(first, i)), None)


async def run(backend: ScriptedBackend, dsl: str, task: TaskSpec, **options: object) -> ExecutionReport:
    registry = default_registry()
    graph = import_dsl(dsl, CanvasRules(registry, CanvasOptions(finish="relaxed")))
    engine = WorkflowEngine(registry, backend, sampled_reasks=0, max_reasks=0, runtime_options=dict(options))
    return await engine.run(graph, task)


def three_of_four_programs(request: ChatRequest) -> str:
    if request.operator == "ScEnsemble":
        return "<inputs>\n</inputs>"  # no extra inputs: the public-test inputs decide the behaviour groups
    member = sampled_member(request)
    return [*RIGHT, WRONG][0 if member is None else member + 1]  # greedy, then draws 2, 3 and 4


def three_of_four_answers(request: ChatRequest) -> str:
    wrong = sampled_member(request) == 2
    return f"6 * 7 = 42. The answer is \\boxed{{{41 if wrong else 42}}}."


async def test_code_candidates_report_the_public_tests_passed_and_the_behaviour_group() -> None:
    report = await run(ScriptedBackend(rules=[three_of_four_programs]), "Programmer{4} -> ScEnsemble", CODE_TASK)
    assert report.status == "ok" and "return a + b" in (report.output or ""), report.output
    assert report.evidence == AnswerEvidence(
        public_tests_passed=2, public_tests_total=2, agreeing=3, candidates=4, agreement="behaviour"
    )
    assert "[Evidence]: the answer passes 2/2 public tests; 3 of 4 candidates behave like this program" in (
        render_execution(report)
    )


async def test_math_candidates_report_the_vote_share_of_the_answer() -> None:
    report = await run(ScriptedBackend(rules=[three_of_four_answers]), "Custom{4} -> ScEnsemble", MATH_TASK)
    assert report.status == "ok" and "42" in (report.output or "")
    assert report.evidence == AnswerEvidence(agreeing=3, candidates=4, agreement="answer")
    assert "[Evidence]: 3 of 4 candidates give this answer" in render_execution(report)


async def test_a_single_greedy_call_without_tests_says_nothing() -> None:
    answer = ScriptedBackend(rules=[lambda request: "The answer is \\boxed{42}."])
    program = ScriptedBackend(rules=[lambda request: RIGHT[0]])
    for report in (await run(answer, "Custom", MATH_TASK), await run(program, "Programmer", CODE_TASK)):
        assert report.status == "ok" and report.evidence is None
        assert not any(line.startswith("[Evidence]") for line in render_execution(report))


async def test_a_check_and_a_kept_revision_report_their_public_test_scores() -> None:
    passing = await run(ScriptedBackend(rules=[lambda request: RIGHT[0]]), "Programmer -> Test", CODE_TASK)
    assert passing.evidence == AnswerEvidence(public_tests_passed=2, public_tests_total=2)

    def wrong_then_worse(request: ChatRequest) -> str:
        return WRONG if request.operator == "Programmer" else "```python\ndef add(a, b):\n    return a - b + 1\n```"

    backend = ScriptedBackend(rules=[wrong_then_worse])
    failing = await run(backend, "Programmer -> Test", CODE_TASK, test_max_repairs=0)
    assert failing.evidence == AnswerEvidence(public_tests_passed=None, public_tests_total=2)
    assert "[Evidence]: the answer fails at least one of 2 public tests" in render_execution(failing)
    revised = await run(backend, "Programmer -> Test -> Revise", CODE_TASK, test_max_repairs=0)
    assert (revised.code or "").rstrip().endswith("return a - b")  # the worse revision was rejected
    assert revised.evidence == AnswerEvidence(public_tests_passed=1, public_tests_total=2)  # Revise counted


async def test_a_stopping_rule_that_ran_the_tests_reports_the_greedy_programs_score() -> None:
    backend = ScriptedBackend(rules=[lambda request: RIGHT[0]])
    report = await run(backend, "Programmer{4|tests} -> ScEnsemble", CODE_TASK)
    assert report.llm_calls == 1  # the greedy program passed: one draw, one candidate
    assert report.evidence == AnswerEvidence(public_tests_passed=2, public_tests_total=2)
    assert "[Evidence]: the answer passes 2/2 public tests" in render_execution(report)


async def test_the_line_reaches_the_policy_observation() -> None:
    registry = default_registry()
    rules = CanvasRules(registry, CanvasOptions(finish="relaxed"))
    state = CanvasState(task=MATH_TASK, options=CanvasOptions(finish="relaxed"), graph=import_dsl("Custom{4}", rules))
    engine = WorkflowEngine(registry, ScriptedBackend(rules=[three_of_four_answers]), sampled_reasks=0)
    canvas = Canvas(state, registry, engine)
    step = await canvas.edit(AddStage(stage=OperatorBlueprint(operator="ScEnsemble", prompt="Keep the majority.")))
    assert "[Evidence]: 3 of 4 candidates give this answer" in step.feedback
    observation = ObservationBuilder.default().turn(MATH_TASK, canvas.view(), step.feedback)
    assert "[Evidence]: 3 of 4 candidates give this answer" in observation


def test_evidence_holds_while_the_answer_is_unchanged() -> None:
    chosen = "6 * 7 = 42. The answer is \\boxed{42}."
    vote = EnsembleOutput(text=chosen, index=0, votes=[3, 3, 1, 3], decided_by="vote")
    vote.agreement = CandidateAgreement(agreeing=3, candidates=4, basis="answer")
    state = FlowState.from_task(MATH_TASK).apply(Role.SOLUTION, vote, uses_candidates=True)
    expected = AnswerEvidence(agreeing=3, candidates=4, agreement="answer")
    assert state.answer_evidence() == expected
    formatted = state.apply(Role.SOLUTION, OperatorOutput(text="42"))  # a Format keeps the answer
    assert formatted.answer_evidence() == expected
    revised = state.apply(Role.SOLUTION, OperatorOutput(text="The answer is \\boxed{41}."))
    assert revised.answer_evidence() is None


def test_the_line_words_each_part_and_omits_what_was_not_established() -> None:
    assert render_evidence(None) == []
    assert render_evidence(AnswerEvidence(agreeing=1, candidates=1, agreement="answer")) == []
    assert render_evidence(AnswerEvidence(public_tests_passed=1, public_tests_total=3)) == [
        "[Evidence]: the answer passes 1/3 public tests"
    ]
    assert render_evidence(AnswerEvidence(agreeing=2, candidates=5, agreement="program")) == [
        "[Evidence]: 2 of 5 candidates are this same program"
    ]
    no_answer = ExecutionReport(status="failed", error="no solution", evidence=AnswerEvidence(public_tests_total=2))
    assert not any(line.startswith("[Evidence]") for line in render_execution(no_answer))


async def test_mcp_clients_get_the_evidence_in_the_structured_execution() -> None:
    """The same facts, typed: `execution.evidence` of an editing tool's structured result."""
    from mcp import Client

    from flowsteer_mcp.server import ServerSettings, build_server
    from flowsteer_mcp.store.memory import MemoryStore
    from tests.support.servers import ToolCaller

    registry = default_registry()
    engine = WorkflowEngine(registry, ScriptedBackend(rules=[three_of_four_answers]), sampled_reasks=0)
    server = build_server(ServerSettings(), registry=registry, runner=engine, store=MemoryStore())
    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create(MATH_TASK.problem, task_type="math", options={"finish": "relaxed"})
        await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom", samples=4)
        step = await tools.ok("add_operator", workflow_id=workflow_id, operator="ScEnsemble")
    assert step["execution"]["evidence"] == {
        "public_tests_total": None,
        "public_tests_passed": None,
        "agreeing": 3,
        "candidates": 4,
        "agreement": "answer",
    }
    assert "[Evidence]: 3 of 4 candidates give this answer" in step["feedback"]
