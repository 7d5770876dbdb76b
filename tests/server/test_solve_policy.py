"""`solve(director="policy")`: the server's Flow-Director designs the workflow on the server's own canvas.

The policy endpoint is a test double (`OpenAIStub`, a real loopback OpenAI-compatible server) that replays a
fixed dialect episode: add a Custom operator, write its prompt when asked, finish. The runner is the scripted
double, whose answer is the DSL of the graph it ran, so the answer shows which workflow ran.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from flowsteer_mcp.director.card import ADAPTER_SERVED_NAME, DIRECTOR_DIR_ENV, ShippedDirector
from flowsteer_mcp.director.served import ServedDirector, ServeMode
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.server.conftest import Connect
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller
from tests.support.shipped_director import fake_director

TASK = "What is 17 * 23?"
ADD = "<action>add</action><operator>Custom</operator>"
PROMPT = "Compute the product step by step and give the number."
FINISH = "<action>finish</action>"


def replayed_policy(body: dict[str, Any]) -> StubReply:
    """The policy double: a prompt turn (no system message) gets the prompt; an action turn adds Custom until the
    workflow holds one, then finishes."""
    messages = body["messages"]
    if messages[0]["role"] != "system":
        return StubReply(content=PROMPT)
    if "Custom" in messages[-1]["content"].split("Current workflow")[-1]:
        return StubReply(content=FINISH)
    return StubReply(content=ADD)


@pytest.fixture
def no_shipped_director(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(tmp_path / "none"))
    return tmp_path / "none"


async def test_the_policy_builds_the_workflow_it_wrote_and_solve_returns_its_answer(connect: Connect) -> None:
    runner = ScriptedRunner()
    with OpenAIStub(responder=replayed_policy, served_models=["policy-double"]) as stub:
        settings = ServerSettings(policy_url=stub.base_url, policy_model="policy-double")
        async with connect(settings, runner=runner) as tools:
            result = await tools.ok("solve", task=TASK, task_type="math", director="policy")
            detail = await tools.detail(result["workflow_id"])
    assert result["director"] == "policy" and result["workflow"] == "policy-double"
    assert result["dsl"] == "Custom" == detail["state"]["dsl"]
    assert result["answer"] == "Custom"  # the scripted runner answers with the DSL it ran
    assert result["status"] == "ok" and result["error"] is None
    assert result["turns"] == detail["state"]["round"] >= 2 and detail["end"]["reason"] == "finished"
    assert [row["operator"] for row in result["trace"]] == ["Custom"]
    assert result["usage"]["llm_calls"] >= 1 and result["usage"]["director_tokens"] > 0
    assert result["measured"] == []
    sent = [request.body["messages"][-1]["content"] for request in stub.chat_requests]
    assert len(sent) == len(stub.chat_requests) >= 2 and all(TASK in text for text in sent)
    assert runner.calls and runner.calls[-1].dsl == "Custom"


async def test_without_a_policy_the_call_says_which_flag_to_pass_and_changes_nothing(
    connect: Connect, no_shipped_director: Path
) -> None:
    async with connect() as tools:
        listed = {tool.name for tool in (await tools.client.list_tools()).tools}
        message = await tools.error("solve", task=TASK, director="policy")
        workflows = await tools.ok("list_workflows")
    assert "solve" in listed
    assert "--policy-url" in message and "--serve-director" in message
    assert "no Flow-Director ships with this install" in message
    assert workflows["workflows"] == []


async def test_the_library_stays_the_default_director(connect: Connect) -> None:
    async with connect() as tools:
        result = await tools.ok("solve", task=TASK, task_type="math")
    assert result["director"] == "library" and result["turns"] is None


async def test_read_only_servers_do_not_offer_solve(registry: OperatorRegistry) -> None:
    settings = ServerSettings(read_only=True, policy_url="http://127.0.0.1:9/v1", policy_model="policy-double")
    server = build_server(settings, registry=registry, runner=ScriptedRunner(), store=MemoryStore())
    async with Client(server.mcp) as client:
        assert "solve" not in {tool.name for tool in (await client.list_tools()).tools}


def test_serve_director_needs_the_serving_function_of_the_flowsteer_command(
    registry: OperatorRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(fake_director(tmp_path / "director")))
    with pytest.raises(ValueError, match="flowsteer serve --serve-director"):
        build_server(ServerSettings(serve_director="auto"), registry=registry, store=MemoryStore())


def test_serve_director_without_a_shipped_director_is_refused_at_startup(
    registry: OperatorRegistry, no_shipped_director: Path
) -> None:
    @asynccontextmanager
    async def never(
        shipped: ShippedDirector, mode: ServeMode, *, executor_url: str | None = None
    ) -> AsyncIterator[ServedDirector]:
        raise AssertionError("nothing to serve")
        yield  # pragma: no cover

    with pytest.raises(ValueError, match="no Flow-Director ships"):
        build_server(
            ServerSettings(serve_director="auto"), registry=registry, store=MemoryStore(), serve_director=never
        )


async def _solve_with_the_served_director(
    registry: OperatorRegistry, stub: OpenAIStub, events: list[str], settings: ServerSettings | None = None
) -> Any:
    """One policy `solve` on a server that serves the shipped director through a double speaking for `stub`;
    `events` records the double's start (with the executor's server it was given, if any) and stop."""
    up = anyio.Event()

    @asynccontextmanager
    async def serving_double(
        shipped: ShippedDirector, mode: ServeMode, *, executor_url: str | None = None
    ) -> AsyncIterator[ServedDirector]:
        events.append(f"start {shipped.card.name} {mode}" + (f" on {executor_url}" if executor_url else ""))
        up.set()
        try:
            yield ServedDirector(url=stub.base_url, model=ADAPTER_SERVED_NAME, via="local")
        finally:
            events.append("stop")

    app = build_server(
        settings or ServerSettings(serve_director="local"),
        registry=registry,
        runner=ScriptedRunner(),
        store=MemoryStore(),
        serve_director=serving_double,
    )
    async with Client(app.mcp) as client:
        with anyio.fail_after(5):
            await up.wait()
        return await ToolCaller(client).ok("solve", task=TASK, task_type="math", director="policy")


async def test_the_server_serves_the_shipped_director_for_its_lifespan(
    registry: OperatorRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(fake_director(tmp_path / "director")))
    events: list[str] = []
    with OpenAIStub(responder=replayed_policy, served_models=[ADAPTER_SERVED_NAME]) as stub:
        result = await _solve_with_the_served_director(registry, stub, events)
    assert events == ["start test-director local", "stop"]
    assert result["workflow"] == ADAPTER_SERVED_NAME and result["answer"] == "Custom"


async def test_the_served_director_plays_the_game_on_its_card(
    registry: OperatorRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its card's canvas options shape the workflow the server creates for it, and it reads the system prompt of
    its own observation template, not the server's."""
    folder = fake_director(
        tmp_path / "director", play={"canvas": {"max_rounds": 1, "finish": "relaxed"}, "observation": "obs.txt"}
    )
    (folder / "obs.txt").write_text("CARD TEMPLATE. Operators: $operator_names\n", encoding="utf-8")
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(folder))
    with OpenAIStub(responder=replayed_policy, served_models=[ADAPTER_SERVED_NAME]) as stub:
        result = await _solve_with_the_served_director(registry, stub, [])
        messages = [request.body["messages"] for request in stub.chat_requests]
    systems = [turn[0]["content"] for turn in messages if turn[0]["role"] == "system"]
    assert result["turns"] == 1  # the card's one round, not the server's twenty
    assert systems and all(text.startswith("CARD TEMPLATE. Operators: ") for text in systems)


async def test_the_server_can_serve_the_director_on_its_executors_own_server(
    registry: OperatorRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(fake_director(tmp_path / "director")))
    events: list[str] = []
    executor = "http://127.0.0.1:8031/v1"
    settings = ServerSettings(serve_director="executor", director_executor_url=executor)
    with OpenAIStub(responder=replayed_policy, served_models=[ADAPTER_SERVED_NAME]) as stub:
        result = await _solve_with_the_served_director(registry, stub, events, settings)
    assert events == [f"start test-director executor on {executor}", "stop"]
    assert result["answer"] == "Custom"


def test_serving_on_the_executor_without_an_executor_server_is_refused_at_startup() -> None:
    with pytest.raises(ValueError, match="--config must name an `openai` executor with one base_url"):
        ServerSettings(serve_director="executor")
