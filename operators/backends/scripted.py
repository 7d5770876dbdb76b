"""Scripted executor backend: a deterministic test double, plus a recorder for replaying real runs.

`ScriptedBackend` answers from, in this order:
1. rules: a callable `rule(request) -> reply | None`, or a `(regex, reply)` pair matched with `re.search`
   against the last user message (the first rule that answers wins);
2. the queue of canned responses, consumed in order;
3. recordings loaded from a JSONL file written by `RecordingBackend`, matched by `request_fingerprint`
   (messages + sampling + the draw settings of a sampled call); several recordings of the same request are replayed in order, the last one
   repeating once the others are used;
4. the `default` reply, if one was given.
A reply is a string, a full `ChatResponse`, or an exception instance (raised, e.g. a `BackendError` to
simulate a failing endpoint). When nothing answers, `ScriptExhaustedError` (or, in replay, a
`RecordingMissingError` naming the request's fingerprint) is raised: both are `BackendError`s, so an
operator reports them as an error value instead of crashing the workflow.

Every request is kept in `requests` for assertions. Token counts of string replies are APPROXIMATE: the
number of whitespace-separated words of the prompt messages and of the reply, not a real tokenizer's count.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import anyio
from pydantic import BaseModel, ValidationError

from operators.backends.base import (
    GREEDY,
    BackendError,
    ChatBackend,
    ChatRequest,
    ChatResponse,
    Usage,
    complete_many,
    draw_seed,
)
from operators.backends.usage import UsageLog, UsageRecord

__all__ = [
    "RecordedExchange",
    "RecordingBackend",
    "RecordingMissingError",
    "ScriptExhaustedError",
    "ScriptedBackend",
    "ScriptedBackendError",
    "approximate_tokens",
    "load_recordings",
    "request_fingerprint",
]

Reply = str | ChatResponse | BaseException
RuleFunction = Callable[[ChatRequest], Reply | None]
Rule = RuleFunction | tuple[str | re.Pattern[str], Reply]


class ScriptedBackendError(BackendError):
    """The script cannot answer a request (never retryable: a retry would get the same answer)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class ScriptExhaustedError(ScriptedBackendError):
    """No rule matched and no canned response is left."""


class RecordingMissingError(ScriptedBackendError):
    """Replay mode met a request that was never recorded."""


def request_fingerprint(request: ChatRequest) -> str:
    """Stable identity of a request for replay: sha256 over the messages and sampling (not metadata)."""
    payload = {
        "messages": [m.model_dump(mode="json") for m in request.messages],
        "sampling": request.sampling.model_dump(mode="json") if request.sampling is not None else None,
        "max_tokens": request.max_tokens,
    }
    if request.draw is not None and request.draw != GREEDY:  # greedy calls keep their pre-sampling fingerprint
        payload["draw"] = request.draw.model_dump(mode="json")
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def approximate_tokens(text: str) -> int:
    """Word count standing in for a token count (documented approximation, not a tokenizer)."""
    return len(text.split())


def _last_user_message(request: ChatRequest) -> str:
    return next((m.content for m in reversed(request.messages) if m.role == "user"), "")


class RecordedExchange(BaseModel):
    """One line of a recording file."""

    key: str
    request: ChatRequest
    response: ChatResponse


def load_recordings(path: str | Path) -> list[RecordedExchange]:
    """Read a JSONL recording; a malformed line raises ValueError naming the file and line number."""
    exchanges: list[RecordedExchange] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            exchanges.append(RecordedExchange.model_validate_json(line))
        except ValidationError as exc:
            raise ValueError(f"{path}:{number}: not a recorded exchange: {exc.errors()[0]['msg']}") from exc
    return exchanges


