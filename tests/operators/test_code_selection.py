"""Execution as the judge for code candidates: input parsing, behaviour capture, grouping (real sandbox)."""

from __future__ import annotations

from flowsteer_mcp.canvas.model import OperatorNode, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.engine import WorkflowEngine
from operators.backends.base import ChatRequest
from operators.backends.scripted import ScriptedBackend
from operators.library.code_selection import (
    MAX_INPUT_CHARS,
    MAX_PROPOSED_INPUTS,
    capture_behaviour,
    entry_arity,
    judge_code_candidates,
    parse_proposed_inputs,
    public_test_inputs,
)
from operators.registry import default_registry

ADD_RIGHT = "def add(a, b):\n    return a + b"
ADD_RIGHT_TOO = "def add(a, b):\n    total = b\n    total += a\n    return total"
ADD_WRONG = "def add(a, b):\n    return a - b"
ADD_TESTS = "assert add(1, 2) == 3\nassert add(0, 0) == 0"


def test_proposed_inputs_keep_literal_tuples_and_drop_junk() -> None:
    reply = (
        "Here you go:\n<inputs>\n```python\n(1, 2)\n(1, 2)\n"  # a duplicate
        "__import__('os').system('id')\n"  # a call: never evaluated
        "(x, 1)\n"  # a name
        "(1e999, 1)\n"  # inf does not survive a repr round trip
        "(1, 2, 3)\n"  # wrong arity
        "'just a string'\n"  # one value for a two-argument function
        f"({'9' * MAX_INPUT_CHARS}, 1)\n"  # too long
        "([1, 2], {'a': -3})\n"
        "```\n</inputs>\nafter the block: (5, 6)"
    )
    assert parse_proposed_inputs(reply, arity=(2, 2)) == ["(1, 2)", "([1, 2], {'a': -3})"]


def test_proposed_inputs_are_bounded_and_bare_values_fill_a_single_parameter() -> None:
    reply = "\n".join(f"[{i}]" for i in range(20))
    parsed = parse_proposed_inputs(reply, arity=(1, 1))
    assert parsed == [f"([{i}],)" for i in range(MAX_PROPOSED_INPUTS)]
    assert parse_proposed_inputs("[1]\n", arity=None) == []  # arity unknown: only explicit tuples
    assert parse_proposed_inputs("no inputs at all", arity=(1, 1)) == []


def test_entry_arity_reads_required_and_maximum_positional_parameters() -> None:
    assert entry_arity("def f(a, b=1):\n    pass", "f") == (1, 2)
    assert entry_arity("def f(*xs):\n    pass", "f") == (0, None)
    assert entry_arity("def g():\n    pass", "f") is None
    assert entry_arity("def f(:", "f") is None


def test_public_test_inputs_take_literal_calls_of_the_entry_point_only() -> None:
    tests = (
        "import math\nassert add(1, 2) == 3\nassert add(1, 2) == 3\nassert add(len('x'), 1) == 2\n"
        "assert add(*[1, 2]) == 3\ndef check(candidate):\n    assert candidate([1], 'a') == 0\n"
    )
    assert public_test_inputs(tests, "add") == ["(1, 2)", "([1], 'a')"]
    assert public_test_inputs("def broken(:", "add") == []


async def test_behaviour_capture_canonicalises_results_and_contains_the_candidate() -> None:
    program = (
        "print('loading')\n"
        "def f(x):\n"
        "    print('noise')\n"
        "    if x < 0:\n        raise ValueError('negative')\n"
        "    if x == 3:\n        while True:\n            pass\n"
        "    return {'b': x * 1.0, 'a': {x}}\n"
        "if __name__ == '__main__':\n    input()\n"  # would fail on EOF if run as __main__
    )
    captured = await capture_behaviour(program, "f", ["(1,)", "(-1,)", "(3,)", "(2,)"], 10.0)
    assert captured == ("= {'a':set{1},'b':1}", "raises ValueError", "timeout", "= {'a':set{2},'b':2}")
    assert await capture_behaviour("def g():\n    pass", "f", ["(1,)"], 10.0) == ("load-error KeyError",)


