"""ScEnsemble (execution judges code, a vote judges answers, the LLM breaks ties) and Aggregate."""

from __future__ import annotations

import pytest

from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import Aggregate, ScEnsemble, code_selection
from operators.library.ensemble import vote_by_answer
from operators.sandbox import SandboxRefusedError


async def test_vote_compares_answers_the_way_the_grader_does() -> None:
    winner, votes, _ = await vote_by_answer(["12", " 12.0 ", "$12", "13", "1,2"], "math")
    assert winner == 0 and votes[:4] == [3, 3, 3, 1]
    assert (await vote_by_answer(["Paris", "paris ", "London"], "qa"))[0] == 0
    assert (await vote_by_answer(["-5", "5", "5"], "math"))[0] == 1  # signs are never dropped
    assert (await vote_by_answer(["0.75", "3/4", "\\frac{3}{4}", "0.7"], "math"))[0] == 0
    assert await vote_by_answer(["Rome", "Oslo"], "qa") == (None, [1, 1], [0, 1])
    assert await vote_by_answer(["Rome", "Oslo", "oslo", "rome.", "Bern"], "qa") == (None, [2, 2, 2, 2, 1], [0, 1])


async def test_clear_majority_needs_no_llm_call() -> None:
    backend = ScriptedBackend(name="never-called")
    inputs = OperatorInput(problem="?", candidates=["The answer is \\boxed{18}", "18", "18.0", "20"], instruction="x")
    output = await ScEnsemble().run(inputs, OperatorRuntime(llm=backend))
    assert output.ok
    assert (output.index, output.text, output.decided_by) == (0, "The answer is \\boxed{18}", "vote")
    assert output.votes == [3, 3, 3, 1]
    assert backend.requests == []


async def test_answer_tie_keeps_the_earliest_leading_answer_without_a_call() -> None:
    # A sampled node's first draw is greedy, so the earliest answer is the one answering alone would give.
    backend = ScriptedBackend(name="never-called")
    inputs = OperatorInput(problem="?", task_type="math", candidates=["11", "\\boxed{9}", "7", "9.0", "7"])
    output = await ScEnsemble().run(inputs, OperatorRuntime(llm=backend))
    assert (output.index, output.decided_by, output.votes) == (1, "vote", [1, 2, 2, 2, 2])
    assert output.note is not None and "earliest of the leading answers" in output.note
    all_different = OperatorInput(problem="?", task_type="qa", candidates=["Rome", "Oslo", "Bern"])
    output = await ScEnsemble().run(all_different, OperatorRuntime(llm=backend))
    assert (output.index, output.text) == (0, "Rome")
    assert backend.requests == []


async def test_code_tie_without_execution_is_broken_by_the_llm_among_the_tied_only() -> None:
    backend = ScriptedBackend(["<reason>second is right</reason><choice>2</choice>"])
    inputs = OperatorInput(
        problem="?", task_type="code", candidates=["7", "9", "7", "9", "11"], instruction="Prefer exact values."
    )
    output = await ScEnsemble().run(inputs, OperatorRuntime(llm=backend))
    assert (output.index, output.text, output.decided_by) == (1, "9", "llm")
    prompt = backend.prompts[0]
    assert "Candidate 1:\n7" in prompt and "Candidate 2:\n9" in prompt
    assert "11" not in prompt.split("## Candidates")[1].split("##")[0]
    assert "Prefer exact values." in prompt


async def test_choice_from_stray_letter_is_never_guessed() -> None:
    backend = ScriptedBackend(["I would pick B.", "<choice>B</choice>", "<choice>5</choice>", "<choice>1</choice>"])
    runtime = OperatorRuntime(llm=backend, max_reasks=3)
    code = OperatorInput(problem="?", task_type="code", candidates=["x = 1", "y = 2"])
    output = await ScEnsemble().run(code, runtime)
    assert (output.ok, output.index) == (True, 0)
    errors = [request.messages[-1].content for request in backend.requests[1:]]
    assert "<choice> is missing" in errors[0]
    assert "expected a candidate number" in errors[1]
    assert "from 1 to 2" in errors[2]


async def test_single_candidate_is_returned_directly() -> None:
    backend = ScriptedBackend(name="never-called")
    output = await ScEnsemble().run(OperatorInput(problem="?", candidates=["", "only"]), OperatorRuntime(llm=backend))
    assert (output.index, output.text, output.decided_by) == (1, "only", "single")
    assert backend.requests == []


async def test_aggregate_unanimous_candidates_need_no_call() -> None:
    backend = ScriptedBackend(name="never-called")
    output = await Aggregate().run(OperatorInput(problem="?", candidates=["42", "42.0"]), OperatorRuntime(llm=backend))
    assert (output.text, output.decided_by) == ("42", "unanimous")
    assert backend.requests == []


async def test_aggregate_combines_with_the_llm() -> None:
    backend = ScriptedBackend(["<reason>merged parts</reason><answer>area 16, perimeter 16</answer>"])
    inputs = OperatorInput(
        problem="Square of side 4: area and perimeter?",
        candidates=["area 16", "perimeter 16"],
        guidance=["Sub-problems:\n1. area\n2. perimeter"],
    )
    output = await Aggregate().run(inputs, OperatorRuntime(llm=backend))
    assert (output.text, output.reason, output.decided_by) == ("area 16, perimeter 16", "merged parts", "llm")
    prompt = backend.prompts[0]
    assert "Candidate 1:\narea 16" in prompt and "Candidate 2:\nperimeter 16" in prompt
    assert "Sub-problems" in prompt


