"""The `openai` executor over several endpoints (`base_urls`): requests spread by least in flight, one workflow
run sticking to one replica, a killed replica's requests failing over at once, a clear error when none is left,
and the config's validation. Endpoints are `VLLMReplicaDouble`s (real loopback HTTP servers)."""

from __future__ import annotations

import threading

import anyio
import pytest

from operators.backends.base import BackendError, ChatMessage, ChatRequest, ChatResponse
from operators.backends.config import ConfigError, parse_config
from operators.backends.factory import build_backend
from operators.backends.openai_compat import OpenAICompatBackend, RetryPolicy
from tests.support.vllm_replicas import VLLMReplicaDouble

MODEL = "executor"


def request(affinity: str | None) -> ChatRequest:
    return ChatRequest(messages=[ChatMessage(role="user", content="hi")], affinity=affinity)


def backend(*replicas: VLLMReplicaDouble, **options: object) -> OpenAICompatBackend:
    urls = [f"{replica.base_url}/v1" for replica in replicas]
    return OpenAICompatBackend(base_urls=urls, model=MODEL, timeout_s=10, retry=RetryPolicy(max_retries=0), **options)  # type: ignore[arg-type]


async def test_runs_spread_over_the_endpoints_and_each_run_sticks_to_one() -> None:
    with VLLMReplicaDouble(served_name=MODEL) as first, VLLMReplicaDouble(served_name=MODEL) as second:
        executor = backend(first, second)
        for replica in (first, second):
            replica.gate.clear()  # hold the calls: both are in flight at once
        results = []

        async def call(key: str) -> None:
            results.append(await executor.complete(request(key)))

        async with anyio.create_task_group() as group:
            group.start_soon(call, "run-a")
            await anyio.to_thread.run_sync(first.entered.wait, 5.0)
            group.start_soon(call, "run-b")  # run-a holds the first endpoint: run-b goes to the idle one
            await anyio.to_thread.run_sync(second.entered.wait, 5.0)
            first.gate.set()
            second.gate.set()
        assert len(results) == 2 and (len(first.chat_models), len(second.chat_models)) == (1, 1)

        # run-a's later calls stay on its endpoint, even when that one is the busier
        executor.replicas.replica(first.base_url + "/v1").in_flight += 5  # type: ignore[union-attr]
        for _ in range(4):
            await executor.complete(request("run-a"))
        assert (len(first.chat_models), len(second.chat_models)) == (5, 1)
        executor.replicas.replica(first.base_url + "/v1").in_flight -= 5  # type: ignore[union-attr]
        await executor.aclose()


async def test_a_killed_endpoint_fails_over_and_none_left_is_a_clear_error() -> None:
    with VLLMReplicaDouble(served_name=MODEL) as first, VLLMReplicaDouble(served_name=MODEL) as second:
        executor = backend(first, second)  # no retries: failover is the transport's, not the retry policy's
        await executor.complete(request("run-a"))
        assert len(first.chat_models) == 1
        first.kill()
        await anyio.to_thread.run_sync(lambda: threading.Event().wait(0.2))
        reply = await executor.complete(request("run-a"))  # its endpoint is gone: answered by the other
        assert reply.text == "ok" and len(second.chat_models) == 1
        pool = executor.replicas
        assert pool is not None and pool.alive == [second.base_url + "/v1"]
        second.kill()
        await anyio.to_thread.run_sync(lambda: threading.Event().wait(0.2))
        with pytest.raises(BackendError) as caught:
            await executor.complete(request("run-b"))
        assert not caught.value.retryable
        assert "no executor replica is left (2 configured, all dead)" in str(caught.value)
        await executor.aclose()


def test_cache_key_names_the_first_endpoint_whatever_the_number_of_replicas() -> None:
    one = OpenAICompatBackend(base_url="http://a:8000/v1", model=MODEL)
    two = OpenAICompatBackend(base_urls=["http://a:8000/v1", "http://b:8000/v1"], model=MODEL)
    three = OpenAICompatBackend(base_urls=["http://a:8000/v1", "http://b:8000/v1", "http://c:8000/v1"], model=MODEL)
    assert one.cache_key() == two.cache_key() == three.cache_key()
    assert "base_urls" in repr(two) and "http://b:8000/v1" in repr(two)
    with pytest.raises(ValueError, match="exactly one of base_url"):
        OpenAICompatBackend(base_url="http://a/v1", base_urls=["http://b/v1"], model=MODEL)


def config(**model: object) -> dict[str, object]:
    return {"executor": {"model": "x"}, "models": {"x": {"backend": "openai", "model": MODEL, **model}}}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, r"'models\.x': .*set base_url \(one endpoint\) or base_urls"),
        ({"base_url": "http://a/v1", "base_urls": ["http://b/v1"]}, "set only one of base_url and base_urls"),
        ({"base_urls": []}, r"'models\.x\.base_urls'"),
        ({"base_urls": ["ftp://a"]}, r"'models\.x\.base_urls\.0'"),
        ({"base_urls": ["http://a/v1", "http://a/v1/"]}, "base_urls must be distinct; repeated: http://a/v1"),
    ],
)
def test_config_takes_exactly_one_of_base_url_and_base_urls(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(config(**fields))


def test_config_base_urls_build_a_routed_backend() -> None:
    parsed = parse_config(config(base_urls=["http://a:1/v1", "http://b:1/v1"]))
    built = build_backend(parsed.models["x"])
    assert isinstance(built, OpenAICompatBackend) and built.replicas is not None
    assert built.replicas.urls == ["http://a:1/v1", "http://b:1/v1"]
    single = build_backend(parse_config(config(base_url="http://a:1/v1")).models["x"])
    assert isinstance(single, OpenAICompatBackend) and single.replicas is None


async def test_the_engine_stamps_the_workflow_as_affinity() -> None:
    from flowsteer_mcp.engine.metering import MeteredBackend
    from operators.backends.scripted import ScriptedBackend

    seen: list[str | None] = []

    class Spy(ScriptedBackend):
        async def complete(self, chat: ChatRequest) -> ChatResponse:
            seen.append(chat.affinity)
            return await super().complete(chat)

    metered = MeteredBackend(Spy(["a"]), node_id="n1", operator="custom", affinity="wf-1")
    await metered.complete(request(None))
    assert seen == ["wf-1"]
    assert "affinity" not in request("wf-1").model_dump()  # routing only: never recorded nor keyed
