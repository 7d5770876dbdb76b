"""The `openai` backend against a real OpenAI-compatible HTTP server on loopback (no network)."""

from __future__ import annotations

import json
import logging
import random
import socket
from collections.abc import Iterator

import anyio
import httpx2
import pytest
import structlog
from pydantic import SecretStr

from operators.backends.base import BackendError, ChatBackend, ChatMessage, ChatRequest, SamplingParams
from operators.backends.openai_compat import OpenAICompatBackend, RetryPolicy, display_url
from tests.support.openai_stub import OpenAIStub, StubReply

MODEL = "stub-model"
FAST_RETRY = RetryPolicy(max_retries=3, backoff_base_s=0.001, backoff_max_s=0.01)


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


def make_backend(stub: OpenAIStub, **overrides: object) -> OpenAICompatBackend:
    settings: dict[str, object] = {
        "base_url": stub.base_url,
        "model": MODEL,
        "retry": FAST_RETRY,
        "timeout_s": 5.0,
        "rng": random.Random(0),
    }
    settings.update(overrides)
    return OpenAICompatBackend(**settings)  # type: ignore[arg-type]


def ask(text: str = "What is 2+2?", **fields: object) -> ChatRequest:
    return ChatRequest(messages=[ChatMessage(role="user", content=text)], **fields)


