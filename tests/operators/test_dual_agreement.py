"""CodeT, the dual-execution-agreement peer: strict test parsing, consensus scoring, the public-test filter first,
the fallbacks, and the `codet8` library workflow through the engine (real sandbox)."""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.library import library_workflow
from flowsteer_mcp.engine import WorkflowEngine
from operators.backends.base import GREEDY, BackendError, ChatRequest
from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library.code_selection import capture_behaviour
from operators.library.dual_agreement import (
    MAX_GENERATED_TESTS,
    CodeT,
    CodeTOutput,
    ConsensusSet,
    GeneratedTest,
    best_consensus,
    consensus_sets,
    judge_by_dual_agreement,
    parse_generated_tests,
)
from operators.library.dual_agreement import DualAgreement as Verdict
from operators.library.ensemble import EnsembleOutput
from operators.registry import default_registry

ADD_RIGHT = "def add(a, b):\n    return a + b"
ADD_RIGHT_TOO = "def add(a, b):\n    total = b\n    total += a\n    return total"
ADD_WRONG = "def add(a, b):\n    return a - b"
ADD_TIMES = "def add(a, b):\n    return a * b"
ADD_TESTS = "assert add(1, 2) == 3\nassert add(0, 0) == 0"
GENERATED = "<tests>\nassert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(5, 0) == 5\n</tests>"
INSTRUCTION = "Write varied tests with exact results (zebra-instruction)."


def _tests(*lines: str) -> list[GeneratedTest]:
    return parse_generated_tests("\n".join(lines), "add")


async def _judge(
    programs: list[str | None], tests: list[GeneratedTest], public_tests: str | None = None
) -> tuple[Verdict, list[int]]:
    calls: list[int] = []

    async def write_tests() -> list[GeneratedTest]:
        calls.append(1)
        return tests

    judged = await judge_by_dual_agreement(
        programs, entry_point="add", public_tests=public_tests, timeout_s=10, write_tests=write_tests
    )
    assert isinstance(judged, Verdict)
    return judged, calls


def _inputs(candidates: list[str], **extra: object) -> OperatorInput:
    fields = {
        "problem": "Write add(a, b) returning the sum.",
        "task_type": "code",
        "entry_point": "add",
        "public_tests": "assert add(0, 0) == 0",
        "instruction": INSTRUCTION,
        "candidates": candidates,
    }
    return OperatorInput.model_validate({**fields, **extra})


# ----------------------------------------------------------------------------------------------- parsing


def test_only_literal_assertions_on_the_entry_point_are_kept() -> None:
    reply = (
        "Here are tests:\n```python\n"
        "assert add(1, 2) == 3\n"
        "assert add(1, 2) == 3\n"  # a duplicate
        "assert add(-1, [2, 'x']) == {'a': (1, None)}  # a comment is fine\n"
        "assert add(x, 1) == 2\n"  # a name
        "assert add(__import__('os').system('id'), 1) == 0\n"  # a call: never evaluated
        "assert add(1, 2) == len('abc')\n"  # a computed expected value
        "assert sub(1, 2) == -1\n"  # not the entry point
        "assert add(1, b=2) == 3\n"  # keywords
        "assert add(*[1, 2]) == 3\n"  # a starred argument
        "assert add(1, 2) == 3, 'sum'\n"  # a message
        "assert add(1, 2) != 4\n"  # another comparison
        "assert add(1, 2) == 3 == 3\n"  # a chained comparison
        "assert add(1e999, 0) == 1e999\n"  # inf does not survive a repr round trip
        "assert add(1, 2) == 3; import os\n"  # two statements
        f"assert add({'9' * 400}, 1) == 1\n"  # an argument tuple over the size bound
        f"assert add(1, 1) == [{'1, ' * 400}1]\n"  # a line over the size bound
        "add(2, 2) == 4\n"  # not an assertion
        "```\nassert add(0, 5) == 5"
    )
    assert parse_generated_tests(reply, "add") == [
        GeneratedTest(args="(1, 2)", expected="3"),
        GeneratedTest(args="(-1, [2, 'x'])", expected="{'a': (1, None)}"),
        GeneratedTest(args="(0, 5)", expected="5"),
    ]


