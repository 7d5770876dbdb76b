"""ScEnsemble (programmatic vote, LLM tie-break) and Aggregate (LLM combination)."""

from __future__ import annotations

from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import Aggregate, ScEnsemble
from operators.library.ensemble import choose_by_vote


def test_vote_normalises_numbers_case_and_whitespace() -> None:
    winner, votes, tied = choose_by_vote(["12", " 12.0 ", "$12", "13", "1,2"])
    assert winner == 0 and votes == [3, 3, 3, 1, 1] and tied == []
    assert choose_by_vote(["Paris", "paris ", "London"])[0] == 0
    assert choose_by_vote(["-5", "5", "5"])[0] == 1  # signs are never dropped
    assert choose_by_vote(["0.75", "3/4", "\\frac{3}{4}", "0.7"])[0] == 0
    assert choose_by_vote(["a", "b"]) == (None, [1, 1], [0, 1])
    assert choose_by_vote(["a", "b", "b", "a", "c"]) == (None, [2, 2, 2, 2, 1], [0, 1])


async def test_clear_majority_needs_no_llm_call() -> None:
    backend = ScriptedBackend(name="never-called")
    inputs = OperatorInput(problem="?", candidates=["The answer is \\boxed{18}", "18", "18.0", "20"], instruction="x")
    output = await ScEnsemble().run(inputs, OperatorRuntime(llm=backend))
    assert output.ok
    assert (output.index, output.text, output.decided_by) == (0, "The answer is \\boxed{18}", "vote")
    assert output.votes == [3, 3, 3, 1]
    assert backend.requests == []


async def test_tie_is_broken_by_the_llm_among_the_tied_answers_only() -> None:
    backend = ScriptedBackend(["<reason>second is right</reason><choice>2</choice>"])
    inputs = OperatorInput(problem="?", candidates=["7", "9", "7", "9", "11"], instruction="Prefer exact values.")
    output = await ScEnsemble().run(inputs, OperatorRuntime(llm=backend))
    assert (output.index, output.text, output.decided_by) == (1, "9", "llm")
    prompt = backend.prompts[0]
    assert "Candidate 1:\n7" in prompt and "Candidate 2:\n9" in prompt
    assert "11" not in prompt.split("## Candidates")[1].split("##")[0]
    assert "Prefer exact values." in prompt


async def test_choice_from_stray_letter_is_never_guessed() -> None:
    backend = ScriptedBackend(["I would pick B.", "<choice>B</choice>", "<choice>5</choice>", "<choice>1</choice>"])
    runtime = OperatorRuntime(llm=backend, max_reasks=3)
    output = await ScEnsemble().run(OperatorInput(problem="?", candidates=["x", "y"]), runtime)
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
