"""Directors over a real in-memory MCP server: the policy loop (against an OpenAI-compatible stub), the
template and direct baselines."""

from __future__ import annotations

import json
import time
from typing import Any

from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.direct import DirectDirector, with_task_imports
from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.library import DEFAULT_WORKFLOW, library_workflow
from flowsteer_mcp.director.policy import REASK, RESAMPLE_TEMPERATURE, PolicyDirector
from flowsteer_mcp.director.template import TemplateDirector
from flowsteer_mcp.server import build_server
from operators.backends.scripted import ScriptedBackend
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.scripted_runner import ScriptedRunner

TASK = TaskSpec(problem="What is 6*7?", task_type="math")


def completion(content: str, token_ids: list[int] | None = None) -> StubReply:
    """A raw vLLM-style completion carrying token ids and log-probs."""
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "policy",
        "choices": [choice],
        "usage": {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57},
    }
    if token_ids is not None:
        choice["token_ids"] = token_ids
        choice["logprobs"] = {"content": [{"token": f"t{i}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
                                          for i in token_ids]}  # fmt: skip
        body["prompt_token_ids"] = [1, 2, 3]
    return StubReply(body=json.dumps(body).encode())


async def test_policy_director_runs_a_full_episode_through_act() -> None:
    server = build_server(runner=ScriptedRunner(answer=lambda graph, task: "42"))
    with OpenAIStub() as stub:
        stub.enqueue(
            completion("<think>Start with a solver.</think><action>add</action><operator>Custom</operator>", [11, 12]),
            completion("Compute 6*7 and answer with the number only.", [13]),
            completion("Let me think about whether we are done."),  # no action: one re-ask
            completion("<action>finish</action>", [14]),
        )
        director = PolicyDirector.from_url(
            stub.base_url, "policy", sampling=PolicySampling(enable_thinking=True), canvas_options={"finish": "relaxed"}
        )
        async with Client(server.mcp) as client:
            result = await director.run(TASK, client)
        requests = [r.body for r in stub.chat_requests]
    assert result.error is None
    assert result.finished and result.end_reason == "finished"
    assert result.answer == "42" and result.dsl == "Custom"
    assert [r.kind for r in result.records] == ["action", "prompt", "action"]
    first, prompt_turn, last = result.records
    assert first.sent == "<action>add</action><operator>Custom</operator>"  # think stripped before act
    assert first.completion.startswith("<think>")
    assert first.completion_token_ids == [11, 12] and first.completion_logprobs == [-0.5, -0.5]
    assert first.prompt_token_ids == [1, 2, 3]
    assert prompt_turn.system is None and "Write the prompt" in prompt_turn.prompt
    assert last.reasked and last.prompt.endswith(REASK)
    assert result.llm_calls == 1 and result.turns == 3
    # thinking on for action turns, off for prompt turns and the re-ask
    kwargs = [r.get("chat_template_kwargs") for r in requests]
    assert kwargs == [{"enable_thinking": True}, {"enable_thinking": False}, {"enable_thinking": True},
                      {"enable_thinking": False}]  # fmt: skip
    assert all(r.get("return_token_ids") is True and r.get("logprobs") is True for r in requests)
    assert requests[0]["messages"][0]["role"] == "system" and len(requests[1]["messages"]) == 1


async def test_policy_unclosed_think_is_an_invalid_turn_and_budget_ends_the_episode() -> None:
    server = build_server(runner=ScriptedRunner())
    with OpenAIStub(responder=lambda body: completion("<think>I keep thinking and never close")) as stub:
        director = PolicyDirector.from_url(stub.base_url, "policy", canvas_options={"max_rounds": 2})
        async with Client(server.mcp) as client:
            result = await director.run(TASK, client)
    assert result.end_reason == "budget_exhausted" and result.turns == 2
    assert all(not r.ok and r.reasked for r in result.records)
    assert "Unclosed <think>" in result.records[0].feedback
    assert result.answer is None


async def test_action_prefix_is_continued_by_the_model_and_sent_with_its_text() -> None:
    server = build_server(runner=ScriptedRunner(answer=lambda graph, task: "42"))
    with OpenAIStub() as stub:
        stub.enqueue(completion("Custom</operator>", [21, 22]), completion("finish</action>", [23]))
        sampling = PolicySampling(action_prefix="<action>add</action><operator>", stop=["\n"])
        director = PolicyDirector.from_url(
            stub.base_url,
            "policy",
            sampling=sampling,
            canvas_options={"finish": "relaxed", "prompt_turns": False, "max_rounds": 2},
        )
        async with Client(server.mcp) as client:
            result = await director.run(TASK, client)
        requests = [r.body for r in stub.chat_requests]
    first = result.records[0]
    assert first.sent == "<action>add</action><operator>Custom</operator>" and first.ok
    assert first.completion_token_ids == [21, 22]  # the prefix belongs to the prompt, not to the policy's tokens
    assert requests[0]["messages"][-1] == {"role": "assistant", "content": "<action>add</action><operator>"}
    assert requests[0]["continue_final_message"] is True and requests[0]["add_generation_prompt"] is False
    assert requests[0]["stop"] == ["\n"]
    assert result.dsl == "Custom"


async def test_template_director_builds_its_workflow_through_the_tools() -> None:
    runner = ScriptedRunner()
    server = build_server(runner=runner)
    async with Client(server.mcp) as client:
        result = await TemplateDirector().run(TASK, client)
    assert result.error is None and result.finished
    assert result.dsl == library_workflow("math", DEFAULT_WORKFLOW["math"]).dsl() == "Custom{8} -> ScEnsemble"
    assert len(runner.calls) == 1  # built without running, executed once at finish
    assert result.answer == result.dsl  # the test double answers with the DSL that ran


async def test_direct_director_makes_one_executor_call_and_extracts_code() -> None:
    backend = ScriptedBackend(["Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"])
    task = TaskSpec(
        problem="Write add(a, b).", task_type="code", entry_point="add", public_tests="assert add(1, 2) == 3"
    )
    result = await DirectDirector(backend).run(task)
    assert result.answer == "def add(a, b):\n    return a + b"
    assert result.llm_calls == 1 and result.error is None
    assert "assert add(1, 2) == 3" in backend.requests[0].messages[-1].content


async def test_a_direct_reply_without_code_is_a_finished_episode_with_no_answer() -> None:
    """Why: the one call was made and answered, so the episode is an outcome scored 0 (as a canvas workflow whose
    final run gives no answer), not an unfinished episode that reports refuse as a failed run."""
    backend = ScriptedBackend(["```python\ndef add(a, b:\n    return 'unterminated\n```"])
    task = TaskSpec(problem="Write add(a, b).", task_type="code", entry_point="add")
    result = await DirectDirector(backend).run(task)
    assert result.answer is None and result.finished and not result.executor_unavailable
    assert result.error is not None and result.error.startswith("no code in the reply")


HUMANEVAL_STUB = (
    "from typing import List\n\n\ndef below_zero(operations: List[int]) -> bool:\n"
    '    """Whether the running balance ever drops below zero.\n    >>> below_zero([1, -2])\n    True\n    """\n'
)


async def test_direct_sends_one_user_turn_and_keeps_the_models_default_system_prompt() -> None:
    backend = ScriptedBackend(["6*7 = 42.\n\\boxed{42}"])
    result = await DirectDirector(backend).run(TASK)
    (request,) = backend.requests
    assert [m.role for m in request.messages] == ["user"]  # no system message: the chat template adds its own
    prompt = request.messages[0].content
    assert prompt.startswith("What is 6*7?") and prompt.endswith("put your final answer within \\boxed{}.")
    assert request.max_tokens is None  # the backend's max_tokens applies; direct never truncates itself
    assert result.answer == "6*7 = 42.\n\\boxed{42}"


async def test_direct_code_prompt_has_the_instruction_the_stub_and_the_example_tests() -> None:
    backend = ScriptedBackend(["```python\ndef add(a, b):\n    return a + b\n```"])
    task = TaskSpec(
        problem="def add(a, b):\n", task_type="code", entry_point="add", public_tests="assert add(1, 2) == 3"
    )
    await DirectDirector(backend).run(task)
    (message,) = backend.requests[0].messages
    assert message.role == "user"
    assert message.content.startswith("Write the complete Python solution.")
    assert message.content.index("def add(a, b):") < message.content.index("Example tests:\nassert add(1, 2) == 3")


async def test_direct_keeps_the_stubs_imports_when_the_program_leaves_them_out() -> None:
    reply = (
        "```python\nprint(below_zero([1, -2]))\n```\nThe function:\n```python\n"
        "def below_zero(operations: List[int]) -> bool:\n    total = 0\n    for op in operations:\n"
        "        total += op\n        if total < 0:\n            return True\n    return False\n```\nDone."
    )
    task = TaskSpec(problem=HUMANEVAL_STUB, task_type="code", entry_point="below_zero")
    result = await DirectDirector(ScriptedBackend([reply])).run(task)
    assert result.answer is not None and result.answer.startswith("from typing import List\n")
    namespace: dict[str, Any] = {}
    exec(result.answer, namespace)  # without the import the annotation raises NameError
    assert namespace["below_zero"]([1, -2]) is True


def test_task_imports_are_added_only_when_missing() -> None:
    has_import = "from typing import List\n\ndef below_zero(operations: List[int]) -> bool:\n    return False"
    assert with_task_imports(has_import, HUMANEVAL_STUB) == has_import
    aliased = "import typing as List\n\ndef f():\n    pass"
    assert with_task_imports(aliased, HUMANEVAL_STUB) == aliased  # the name is bound already
    prose = "Write a function.\nimport the numbers and sort them.\n\ndef f(x):"
    assert with_task_imports("def f(x):\n    return x", prose) == "def f(x):\n    return x"
    stub = "import math\nfrom collections import Counter\n\ndef f(x):\n"
    added = with_task_imports("import math\n\ndef f(x):\n    return Counter(x)", stub)
    assert added.splitlines()[0] == "from collections import Counter" and added.count("import math") == 1
    assert with_task_imports("def broken(:", stub) == "def broken(:"


async def test_a_failed_final_run_is_reported_as_the_episode_error() -> None:
    server = build_server(runner=ScriptedRunner(failure="node_2 (Programmer): no code in the reply"))
    async with Client(server.mcp) as client:
        result = await TemplateDirector().run(TASK, client)
    assert result.answer is None and result.finished
    assert result.error == "the final run produced no answer: node_2 (Programmer): no code in the reply"


async def test_a_greedy_director_samples_instead_of_resending_a_turn_the_canvas_just_refused() -> None:
    """Greedy decoding after a refusal writes the refused turn again (the canvas did not change), so the episode
    would spend every round on one refusal; the director samples that turn instead (RESAMPLE_TEMPERATURE)."""

    def greedy_votes_first(body: dict[str, Any]) -> StubReply:
        observation = body["messages"][-1]["content"]
        if "Custom" in observation and "node" in observation.lower():
            return completion("<action>finish</action>")
        if body["temperature"] == 0:
            return completion("<action>add</action><operator>ScEnsemble</operator>")
        return completion("<action>add</action><operator>Custom</operator>")

    server = build_server(runner=ScriptedRunner(answer=lambda graph, task: "42"))
    with OpenAIStub(responder=greedy_votes_first) as stub:
        director = PolicyDirector.from_url(
            stub.base_url,
            "policy",
            sampling=PolicySampling(temperature=0.0, top_p=1.0, top_k=None),
            canvas_options={"finish": "relaxed", "max_rounds": 3, "prompt_turns": False},
            reask=False,
        )
        async with Client(server.mcp) as client:
            result = await director.run(TASK, client)
        temperatures = [r.body["temperature"] for r in stub.chat_requests]
    assert [r.sent for r in result.records] == [
        "<action>add</action><operator>ScEnsemble</operator>",  # refused: nothing to vote on yet
        "<action>add</action><operator>Custom</operator>",  # greedy repeated the refusal; the sample went instead
        "<action>finish</action>",
    ]
    assert [r.ok for r in result.records] == [False, True, True]
    assert [r.resampled for r in result.records] == [False, True, False]
    assert temperatures == [0, 0, RESAMPLE_TEMPERATURE, 0]
    assert result.finished and result.answer == "42" and result.dsl == "Custom"