def test_a_tests_block_bounds_what_is_read_and_the_count_is_capped() -> None:
    reply = "assert add(9, 9) == 18\n<tests>\nassert add(1, 1) == 2\n</tests>\nassert add(8, 8) == 16"
    assert parse_generated_tests(reply, "add") == [GeneratedTest(args="(1, 1)", expected="2")]
    many = "\n".join(f"assert add({i}, 0) == {i}" for i in range(20))
    assert len(parse_generated_tests(many, "add")) == MAX_GENERATED_TESTS
    assert parse_generated_tests("no tests here", "add") == []


def test_a_kept_test_is_rebuilt_from_its_literals() -> None:
    (single, pair, none) = parse_generated_tests(
        "assert f([3, 1]) == [1, 3]\nassert f('a', 2) == 'aa'\nassert f() == None", "f"
    )
    assert single.assertion("f") == "assert f([3, 1],) == [1, 3]"
    assert pair.assertion("f") == "assert f('a', 2) == 'aa'"
    assert none.assertion("f") == "assert f() == None"


# ----------------------------------------------------------------------------------------------- scoring


def test_candidates_passing_the_same_tests_form_one_set_scored_candidates_times_tests() -> None:
    sets = consensus_sets({0: [2], 1: [0, 1, 2], 2: frozenset({2}), 3: [2, 1, 0], 4: []})
    assert sets == [
        ConsensusSet(candidates=(0, 2), tests=(2,)),
        ConsensusSet(candidates=(1, 3), tests=(0, 1, 2)),
        ConsensusSet(candidates=(4,), tests=()),
    ]
    assert [found.score for found in sets] == [2, 6, 0]
    assert best_consensus(sets).candidates == (1, 3)


def test_the_product_rule_prefers_fewer_candidates_passing_more_tests() -> None:
    many_weak = ConsensusSet(candidates=(0, 1, 2), tests=(0, 1))  # 3 x 2 = 6
    few_strong = ConsensusSet(candidates=(3, 4), tests=(0, 1, 2, 3))  # 2 x 4 = 8
    assert best_consensus([many_weak, few_strong]) is few_strong
    late = ConsensusSet(candidates=(5, 6), tests=(0, 1, 2))  # 6 as well: the earliest candidate's set wins
    assert best_consensus([late, many_weak]) is many_weak


async def test_the_larger_consensus_set_wins_in_the_sandbox() -> None:
    programs: list[str | None] = [ADD_WRONG, ADD_TIMES, ADD_RIGHT, None, ADD_RIGHT_TOO, ADD_WRONG]
    tests = parse_generated_tests(GENERATED, "add")
    judged, calls = await _judge(programs, tests)
    assert calls == [1]
    # add(1,2)==3, add(2,2)==4, add(5,0)==5: a+b passes all three, a-b only the last, a*b only the second.
    assert judged.index == 2
    assert judged.group_sizes == [2, 1, 2, 0, 2, 2]
    assert judged.scores == [2, 1, 6, 0, 6, 2]
    assert judged.tests == ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(5, 0) == 5"]
    assert judged.note == "codet: 2/6 candidates agree on 3/3 generated tests (score 6); public tests: none"


async def test_fewer_candidates_passing_more_generated_tests_beat_a_larger_set() -> None:
    identity = [
        "def add(a, b):\n    return a",
        "def add(a, b):\n    return a + 0",
        "def add(a, b):\n    x = a\n    return x",
    ]
    summing = [ADD_RIGHT, ADD_RIGHT_TOO]
    tests = _tests("assert add(1, 0) == 1", "assert add(4, 0) == 4", "assert add(1, 2) == 3", "assert add(0, 7) == 7")
    judged, _ = await _judge([*identity, *summing], tests)
    assert judged.scores == [6, 6, 6, 8, 8]  # identity: 3 candidates x 2 tests; sum: 2 candidates x 4 tests
    assert judged.index == 3
    assert judged.note == "codet: 2/5 candidates agree on 4/4 generated tests (score 8); public tests: none"