async def test_aggregate_with_guidance_calls_the_llm_even_when_candidates_agree() -> None:
    backend = ScriptedBackend(["<answer>5 and 5</answer>"])
    inputs = OperatorInput(problem="?", candidates=["5", "5"], guidance=["two parts"])
    output = await Aggregate().run(inputs, OperatorRuntime(llm=backend))
    assert output.text == "5 and 5" and len(backend.requests) == 1


async def test_aggregate_code_task_returns_a_program() -> None:
    backend = ScriptedBackend(["```python\ndef f():\n    return 1\n```"])
    inputs = OperatorInput(
        problem="?", task_type="code", entry_point="f", candidates=["def f(): return 1", "def f(): return 2"]
    )
    output = await Aggregate().run(inputs, OperatorRuntime(llm=backend))
    assert output.text == output.code == "def f():\n    return 1"


ADD_RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
ADD_RIGHT_TOO = "def add(a, b):\n    return sum([a, b])"
ADD_WRONG = "def add(a, b):\n    return a - b"
ADD_ODD = "def add(a, b):\n    return a * b"


def code_inputs(
    candidates: list[str], *, tests: str | None = "assert add(1, 2) == 3\nassert add(0, 0) == 0"
) -> OperatorInput:
    return OperatorInput(
        problem="Add two numbers.", task_type="code", entry_point="add", public_tests=tests, candidates=candidates
    )


async def test_code_a_wrong_majority_loses_to_a_correct_minority_without_llm_calls() -> None:
    backend = ScriptedBackend(name="never-called")
    candidates = [ADD_WRONG, ADD_WRONG, ADD_RIGHT]
    output = await ScEnsemble().run(code_inputs(candidates), OperatorRuntime(llm=backend))
    assert (output.index, output.decided_by) == (2, "execution")
    assert output.text == ADD_RIGHT and output.code == "def add(a, b):\n    return a + b"
    assert output.note == "execution: 1/3 candidates pass 2/2 public tests"
    assert output.votes == [0, 0, 1]
    assert backend.requests == []


async def test_code_equal_scores_go_to_the_largest_behaviour_group_on_proposed_inputs() -> None:
    backend = ScriptedBackend(["<inputs>\n(2, 3)\nos.system('x')\n(-1, 5)\n</inputs>"])
    candidates = [ADD_ODD, ADD_RIGHT, ADD_RIGHT_TOO]
    output = await ScEnsemble().run(
        code_inputs(candidates, tests="assert add(0, 0) == 0"), OperatorRuntime(llm=backend)
    )
    assert (output.index, output.decided_by, output.votes) == (1, "execution", [1, 2, 2])
    assert output.note is not None and "largest behaviour group 2 of 3 (on 3 inputs, 2 proposed)" in output.note
    assert [r.operator for r in backend.requests] == ["ScEnsemble"]  # the input proposal, never a <choice>
    assert "<inputs>" in backend.prompts[0] and "assert add(0, 0) == 0" in backend.prompts[0]


async def test_code_the_llm_choice_is_the_last_resort_only() -> None:
    # No entry point: execution cannot judge, so the tie goes to the executor's <choice>.
    backend = ScriptedBackend(["<choice>2</choice>"])
    inputs = code_inputs([ADD_WRONG, ADD_RIGHT]).model_copy(update={"entry_point": None})
    output = await ScEnsemble().run(inputs, OperatorRuntime(llm=backend))
    assert (output.index, output.decided_by) == (1, "llm")
    assert output.note == "execution could not judge: the task names no entry point"
    # No tests and no usable proposed inputs: the same.
    backend = ScriptedBackend(["no idea", "<choice>1</choice>"])
    output = await ScEnsemble().run(code_inputs([ADD_WRONG, ADD_RIGHT], tests=None), OperatorRuntime(llm=backend))
    assert (output.index, output.decided_by) == (0, "llm")
    assert output.note is not None and output.note.startswith("execution could not judge: no public tests")


async def test_code_a_refusing_sandbox_falls_back_to_the_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*args: object, **kwargs: object) -> None:
        raise SandboxRefusedError("install bubblewrap")

    monkeypatch.setattr(code_selection, "count_passing", refuse)
    backend = ScriptedBackend(["<choice>2</choice>"])
    output = await ScEnsemble().run(code_inputs([ADD_WRONG, ADD_RIGHT]), OperatorRuntime(llm=backend))
    assert (output.index, output.decided_by) == (1, "llm")
    assert output.note is not None and "sandbox refused" in output.note and "install bubblewrap" in output.note


async def test_non_code_tasks_keep_the_answer_vote() -> None:
    backend = ScriptedBackend(name="never-called")
    inputs = OperatorInput(problem="?", task_type="math", entry_point="add", candidates=["4", "4.0", "5"])
    output = await ScEnsemble().run(inputs, OperatorRuntime(llm=backend))
    assert (output.index, output.decided_by, output.note) == (0, "vote", None)