async def test_success_returns_text_and_records_usage(stub: OpenAIStub) -> None:
    stub.enqueue(StubReply(content="4", prompt_tokens=11, completion_tokens=7))
    backend = make_backend(stub, sampling=SamplingParams(temperature=0.2, max_tokens=64))
    try:
        response = await backend.complete(ask(operator="AnswerGenerate", node_id="n3"))
    finally:
        await backend.aclose()

    assert isinstance(backend, ChatBackend)
    assert response.text == "4"
    assert response.model == MODEL
    assert response.reasoning is None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (11, 7)
    assert response.finish_reason == "stop"
    assert response.latency_s > 0

    [record] = backend.usage_log.records()
    assert record.ok and record.attempts == 1
    assert (record.operator, record.node_id, record.model) == ("AnswerGenerate", "n3", MODEL)
    assert (record.prompt_tokens, record.completion_tokens) == (11, 7)
    totals = backend.usage_log.totals()
    assert (totals.calls, totals.failed_calls, totals.total_tokens) == (1, 0, 18)

    [sent] = stub.chat_requests
    assert sent.body["model"] == MODEL
    assert sent.body["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    assert sent.body["temperature"] == 0.2
    assert sent.body["max_tokens"] == 64
    assert "seed" not in sent.body and "stop" not in sent.body


async def test_request_sampling_overrides_defaults_and_passes_seed_and_stop(stub: OpenAIStub) -> None:
    backend = make_backend(stub, max_tokens_field="max_completion_tokens")
    try:
        await backend.complete(ask(sampling=SamplingParams(temperature=0.7, seed=5, stop=["</a>"], max_tokens=9)))
    finally:
        await backend.aclose()
    body = stub.chat_requests[0].body
    assert (body["temperature"], body["seed"], body["stop"]) == (0.7, 5, ["</a>"])
    assert body["max_completion_tokens"] == 9 and "max_tokens" not in body


async def test_reasoning_content_is_kept_apart_from_the_answer(stub: OpenAIStub) -> None:
    stub.enqueue(StubReply(content="Paris", reasoning="The capital of France is Paris."))
    backend = make_backend(stub)
    try:
        response = await backend.complete(ask("Capital of France?"))
    finally:
        await backend.aclose()
    assert response.text == "Paris"
    assert response.reasoning == "The capital of France is Paris."


@pytest.mark.parametrize("status", [429, 500, 502, 503])
async def test_transient_errors_are_retried_then_succeed(stub: OpenAIStub, status: int) -> None:
    stub.enqueue(StubReply.error(status), StubReply.error(status), StubReply(content="fine"))
    backend = make_backend(stub)
    try:
        response = await backend.complete(ask())
    finally:
        await backend.aclose()
    assert response.text == "fine"
    assert len(stub.chat_requests) == 3
    [record] = backend.usage_log.records()
    assert record.ok and record.attempts == 3


async def test_gives_up_after_max_retries_with_the_reason(stub: OpenAIStub) -> None:
    stub.fail_next(10, status=503)
    backend = make_backend(stub, retry=RetryPolicy(max_retries=2, backoff_base_s=0.001))
    try:
        with pytest.raises(BackendError) as caught:
            await backend.complete(ask(operator="Plan", node_id="n1"))
    finally:
        await backend.aclose()
    message = str(caught.value)
    assert caught.value.retryable is True
    assert "HTTP 503" in message and "gave up after 3 attempts" in message
    assert len(stub.chat_requests) == 3  # 1 + max_retries, then no more
    [record] = backend.usage_log.records()
    assert (record.ok, record.attempts, record.operator) == (False, 3, "Plan")
    assert record.error is not None and "HTTP 503" in record.error
    assert backend.usage_log.totals().failed_calls == 1


async def test_client_errors_are_not_retried(stub: OpenAIStub) -> None:
    stub.enqueue(StubReply.error(400, message="max_tokens is too large"))
    backend = make_backend(stub)
    try:
        with pytest.raises(BackendError) as caught:
            await backend.complete(ask())
    finally:
        await backend.aclose()
    assert caught.value.retryable is False
    assert "HTTP 400" in str(caught.value) and "max_tokens is too large" in str(caught.value)
    assert len(stub.chat_requests) == 1


async def test_retry_after_header_sets_the_backoff(stub: OpenAIStub) -> None:
    stub.enqueue(StubReply.error(429, retry_after_s=0.05))
    backend = make_backend(stub, retry=RetryPolicy(max_retries=1, backoff_base_s=0.0, backoff_max_s=1.0))
    try:
        with structlog.testing.capture_logs() as logs:
            await backend.complete(ask())
    finally:
        await backend.aclose()
    [retry] = [e for e in logs if e["event"] == "executor_retry"]
    assert retry["delay_s"] == 0.05
    assert retry["attempt"] == 1 and "HTTP 429" in retry["reason"]


async def test_timeout_is_retried_then_reported(stub: OpenAIStub) -> None:
    stub.hang_next(1, seconds=3.0)
    backend = make_backend(stub, timeout_s=0.3, retry=RetryPolicy(max_retries=1, backoff_base_s=0.001))
    try:
        response = await backend.complete(ask())  # first attempt times out, the retry succeeds
        assert response.text.startswith("echo:")
        assert backend.usage_log.records()[-1].attempts == 2

        stub.hang_next(2, seconds=3.0)
        with pytest.raises(BackendError) as caught:
            await backend.complete(ask())
    finally:
        await backend.aclose()
    assert caught.value.retryable is True
    assert "timed out after 0.3s" in str(caught.value)
    assert "gave up after 2 attempts" in str(caught.value)


async def test_a_trickling_server_cannot_exceed_the_call_timeout(stub: OpenAIStub) -> None:
    """The whole call is bounded, not only each socket read."""
    stub.enqueue(StubReply.trickle(0.1))  # ~16 chunks 0.1 s apart: every read is well within 0.4 s
    backend = make_backend(stub, timeout_s=0.4, retry=RetryPolicy(max_retries=0))
    try:
        with anyio.fail_after(1.5), pytest.raises(BackendError, match=r"timed out after 0\.4s"):
            await backend.complete(ask())
    finally:
        await backend.aclose()


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (StubReply.garbage(), "not JSON"),
        (StubReply.garbage(b'{"foo": 1}'), "not a chat completion"),
        (StubReply.garbage(b'{"model": "stub-model", "choices": []}'), "not a chat completion"),
        (StubReply.garbage(b'{"error": {"message": "overloaded"}}'), "answered with an error.*overloaded"),
        (StubReply.garbage(b"<html>Bad gateway</html>", content_type="text/html"), "not JSON"),
        (StubReply.garbage(b""), "not JSON"),
    ],
)
async def test_garbage_bodies_are_retried_then_reported(stub: OpenAIStub, reply: StubReply, expected: str) -> None:
    stub.enqueue(reply, reply)
    backend = make_backend(stub, retry=RetryPolicy(max_retries=1, backoff_base_s=0.001))
    try:
        with pytest.raises(BackendError, match=expected) as caught:
            await backend.complete(ask())
        assert caught.value.retryable is True
        assert len(stub.chat_requests) == 2

        stub.enqueue(reply)  # one garbage reply, then a good one: recovered by the retry
        response = await backend.complete(ask("again"))
    finally:
        await backend.aclose()
    assert response.text == "echo: again"