async def test_public_tests_filter_first_so_a_wrong_majority_the_tests_agree_with_cannot_win() -> None:
    # The executor's expected values are wrong (they describe subtraction), as are three of the programs.
    wrong_tests = _tests("assert add(5, 2) == 3", "assert add(2, 2) == 0")
    programs: list[str | None] = [ADD_WRONG, ADD_WRONG + "  # again", ADD_RIGHT, ADD_WRONG + "\n", ADD_RIGHT_TOO]
    judged, calls = await _judge(programs, wrong_tests, public_tests=ADD_TESTS)
    assert calls == [1]
    assert judged.index == 2 and judged.group_sizes == [0, 0, 2, 0, 2]
    assert judged.note == (
        "codet: no candidate passes any of the 2 generated tests, so the earliest is kept; public tests: 2/5 pass 2/2"
    )


async def test_unusable_generated_tests_keep_the_earliest_of_the_public_test_best() -> None:
    judged, calls = await _judge([ADD_WRONG, ADD_TIMES, ADD_RIGHT], [], public_tests="assert add(0, 0) == 0")
    assert calls == [1] and judged.index == 0 and not judged.tests
    assert judged.group_sizes == [3, 3, 3] and judged.scores == [0, 0, 0]
    assert judged.note == (
        "codet: no usable generated test, so the earliest of the public-test best is kept; public tests: 3/3 pass 1/1"
    )


async def test_one_best_program_needs_no_tests_written() -> None:
    judged, calls = await _judge([ADD_WRONG, ADD_RIGHT, ADD_RIGHT], [], public_tests=ADD_TESTS)
    assert calls == [] and judged.index == 1 and judged.group_sizes == [0, 2, 2]
    assert judged.note == "codet: one program left in 2 candidate(s), no tests written; public tests: 2/3 pass 2/2"


async def test_the_driver_reports_pass_or_fail_per_test_within_a_call_limit() -> None:
    program = (
        "def add(a, b):\n"
        "    if a < 0:\n        raise ValueError('negative')\n"
        "    if a == 3:\n        while True:\n            pass\n"
        "    print('noise')\n"
        "    return a + b\n"
    )
    inputs, expected = ["(1, 2)", "(1, 1)", "(-1, 0)", "(3, 0)", "(2.0, 0)"], ["3", "3", "-1", "3", "2"]
    outcomes = await capture_behaviour(program, "add", inputs, 10.0, expected=expected)
    assert outcomes == ("pass", "fail", "raises ValueError", "timeout", "pass")
    with pytest.raises(ValueError, match="2 expected values for 1 inputs"):
        await capture_behaviour(program, "add", ["(1, 2)"], 10.0, expected=["3", "3"])


# ----------------------------------------------------------------------------------------------- the operator


async def test_the_operator_asks_once_and_returns_the_code_pick_shape() -> None:
    backend = ScriptedBackend([GENERATED], name="codet-pick")
    runtime = OperatorRuntime(llm=backend, max_reasks=2)
    candidates = [ADD_WRONG, f"```python\n{ADD_RIGHT}\n```", ADD_TIMES, ADD_RIGHT_TOO]
    output = await CodeT().run(_inputs(candidates), runtime)
    assert isinstance(output, CodeTOutput) and isinstance(output, EnsembleOutput)
    assert output.ok and output.decided_by == "execution"
    assert (output.index, output.text, output.code) == (1, candidates[1], ADD_RIGHT)
    assert output.votes == [1, 2, 1, 2] and output.scores == [1, 6, 1, 6]
    assert output.note == "codet: 2/4 candidates agree on 3/3 generated tests (score 6); public tests: 4/4 pass 1/1"
    (request,) = backend.requests
    prompt = backend.prompts[0]
    assert "Write add(a, b) returning the sum." in prompt and INSTRUCTION in prompt and "<tests>" in prompt
    assert "assert add(0, 0) == 0" in prompt  # the example tests are shown
    assert request.operator == "CodeT" and request.max_tokens == CodeT.spec.reply_tokens