async def test_a_wrong_majority_loses_to_a_minority_passing_more_public_tests() -> None:
    proposals: list[int] = []

    async def propose() -> list[str]:
        proposals.append(1)
        return []

    judged = await judge_code_candidates(
        [ADD_WRONG, ADD_WRONG, ADD_WRONG, ADD_RIGHT],
        entry_point="add",
        public_tests=ADD_TESTS,
        timeout_s=10,
        propose=propose,
    )
    assert judged is not None and judged.index == 3
    assert judged.note == "execution: 1/4 candidates pass 2/2 public tests"
    assert judged.group_sizes == [0, 0, 0, 1]
    assert proposals == []  # one best candidate: nothing to group, no executor call


async def test_among_equal_scores_the_largest_behaviour_group_wins() -> None:
    # All pass the only public test (add(0, 0) == 0); proposed inputs separate the behaviours.
    odd = "def add(a, b):\n    return a * b"

    async def propose() -> list[str]:
        return ["(2, 3)", "(0, 0)"]  # (0, 0) is already a public input: not run twice

    judged = await judge_code_candidates(
        [odd, ADD_RIGHT, None, ADD_RIGHT_TOO],
        entry_point="add",
        public_tests="assert add(0, 0) == 0",
        timeout_s=10,
        propose=propose,
    )
    assert judged is not None and judged.index == 1
    assert judged.group_sizes == [1, 2, 0, 2]
    assert judged.note == (
        "execution: 3/4 candidates pass 1/1 public tests; largest behaviour group 2 of 3 (on 2 inputs, 1 proposed)"
    )


async def test_equal_groups_go_to_the_earliest_candidate_and_identical_programs_skip_the_proposal() -> None:
    async def propose() -> list[str]:
        return ["(2, 3)"]

    tie = await judge_code_candidates(
        ["def add(a, b):\n    return a * b", ADD_RIGHT],
        entry_point="add",
        public_tests="assert add(0, 0) == 0",
        timeout_s=10,
        propose=propose,
    )
    assert tie is not None and (tie.index, tie.group_sizes) == (0, [1, 1])

    async def must_not_propose() -> list[str]:
        raise AssertionError("identical programs need no proposed inputs")

    agree = await judge_code_candidates(
        [ADD_RIGHT, ADD_RIGHT],
        entry_point="add",
        public_tests=ADD_TESTS,
        timeout_s=10,
        propose=must_not_propose,
    )
    assert agree is not None and (agree.index, agree.group_sizes) == (0, [2, 2])


async def test_without_tests_or_inputs_execution_gives_no_verdict() -> None:
    async def propose() -> list[str]:
        return []

    judged = await judge_code_candidates(
        [ADD_WRONG, ADD_RIGHT], entry_point="add", public_tests=None, timeout_s=10, propose=propose
    )
    assert judged is None
    assert await judge_code_candidates([None, None], entry_point="add", public_tests=ADD_TESTS, timeout_s=10) is None


async def test_engine_programmer_samples_then_sc_ensemble_picks_the_passing_program() -> None:
    # Draws in order: the greedy draw and the first sample are wrong, the last two are right (and differ).
    programs = iter([ADD_WRONG, ADD_WRONG, ADD_RIGHT, ADD_RIGHT_TOO])

    def executor(request: ChatRequest) -> str | None:
        if request.operator == "Programmer":
            return f"```python\n{next(programs)}\n```"
        if request.operator == "ScEnsemble":
            return "<inputs>\n(5, 7)\n(-2, 2)\n</inputs>"
        return None

    backend = ScriptedBackend(rules=[executor])
    engine = WorkflowEngine(default_registry(), backend, call_timeout_s=60, run_timeout_s=120)
    graph = WorkflowGraph(
        stages=[
            OperatorNode(id="node_1", operator="Programmer", samples=4),
            OperatorNode(id="node_2", operator="ScEnsemble"),
        ]
    )
    task = TaskSpec(problem="Add two numbers.", task_type="code", entry_point="add", public_tests=ADD_TESTS)
    report = await engine.run(graph, task)

    assert report.status == "ok"
    assert report.output == ADD_RIGHT  # the earliest program of the largest group among the best scorers
    ensemble_row = next(row for row in report.trace if row.node_id == "node_2")
    assert ensemble_row.note == (
        "execution: 2/4 candidates pass 2/2 public tests; largest behaviour group 2 of 2 (on 4 inputs, 2 proposed)"
    )
    ensemble_prompts = [r.messages[-1].content for r in backend.requests if r.operator == "ScEnsemble"]
    assert len(ensemble_prompts) == 1 and "<choice>" not in ensemble_prompts[0]
