"""The scripted test double and the recorder: queue, rules, replay, usage, errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from operators.backends.base import BackendError, ChatBackend, ChatMessage, ChatRequest, ChatResponse, SamplingParams
from operators.backends.scripted import (
    RecordingBackend,
    RecordingMissingError,
    ScriptedBackend,
    ScriptExhaustedError,
    load_recordings,
    request_fingerprint,
)


def _request(text: str, *, operator: str | None = None, temperature: float = 0.0) -> ChatRequest:
    return ChatRequest(
        messages=[ChatMessage(role="system", content="be brief"), ChatMessage(role="user", content=text)],
        sampling=SamplingParams(temperature=temperature),
        operator=operator,
    )


def test_is_a_chat_backend_with_named_cache_key() -> None:
    backend = ScriptedBackend(name="case-a")
    assert isinstance(backend, ChatBackend)
    assert "case-a" in backend.cache_key()
    assert ScriptedBackend(name="case-b").cache_key() != backend.cache_key()


async def test_queue_in_order_and_requests_recorded() -> None:
    backend = ScriptedBackend(["first", "second words here"])
    one = await backend.complete(_request("hello there", operator="Custom"))
    two = await backend.complete(_request("again"))
    assert (one.text, two.text) == ("first", "second words here")
    assert backend.prompts == ["hello there", "again"]
    assert backend.requests[0].operator == "Custom"
    assert backend.remaining == 0
    # Usage is approximated by whitespace-separated words: "be brief" + "hello there" = 4, reply = 1.
    assert (one.usage.prompt_tokens, one.usage.completion_tokens) == (4, 1)
    assert two.usage.completion_tokens == 3
    assert backend.usage_log.totals().calls == 2


async def test_exhausted_script_is_a_clear_backend_error() -> None:
    backend = ScriptedBackend(["only"], name="short")
    await backend.complete(_request("a"))
    with pytest.raises(ScriptExhaustedError, match=r"no response left for request #2 \(operator=Review\)"):
        await backend.complete(_request("b", operator="Review"))
    assert isinstance(ScriptExhaustedError("x"), BackendError)
    assert backend.usage_log.totals().failed_calls == 1


async def test_rules_match_last_user_message_before_the_queue() -> None:
    backend = ScriptedBackend(
        ["queued"],
        rules=[
            (r"capital of France", "Paris"),
            (re.compile(r"fail me"), BackendError("endpoint down", retryable=True)),
            lambda request: "from callable" if request.operator == "Plan" else None,
        ],
    )
    assert (await backend.complete(_request("What is the capital of France?"))).text == "Paris"
    assert (await backend.complete(_request("x", operator="Plan"))).text == "from callable"
    with pytest.raises(BackendError, match="endpoint down"):
        await backend.complete(_request("please fail me"))
    assert (await backend.complete(_request("anything else"))).text == "queued"


async def test_default_reply_and_full_responses() -> None:
    canned = ChatResponse(text="full", model="m", reasoning="thought")
    backend = ScriptedBackend([canned], default="fallback")
    assert (await backend.complete(_request("a"))).reasoning == "thought"
    assert (await backend.complete(_request("b"))).text == "fallback"
    assert (await backend.complete(_request("c"))).text == "fallback"


def test_fingerprint_depends_on_messages_and_sampling_not_metadata() -> None:
    base = request_fingerprint(_request("q"))
    assert base == request_fingerprint(_request("q", operator="Verify"))
    assert base != request_fingerprint(_request("q", temperature=0.7))
    assert base != request_fingerprint(_request("q2"))


async def test_record_then_replay(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    live = ScriptedBackend(rules=[(r"^one$", "uno"), (r"^two$", "dos")], name="live", model="live-model")
    recorder = RecordingBackend(live, path)
    assert recorder.cache_key() == live.cache_key()
    await recorder.complete(_request("one"))
    await recorder.complete(_request("two"))
    await recorder.aclose()
    assert live.closed
    assert [e.response.text for e in load_recordings(path)] == ["uno", "dos"]

    replay = ScriptedBackend.from_recording(path)
    assert replay.model == "live-model"
    assert (await replay.complete(_request("two"))).text == "dos"  # matched by content, not order
    assert (await replay.complete(_request("one"))).text == "uno"
    with pytest.raises(RecordingMissingError, match="no recording for request"):
        await replay.complete(_request("three"))
    with pytest.raises(RecordingMissingError):
        await replay.complete(_request("one", temperature=0.5))  # different sampling: not the same request


async def test_repeated_recordings_replay_in_order_then_repeat_last(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    recorder = RecordingBackend(ScriptedBackend(["a", "b"]), path)
    await recorder.complete(_request("same"))
    await recorder.complete(_request("same"))
    replay = ScriptedBackend.from_recording(path)
    texts = [(await replay.complete(_request("same"))).text for _ in range(3)]
    assert texts == ["a", "b", "b"]


async def test_failed_calls_are_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "fail.jsonl"
    recorder = RecordingBackend(ScriptedBackend([BackendError("boom")]), path)
    with pytest.raises(BackendError, match="boom"):
        await recorder.complete(_request("x"))
    assert not path.exists() or path.read_text() == ""


def test_malformed_recording_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"key": "k"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1"):
        load_recordings(path)