async def test_a_reply_without_usable_tests_falls_back_without_a_reask() -> None:
    backend = ScriptedBackend(["The programs look fine to me.", GENERATED], name="codet-junk")
    output = await CodeT().run(_inputs([ADD_WRONG, ADD_RIGHT]), OperatorRuntime(llm=backend, max_reasks=2))
    assert output.ok and output.index == 0 and output.code == ADD_WRONG
    assert output.note is not None and "no usable generated test" in output.note
    assert len(backend.requests) == 1


async def test_a_failed_executor_call_is_an_error_value() -> None:
    backend = ScriptedBackend(default=BackendError("HTTP 503 after 3 retries", retryable=True), name="codet-down")
    output = await CodeT().run(_inputs([ADD_WRONG, ADD_RIGHT]), OperatorRuntime(llm=backend))
    assert not output.ok and output.text == ""
    assert output.error is not None and "CodeT" in output.error and "HTTP 503" in output.error


@pytest.mark.parametrize(
    ("inputs", "error"),
    [
        (_inputs(["", " "]), "CodeT: no candidates"),
        (_inputs(["7", "8"], task_type="math"), "this is a math task (use ScEnsemble)"),
        (_inputs([ADD_WRONG, ADD_RIGHT], entry_point=None), "names no entry point"),
    ],
)
async def test_what_codet_cannot_judge_is_an_error_without_a_call(inputs: OperatorInput, error: str) -> None:
    backend = ScriptedBackend(name="codet-refuses")
    output = await CodeT().run(inputs, OperatorRuntime(llm=backend))
    assert not output.ok and output.error is not None and error in output.error
    assert backend.requests == []


async def test_a_single_candidate_or_no_program_keeps_the_earliest_without_a_call() -> None:
    backend = ScriptedBackend(name="codet-single")
    single = await CodeT().run(_inputs(["", ADD_RIGHT]), OperatorRuntime(llm=backend))
    assert (single.index, single.code, single.decided_by, single.votes) == (1, ADD_RIGHT, "single", [0, 1])
    prose = await CodeT().run(_inputs(["It adds.", "Just add them."]), OperatorRuntime(llm=backend))
    assert prose.ok and (prose.index, prose.code, prose.decided_by) == (0, None, None)
    assert prose.note == "codet could not judge: no candidate defines `add`"
    assert backend.requests == []


def test_codet_is_registered_but_not_advertised_to_policies() -> None:
    registry = default_registry()
    assert registry.implementation("codet") is CodeT
    assert "CodeT" not in registry.names() and "CodeT" in registry.names(include_legacy=True)
    assert registry.spec("CodeT").needs_candidates


# ----------------------------------------------------------------------------------------------- the workflow


async def test_the_codet8_library_workflow_runs_through_the_engine() -> None:
    sampled = iter([ADD_TIMES, ADD_RIGHT, ADD_WRONG, ADD_RIGHT_TOO, ADD_TIMES, ADD_RIGHT, ADD_RIGHT_TOO])

    def executor(request: ChatRequest) -> str | None:
        if request.operator == "CodeT":
            return GENERATED
        if request.operator == "Programmer":
            program = ADD_WRONG if request.draw == GREEDY else next(sampled)
            return f"```python\n{program}\n```"
        return None

    backend = ScriptedBackend(rules=[executor], name="codet8")
    engine = WorkflowEngine(default_registry(), backend, call_timeout_s=60, run_timeout_s=120)
    task = TaskSpec(
        problem="Add two numbers.", task_type="code", entry_point="add", public_tests="assert add(0, 0) == 0"
    )
    workflow = library_workflow("code", "codet8")
    assert workflow.dsl() == "Programmer{8} -> CodeT"
    report = await engine.run(workflow.graph(), task)

    assert report.status == "ok"
    assert report.output == ADD_RIGHT  # the earliest program of the best-scoring set
    row = next(row for row in report.trace if row.node_id == "node_2")
    assert row.note == "codet: 4/8 candidates agree on 3/3 generated tests (score 12); public tests: 8/8 pass 1/1"
    assert [request.operator for request in backend.requests].count("CodeT") == 1
