"""Behaviour every LLM-calling operator shares: context and instruction reach the prompt, replies are
re-asked with the quoted parse error, exhausted re-asks and backend failures are error values."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from operators.backends.base import BackendError
from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import BUILTIN_OPERATORS
from operators.registry import OperatorRegistry
from operators.specs import BUILTIN_SPECS

INSTRUCTION = "Mind the units: answer in metres (zebra-instruction)."
PROBLEM = "A rope is 3 m long and another is 4 m long. How long are both together?"


@dataclass(frozen=True)
class Case:
    """Inputs that make the operator consult the executor, and a reply it must accept."""

    inputs: OperatorInput
    good_reply: str | None  # None: accepting a reply needs the sandbox (covered in the solving tests)


def _inputs(**extra: object) -> OperatorInput:
    return OperatorInput(problem=PROBLEM, task_type="math", instruction=INSTRUCTION, **extra)


CASES: dict[str, Case] = {
    "Plan": Case(_inputs(), "<steps>1. add the lengths\n2. report</steps>"),
    "Decompose": Case(_inputs(), "<subproblems>1. first rope\n2. second rope</subproblems>"),
    "Custom": Case(_inputs(), "Together they are 7 m.\n7"),
    "AnswerGenerate": Case(_inputs(), "<thought>3+4</thought><answer>7</answer>"),
    "Programmer": Case(_inputs(), None),
    "Review": Case(_inputs(solution="7 m"), "<feedback>Correct sum.</feedback><verdict>pass</verdict>"),
    "Verify": Case(
        _inputs(solution="7"),
        "<independent_answer>7</independent_answer><verdict>correct</verdict><confidence>high</confidence>",
    ),
    "Revise": Case(_inputs(solution="6 m", feedback="3 + 4 is 7"), "<solution>7 m</solution>"),
    # Code with no entry point: execution cannot judge and two different programs tie, so the executor chooses
    # (an answer vote's tie keeps the earliest answer without a call).
    "ScEnsemble": Case(
        _inputs(candidates=["total = 7", "total = 6"]).model_copy(update={"task_type": "code"}), "<choice>1</choice>"
    ),
    "Aggregate": Case(_inputs(candidates=["7 m", "seven metres and change"]), "<answer>7 m</answer>"),
    "Format": Case(_inputs(solution="Adding gives 7 metres in total."), "<answer>7</answer>"),
}
# Test needs a failing sandbox run before it consults the executor: covered in test_operators_verification.
# CodeT's one call never re-asks (a reply without a usable test falls back to the public tests), so it is left out
# of the re-ask contract; its prompt, backend failures and refusals are covered in test_dual_agreement.
NOT_COVERED = {"Test", "CodeT"}
LLM_OPERATORS = sorted(CASES)
WITH_GOOD_REPLY = sorted(name for name, case in CASES.items() if case.good_reply is not None)

REGISTRY = OperatorRegistry(BUILTIN_SPECS.values())
for _operator_cls in BUILTIN_OPERATORS:
    REGISTRY.register(_operator_cls)


def _runtime(backend: ScriptedBackend, **options: object) -> OperatorRuntime:
    return OperatorRuntime(llm=backend, max_reasks=2, options=dict(options))


def test_cases_cover_every_builtin_but_test_and_codet() -> None:
    assert set(CASES) | NOT_COVERED == set(BUILTIN_SPECS)


@pytest.mark.parametrize("name", LLM_OPERATORS)
async def test_problem_and_instruction_reach_the_prompt(name: str) -> None:
    backend = ScriptedBackend(default="", name=f"prompt-{name}")
    await REGISTRY.implementation(name)().run(CASES[name].inputs, _runtime(backend))
    first = backend.prompts[0]
    assert CASES[name].inputs.problem in first
    assert INSTRUCTION in first, f"{name} dropped the custom instruction"
    assert all(request.operator == name for request in backend.requests)


@pytest.mark.parametrize("name", WITH_GOOD_REPLY)
async def test_good_reply_is_accepted_in_one_call(name: str) -> None:
    backend = ScriptedBackend(rules=[lambda _request: CASES[name].good_reply], name=f"good-{name}")
    output = await REGISTRY.implementation(name)().run(CASES[name].inputs, _runtime(backend))
    assert output.ok, output.error
    assert output.error is None
    assert output.text
    assert isinstance(output, REGISTRY.implementation(name).output_model)
    assert len(backend.requests) == 1


@pytest.mark.parametrize("name", WITH_GOOD_REPLY)
async def test_bad_reply_is_reasked_with_the_quoted_error(name: str) -> None:
    good = CASES[name].good_reply
    assert good is not None
    backend = ScriptedBackend(["", good], name=f"reask-{name}")
    output = await REGISTRY.implementation(name)().run(CASES[name].inputs, _runtime(backend))
    assert output.ok, output.error
    assert len(backend.requests) == 2
    second = backend.requests[1]
    assert second.messages[-2].role == "assistant"  # the rejected reply is shown back...
    assert "could not be used" in second.messages[-1].content  # ...with the reason it was rejected
    assert any(word in second.messages[-1].content for word in ("missing", "empty", "no Python code"))


@pytest.mark.parametrize("name", LLM_OPERATORS)
async def test_exhausted_reasks_give_an_error_value(name: str) -> None:
    backend = ScriptedBackend(default="", name=f"exhaust-{name}")
    output = await REGISTRY.implementation(name)().run(CASES[name].inputs, _runtime(backend))
    assert not output.ok
    assert output.text == ""
    assert output.error and name in output.error
    assert len(backend.requests) == 3  # the first ask + max_reasks (2)


@pytest.mark.parametrize("name", LLM_OPERATORS)
async def test_zero_reasks_means_a_single_call(name: str) -> None:
    backend = ScriptedBackend(default="", name=f"noreask-{name}")
    runtime = OperatorRuntime(llm=backend, max_reasks=0)
    output = await REGISTRY.implementation(name)().run(CASES[name].inputs, runtime)
    assert not output.ok
    assert len(backend.requests) == 1


@pytest.mark.parametrize("name", LLM_OPERATORS)
async def test_backend_error_is_an_error_value(name: str) -> None:
    backend = ScriptedBackend(default=BackendError("HTTP 503 after 3 retries", retryable=True), name=f"down-{name}")
    output = await REGISTRY.implementation(name)().run(CASES[name].inputs, _runtime(backend))
    assert not output.ok
    assert output.text == ""
    assert output.error is not None and "HTTP 503 after 3 retries" in output.error
    assert output.unavailable, "an outage is not the operator's answer: it is reported, never memoised as one"
    assert len(backend.requests) == 1  # no re-ask after a backend failure


@pytest.mark.parametrize("name", ["Review", "Verify", "Revise", "Format"])
async def test_operators_needing_a_solution_refuse_without_one(name: str) -> None:
    backend = ScriptedBackend(name=f"nosolution-{name}")
    output = await REGISTRY.implementation(name)().run(OperatorInput(problem=PROBLEM), _runtime(backend))
    assert not output.ok
    assert output.error and "no solution" in output.error.replace("no answer", "no solution")
    assert backend.requests == []


@pytest.mark.parametrize("name", ["ScEnsemble", "Aggregate"])
async def test_ensembles_refuse_without_candidates(name: str) -> None:
    backend = ScriptedBackend(name=f"nocandidates-{name}")
    output = await REGISTRY.implementation(name)().run(
        OperatorInput(problem=PROBLEM, candidates=["", " "]), _runtime(backend)
    )
    assert not output.ok
    assert output.error and "no candidates" in output.error
    assert backend.requests == []


async def test_node_id_option_is_attached_to_requests() -> None:
    backend = ScriptedBackend([CASES["Plan"].good_reply or ""], name="node-id")
    await REGISTRY.implementation("Plan")().run(CASES["Plan"].inputs, _runtime(backend, node_id="node_7"))
    assert backend.requests[0].node_id == "node_7"
