"""Legacy operators: CustomCodeGenerate and MdEnsemble."""

from __future__ import annotations

import re

from operators.backends.base import ChatRequest
from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import CustomCodeGenerate, MdEnsemble


async def test_custom_code_generate_returns_unrun_code() -> None:
    backend = ScriptedBackend(["```python\nimport math\n\ndef area(r):\n    return math.pi * r * r\n```"])
    inputs = OperatorInput(problem="Circle area.", task_type="code", entry_point="area")
    output = await CustomCodeGenerate().run(inputs, OperatorRuntime(llm=backend))
    assert output.ok and output.code == output.text and output.text.startswith("import math")
    assert "`area`" in backend.prompts[0]


def _pick(content: str) -> str:
    """A judge that always picks the candidate saying "seven", wherever the shuffle put it."""
    shown = re.findall(r"Candidate (\d+):\n(.*)", content)
    number = next(n for n, text in shown if "seven" in text)
    return f"<choice>{number}</choice>"


async def test_md_ensemble_votes_through_shuffles() -> None:
    def judge(request: ChatRequest) -> str:
        return _pick(request.messages[-1].content)

    backend = ScriptedBackend(rules=[judge])
    candidates = ["six", "it is seven", "eight", "nine"]
    runtime = OperatorRuntime(llm=backend, options={"md_ensemble_rounds": 4})
    output = await MdEnsemble().run(OperatorInput(problem="3+4?", candidates=candidates), runtime)
    assert (output.ok, output.index, output.text) == (True, 1, "it is seven")
    assert output.votes == [0, 4, 0, 0]
    orders = {tuple(re.findall(r"Candidate \d+:\n(.*)", p)) for p in backend.prompts}
    assert len(orders) > 1  # the rounds really saw different orders


async def test_md_ensemble_without_any_usable_vote_is_an_error() -> None:
    backend = ScriptedBackend(default="I like the first one")
    runtime = OperatorRuntime(llm=backend, max_reasks=0, options={"md_ensemble_rounds": 2})
    output = await MdEnsemble().run(OperatorInput(problem="?", candidates=["a", "b"]), runtime)
    assert not output.ok and output.error and "no round produced a usable vote" in output.error


async def test_md_ensemble_rejects_a_bad_rounds_option() -> None:
    backend = ScriptedBackend()
    runtime = OperatorRuntime(llm=backend, options={"md_ensemble_rounds": "many"})
    output = await MdEnsemble().run(OperatorInput(problem="?", candidates=["a", "b"]), runtime)
    assert not output.ok and output.error and "md_ensemble_rounds" in output.error
    assert backend.requests == []