async def test_empty_reply_is_an_error_naming_the_finish_reason(stub: OpenAIStub) -> None:
    stub.enqueue(StubReply(content="", reasoning="thinking...", finish_reason="length"))
    backend = make_backend(stub)
    try:
        with pytest.raises(BackendError, match=r"empty reply.*length") as caught:
            await backend.complete(ask())
    finally:
        await backend.aclose()
    assert caught.value.retryable is False
    assert len(stub.chat_requests) == 1


async def test_a_different_model_in_the_reply_is_refused_not_substituted(stub: OpenAIStub) -> None:
    stub.enqueue(StubReply(content="hi", model="gpt-4o-mini"))
    backend = make_backend(stub)
    try:
        with pytest.raises(BackendError) as caught:
            await backend.complete(ask())
    finally:
        await backend.aclose()
    message = str(caught.value)
    assert "'stub-model'" in message and "'gpt-4o-mini'" in message and "substitut" in message
    assert caught.value.retryable is False
    assert len(stub.chat_requests) == 1


async def test_a_dated_snapshot_of_the_requested_model_is_the_same_model(stub: OpenAIStub) -> None:
    stub.enqueue(StubReply(content="hi", model=f"{MODEL}-2024-07-18"))
    backend = make_backend(stub)
    try:
        response = await backend.complete(ask())
    finally:
        await backend.aclose()
    assert response.model == f"{MODEL}-2024-07-18"


async def test_a_missing_model_is_an_error_without_fallback() -> None:
    with OpenAIStub(served_models=["some-other-model"]) as stub:
        backend = make_backend(stub)
        try:
            with pytest.raises(BackendError) as caught:
                await backend.complete(ask())
        finally:
            await backend.aclose()
        assert "was not found" in str(caught.value) and "no other model is substituted" in str(caught.value)
        assert caught.value.retryable is False
        assert [r.body["model"] for r in stub.chat_requests] == [MODEL]  # asked once, for our model only


async def test_unreachable_endpoint_is_retried_then_reported() -> None:
    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = OpenAICompatBackend(
        base_url=f"http://127.0.0.1:{port}/v1",
        model=MODEL,
        retry=RetryPolicy(max_retries=2, backoff_base_s=0.001),
        timeout_s=2.0,
    )
    try:
        with pytest.raises(BackendError, match="connection failed") as caught:
            await backend.complete(ask())
    finally:
        await backend.aclose()
    assert caught.value.retryable is True
    assert backend.usage_log.records()[-1].attempts == 3


async def test_concurrency_limit_is_honoured() -> None:
    with OpenAIStub(latency_s=0.2) as stub:
        backend = make_backend(stub, max_concurrency=3)
        results: list[str] = []
        try:
            async with anyio.create_task_group() as group:
                for i in range(9):

                    async def one(i: int = i) -> None:
                        results.append((await backend.complete(ask(f"q{i}"))).text)

                    group.start_soon(one)
        finally:
            await backend.aclose()
        assert sorted(results) == sorted(f"echo: q{i}" for i in range(9))
        assert stub.max_in_flight == 3  # never more, and the limit was actually reached


async def test_api_key_reaches_the_server_but_never_logs_repr_cache_key_or_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # also the openai/httpx stdlib loggers, at their most verbose
    secret = "sk-test-DO-NOT-LEAK-31337"
    with OpenAIStub(api_key=secret) as stub:
        # 429 (retry log), success (call log), then a 401 whose body echoes the key (failure log + error).
        stub.enqueue(StubReply.error(429), StubReply(content="ok"))
        stub.enqueue(StubReply.error(401, message=f"Incorrect API key provided: {secret}"))
        backend = make_backend(stub, api_key=SecretStr(secret))
        try:
            with structlog.testing.capture_logs() as logs:
                assert (await backend.complete(ask())).text == "ok"
                with pytest.raises(BackendError) as caught:
                    await backend.complete(ask())
        finally:
            await backend.aclose()

        assert {r.headers["authorization"] for r in stub.chat_requests} == {f"Bearer {secret}"}
        assert {e["event"] for e in logs} >= {"executor_retry", "executor_call", "executor_call_failed"}
        assert caplog.records  # the stdlib loggers did emit something to inspect
        texts = (json.dumps(logs, default=str), caplog.text, repr(backend), backend.cache_key(), str(caught.value))
        for text in texts:
            assert secret not in text
        assert "***" in str(caught.value)  # the echoed key was scrubbed, the rest of the message kept
        assert all(secret not in (r.error or "") for r in backend.usage_log.records())


