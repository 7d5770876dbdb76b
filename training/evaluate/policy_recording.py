"""Record and replay the policy's chat-completion calls at the HTTP seam of its OpenAI client.

The policy director talks to its endpoint through `openai.AsyncOpenAI`, not through a `ChatBackend`, because
it needs vLLM extras (token ids, log-probs, `chat_template_kwargs`). Recording therefore sits in the HTTP
transport: the real request goes out unchanged, and the exchange is stored as a `RecordedExchange` (operator
"policy") in the same JSONL file and format as the executor's. Replay answers each request through a
`ScriptedBackend` over those exchanges, matched by the fingerprint of messages + sampling; token ids and
log-probs are not replayed (evaluation does not use them).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import structlog

from operators.backends.base import BackendError, ChatMessage, ChatRequest, ChatResponse, SamplingParams, Usage
from operators.backends.scripted import RecordedExchange, ScriptedBackend, request_fingerprint
from training.evaluate.recording import POLICY_OPERATOR

log = structlog.get_logger(__name__)

_COMPLETIONS_SUFFIX = "/chat/completions"
_DROPPED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def chat_request_from_body(body: dict[str, Any]) -> ChatRequest:
    """The replay identity of an OpenAI chat-completions body: messages and the sampling that shapes them."""
    messages = [
        ChatMessage(role=message["role"], content=str(message.get("content") or "")) for message in body["messages"]
    ]
    stop = body.get("stop") or []
    sampling = SamplingParams(
        temperature=body.get("temperature", 1.0),
        top_p=body.get("top_p", 1.0),
        max_tokens=body.get("max_tokens") or body.get("max_completion_tokens") or 1,
        seed=body.get("seed"),
        stop=[stop] if isinstance(stop, str) else list(stop),
    )
    return ChatRequest(messages=messages, sampling=sampling, operator=POLICY_OPERATOR)


def chat_response_from_body(body: dict[str, Any]) -> ChatResponse:
    choice = body["choices"][0]
    message = choice.get("message") or {}
    usage = body.get("usage") or {}
    return ChatResponse(
        text=message.get("content") or "",
        reasoning=message.get("reasoning_content") or message.get("reasoning"),
        model=str(body.get("model", "")),
        usage=Usage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        ),
        finish_reason=choice.get("finish_reason"),
    )


def completion_body(response: ChatResponse) -> dict[str, Any]:
    """An OpenAI chat-completion document carrying a replayed response."""
    message: dict[str, Any] = {"role": "assistant", "content": response.text}
    if response.reasoning is not None:
        message["reasoning_content"] = response.reasoning
    return {
        "id": "replay",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": response.model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": response.finish_reason or "stop", "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": response.usage.prompt_tokens,
            "completion_tokens": response.usage.completion_tokens,
            "total_tokens": response.usage.total_tokens,
        },
    }


def _is_completion_call(request: httpx2.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith(_COMPLETIONS_SUFFIX)


class RecordingPolicyTransport(httpx2.AsyncBaseTransport):
    """Forwards every request to `inner` and appends successful chat completions to the recording file."""

    def __init__(self, path: str | Path, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.path = Path(path)
        self.inner = inner or httpx2.AsyncHTTPTransport()
        self._lock = anyio.Lock()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if not _is_completion_call(request) or response.status_code != 200:
            return response
        content = await response.aread()
        await response.aclose()
        try:
            exchange_request = chat_request_from_body(json.loads(await request.aread()))
            exchange = RecordedExchange(
                key=request_fingerprint(exchange_request),
                request=exchange_request,
                response=chat_response_from_body(json.loads(content)),
            )
        except (ValueError, KeyError, IndexError, TypeError) as error:
            log.warning("policy_exchange_not_recorded", error=str(error))
        else:
            async with self._lock, await anyio.open_file(self.path, "a", encoding="utf-8") as handle:
                await handle.write(exchange.model_dump_json() + "\n")
        headers = [(k, v) for k, v in response.headers.items() if k.lower() not in _DROPPED_HEADERS]
        return httpx2.Response(response.status_code, headers=headers, content=content, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class ReplayPolicyTransport(httpx2.AsyncBaseTransport):
    """Answers chat completions from recorded policy exchanges; anything unrecorded gets a 404 (no retries)."""

    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if not _is_completion_call(request):
            return httpx2.Response(404, json={"error": {"message": f"replay serves only {_COMPLETIONS_SUFFIX}"}})
        try:
            chat_request = chat_request_from_body(json.loads(await request.aread()))
            response = await self.backend.complete(chat_request)
        except (BackendError, ValueError, KeyError, TypeError) as error:
            return httpx2.Response(404, json={"error": {"message": f"policy replay: {error}"}}, request=request)
        return httpx2.Response(200, json=completion_body(response), request=request)
