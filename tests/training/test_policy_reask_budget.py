"""The policy director's re-ask budget comes from configuration (the train config's rollout sampling)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.policy import REASK, REASK_MAX_TOKENS, PolicyDirector
from flowsteer_mcp.server import build_server
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.scripted_runner import ScriptedRunner
from training.train.config import SamplingSettings

TASK = TaskSpec(problem="What is 6*7?", task_type="math")


def no_action_then_finish(body: dict[str, Any]) -> StubReply:
    asked_again = REASK in body["messages"][-1]["content"]
    return StubReply(content="<action>finish</action>" if asked_again else "Let me think about it.")


async def test_the_re_ask_uses_the_configured_token_budget() -> None:
    server = build_server(runner=ScriptedRunner())
    with OpenAIStub(responder=no_action_then_finish) as stub:
        director = PolicyDirector.from_url(
            stub.base_url, "policy", reask_max_tokens=37, canvas_options={"finish": "relaxed", "max_rounds": 1}
        )
        async with Client(server.mcp) as client:
            result = await director.run(TASK, client)
        requests = [r.body for r in stub.chat_requests]
    assert result.records[0].reasked
    assert [r["max_tokens"] for r in requests if REASK in r["messages"][-1]["content"]] == [37]


def test_the_default_budget_is_unchanged_and_must_be_positive() -> None:
    assert SamplingSettings().reask_max_tokens == REASK_MAX_TOKENS == 128
    with pytest.raises(ValueError, match="reask_max_tokens"):
        PolicyDirector.from_url("http://127.0.0.1:9/v1", "policy", reask_max_tokens=0)