async def test_wrong_key_is_a_clear_non_retryable_error() -> None:
    with OpenAIStub(api_key="right") as stub:
        backend = make_backend(stub, api_key=SecretStr("wrong"))
        try:
            with pytest.raises(BackendError, match="rejected the credentials") as caught:
                await backend.complete(ask())
        finally:
            await backend.aclose()
        assert caught.value.retryable is False
        assert len(stub.chat_requests) == 1


async def test_closed_backend_refuses_calls(stub: OpenAIStub) -> None:
    backend = make_backend(stub)
    await backend.aclose()
    await backend.aclose()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        await backend.complete(ask())
    assert stub.chat_requests == []


def test_cache_key_names_backend_endpoint_model_and_sampling_without_secrets() -> None:
    url = "http://user:hunter2@127.0.0.1:8000/v1?api-key=abc"
    backend = OpenAICompatBackend(base_url=url, model="m", api_key=SecretStr("sk-zzz"))
    other = OpenAICompatBackend(base_url=url, model="m", sampling=SamplingParams(temperature=0.5))
    key = json.loads(backend.cache_key())
    assert key == {
        "backend": "openai",
        "base_url": "http://127.0.0.1:8000/v1?<redacted>",
        "model": "m",
        "sampling": SamplingParams().model_dump(mode="json"),
    }
    assert backend.cache_key() != other.cache_key()
    for text in (backend.cache_key(), repr(backend)):
        assert "hunter2" not in text and "sk-zzz" not in text and "abc" not in text


def test_display_url_keeps_scheme_host_port_and_path() -> None:
    assert display_url("https://api.example.com/v1") == "https://api.example.com/v1"
    assert display_url("http://u:p@localhost:11434/v1/") == "http://localhost:11434/v1/"


def test_backoff_is_exponential_with_full_jitter_and_capped() -> None:
    policy = RetryPolicy(max_retries=5, backoff_base_s=0.5, backoff_max_s=3.0)
    rng = random.Random(7)
    for retry_index, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 3.0), (6, 3.0)]:
        delays = [policy.delay_s(retry_index, rng) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert max(delays) > 0.8 * ceiling  # jitter spans the whole range, not a fixed delay
        assert min(delays) < 0.2 * ceiling
    assert policy.delay_s(0, rng, retry_after_s=2.0) >= 2.0  # the server's Retry-After wins
    assert policy.delay_s(0, rng, retry_after_s=60.0) == 3.0  # but stays within the cap


def test_constructor_rejects_nonsense_settings() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAICompatBackend(base_url="http://127.0.0.1:1/v1", model="m", max_concurrency=0)
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAICompatBackend(base_url="http://127.0.0.1:1/v1", model="m", timeout_s=0)
    with pytest.raises(ValueError, match="model"):
        OpenAICompatBackend(base_url="http://127.0.0.1:1/v1", model="")


async def test_http_client_seam_accepts_an_in_process_transport() -> None:
    """Callers (and benchmarks) can swap the transport, like httpx's MockTransport, without a socket."""
    seen: list[dict[str, object]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        completion = {"model": "m", "choices": [{"message": {"content": "via transport"}, "finish_reason": "stop"}]}
        return httpx2.Response(200, json=completion)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handle))
    backend = OpenAICompatBackend(base_url="http://executor.invalid/v1", model="m", http_client=client)
    try:
        response = await backend.complete(ask("hi"))
    finally:
        await backend.aclose()
    assert response.text == "via transport"
    assert response.usage.total_tokens == 0  # the reply carried no usage: zeros, not an error
    assert seen[0]["model"] == "m"