class ScriptedBackend:
    """`ChatBackend` test double answering from rules, a queue, or recordings (see the module docstring)."""

    kind = "scripted"

    def __init__(
        self,
        responses: Iterable[Reply] = (),
        *,
        rules: Sequence[Rule] = (),
        recordings: Iterable[RecordedExchange] = (),
        default: Reply | None = None,
        name: str = "scripted",
        model: str = "scripted",
    ) -> None:
        self.name = name
        self._model = model
        self._queue: deque[Reply] = deque(responses)
        self._rules: list[RuleFunction] = [self._as_function(rule) for rule in rules]
        self._recorded: dict[str, deque[ChatResponse]] = {}
        for exchange in recordings:
            self._recorded.setdefault(exchange.key, deque()).append(exchange.response)
        self._default = default
        self.requests: list[ChatRequest] = []
        self.batches: list[tuple[ChatRequest, int]] = []  # complete_many calls: (request, n)
        self.usage_log = UsageLog()
        self.closed = False

    @classmethod
    def from_recording(cls, path: str | Path, *, name: str | None = None, model: str | None = None) -> ScriptedBackend:
        """A replaying backend over a JSONL file written by `RecordingBackend`."""
        exchanges = load_recordings(path)
        recorded_model = exchanges[0].response.model if exchanges else "scripted"
        return cls(recordings=exchanges, name=name or f"replay:{Path(path).name}", model=model or recorded_model)

    # -- ChatBackend --------------------------------------------------------------------------------------
    @property
    def model(self) -> str:
        return self._model

    def cache_key(self) -> str:
        return json.dumps({"backend": self.kind, "name": self.name, "model": self._model}, sort_keys=True)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        try:
            reply = self._answer(request)
            if isinstance(reply, BaseException):
                raise reply
        except BackendError as exc:
            self._record(request, None, error=str(exc))
            raise
        response = reply if isinstance(reply, ChatResponse) else self._response(request, reply)
        self._record(request, response)
        return response

    async def complete_many(self, request: ChatRequest, n: int) -> list[ChatResponse]:
        """`n` samples in one "request", like an endpoint that supports `n`: answered one by one in order,
        sample i with seed `draw_seed(seed, i)`, so a rule can answer per seed; recorded in `batches`. As on a
        real endpoint the prompt is processed once: the first choice carries its tokens, every choice its own
        completion's."""
        self.batches.append((request, n))
        draw = request.draw or GREEDY
        responses = [
            await self.complete(
                request.model_copy(update={"draw": draw.model_copy(update={"seed": draw_seed(draw.seed, i)})})
            )
            for i in range(n)
        ]
        return [
            response
            if i == 0
            else response.model_copy(update={"usage": response.usage.model_copy(update={"prompt_tokens": 0})})
            for i, response in enumerate(responses)
        ]

    async def aclose(self) -> None:
        self.closed = True

    # -- inspection helpers for tests ---------------------------------------------------------------------
    @property
    def remaining(self) -> int:
        """Canned responses not consumed yet."""
        return len(self._queue)

    @property
    def prompts(self) -> list[str]:
        """The last user message of every request received, in order."""
        return [_last_user_message(r) for r in self.requests]

    def __repr__(self) -> str:
        return f"ScriptedBackend(name={self.name!r}, model={self._model!r})"

    # -- internals ----------------------------------------------------------------------------------------
    @staticmethod
    def _as_function(rule: Rule) -> RuleFunction:
        if callable(rule):
            return rule
        pattern, reply = rule
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern

        def match(request: ChatRequest) -> Reply | None:
            return reply if compiled.search(_last_user_message(request)) else None

        return match

    def _answer(self, request: ChatRequest) -> Reply:
        for rule in self._rules:
            reply = rule(request)
            if reply is not None:
                return reply
        if self._queue:
            return self._queue.popleft()
        if self._recorded:
            key = request_fingerprint(request)
            recorded = self._recorded.get(key)
            if recorded:
                return recorded.popleft() if len(recorded) > 1 else recorded[0]
            if self._default is None:
                raise RecordingMissingError(
                    f"{self!r} has no recording for request {key[:16]} (operator={request.operator}); "
                    f"last user message starts: {_last_user_message(request)[:120]!r}. Re-record the run."
                )
        if self._default is not None:
            return self._default
        raise ScriptExhaustedError(
            f"{self!r} has no response left for request #{len(self.requests)} "
            f"(operator={request.operator}); last user message starts: {_last_user_message(request)[:120]!r}"
        )

    def _response(self, request: ChatRequest, text: str) -> ChatResponse:
        prompt_tokens = sum(approximate_tokens(m.content) for m in request.messages)
        return ChatResponse(
            text=text,
            model=self._model,
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=approximate_tokens(text)),
            finish_reason="stop",
        )

    def _record(self, request: ChatRequest, response: ChatResponse | None, error: str | None = None) -> None:
        self.usage_log.add(
            UsageRecord(
                backend=self.kind,
                model=self._model,
                operator=request.operator,
                node_id=request.node_id,
                prompt_tokens=response.usage.prompt_tokens if response else 0,
                completion_tokens=response.usage.completion_tokens if response else 0,
                ok=response is not None,
                error=error,
            )
        )


class RecordingBackend:
    """Wraps any backend and appends every successful request/response pair to a JSONL file.

    The file is the replay format of `ScriptedBackend.from_recording`. Failed calls are not recorded
    (they propagate unchanged). Recording does not change results, so the cache key is the inner one.
    """

    def __init__(self, inner: ChatBackend, path: str | Path) -> None:
        self.inner = inner
        self.path = Path(path)
        self._lock = anyio.Lock()

    @property
    def model(self) -> str:
        return self.inner.model

    def cache_key(self) -> str:
        return self.inner.cache_key()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        response = await self.inner.complete(request)
        await self._write(request, response)
        return response

    async def complete_many(self, request: ChatRequest, n: int) -> list[ChatResponse]:
        """Sample i is recorded under seed `draw_seed(seed, i)`: the request `ScriptedBackend.complete_many`
        replays it as, whether or not the inner backend supports `n`."""
        responses = await complete_many(self.inner, request, n)
        draw = request.draw or GREEDY
        for index, response in enumerate(responses):
            seeded = draw.model_copy(update={"seed": draw_seed(draw.seed, index)})
            await self._write(request.model_copy(update={"draw": seeded}), response)
        return responses

    async def _write(self, request: ChatRequest, response: ChatResponse) -> None:
        exchange = RecordedExchange(key=request_fingerprint(request), request=request, response=response)
        line = exchange.model_dump_json() + "\n"
        async with self._lock, await anyio.open_file(self.path, "a", encoding="utf-8") as handle:
            await handle.write(line)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __repr__(self) -> str:
        return f"RecordingBackend({self.inner!r}, path={str(self.path)!r})"
