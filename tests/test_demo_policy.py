"""`make demo DIRECTOR=policy`: the shipped director is served for the episode, builds the workflow through the
demo's MCP client, and each of its turns is printed; without a shipped director the demo says so and stops."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from flowsteer_mcp.demo import DEFAULT_TASK, DEMO_OPTIONS, demo_main
from flowsteer_mcp.demo_policy import DemoPolicy, policy_episode
from flowsteer_mcp.director.card import ADAPTER_SERVED_NAME, DIRECTOR_DIR_ENV, ShippedDirector, shipped_director
from flowsteer_mcp.director.served import ServedDirector, ServeMode
from flowsteer_mcp.server import build_server
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.scripted_runner import ScriptedRunner
from tests.support.shipped_director import fake_director

TASK = json.loads(Path(DEFAULT_TASK).read_text(encoding="utf-8"))


def _policy_reply(body: dict[str, Any]) -> StubReply:
    messages = body["messages"]
    if messages[0]["role"] != "system":
        return StubReply(content="Write the function.")
    if "Custom" in messages[-1]["content"].split("Current workflow")[-1]:
        return StubReply(content="<action>finish</action>")
    return StubReply(content="<action>add</action><operator>Custom</operator>")


async def test_the_policy_demo_serves_the_director_and_prints_its_turns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opened: list[ServeMode] = []
    with OpenAIStub(responder=_policy_reply, served_models=[ADAPTER_SERVED_NAME]) as stub:

        @asynccontextmanager
        async def serve(
            shipped: ShippedDirector, mode: ServeMode, *, executor_url: str | None = None
        ) -> AsyncIterator[ServedDirector]:
            opened.append(mode)
            yield ServedDirector(url=stub.base_url, model=ADAPTER_SERVED_NAME, via="local")

        policy = DemoPolicy(shipped_director(fake_director(tmp_path)), "local", serve)
        totals = {"llm_calls": 0, "tokens": 0}
        async with Client(build_server(runner=ScriptedRunner()).mcp) as client:
            workflow_id = await policy_episode(client, TASK, policy, totals, DEMO_OPTIONS)
            detail = (await client.call_tool("get_workflow", {"workflow_id": workflow_id})).structured_content
    assert opened == ["local"]
    assert detail is not None and "Custom" in detail["state"]["dsl"]
    out = capsys.readouterr().out
    assert "director: test-director (LoRA on smollm2-135m-instruct, 0 steps), served by local" in out
    assert "[1] action: <action>add</action><operator>Custom</operator>" in out


def test_the_policy_demo_without_a_shipped_director_stops_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(tmp_path))
    assert demo_main(["--director", "policy", "--no-view"]) == 2
    assert "no Flow-Director ships with this install" in capsys.readouterr().err
