"""The `openai` executor backend: any OpenAI-compatible chat endpoint (vLLM, OpenAI, Ollama, DeepSeek, ...).

Why it looks the way it does:
- One long-lived `openai.AsyncOpenAI` client per backend, so connections are pooled across calls.
- The client's own retries are disabled (`max_retries=0`): the retry policy here is ours, bounded,
  observable and tested. Retried: 408/409/425/429/5xx, timeouts, connection errors and unparseable
  replies; full-jitter exponential backoff, raised to the server's `Retry-After` when it sends one.
- A global concurrency limit per backend, held only while a request is on the wire (not while backing off).
- Every call, successful or not, yields a `UsageRecord` (tokens, latency, attempts, operator, node id).
- No silent model substitution: a reply from another model, or a 404 for the requested one, is an error.
  A dated snapshot of the requested name (`gpt-4o-mini` -> `gpt-4o-mini-2024-07-18`) is the same model.
- The API key is held as a `SecretStr` and never appears in logs, errors, `repr` or `cache_key`.
- Several endpoints serving the same model (`base_urls`, replicas) share the one client through a routing
  transport (`operators/backends/replicas.py`): least in flight, one workflow run (`ChatRequest.affinity`)
  sticking to one replica, a dead replica's requests sent to the others at once, and a non-retryable error when
  none is left. `cache_key` names the first endpoint only, so adding a replica keeps memo keys valid.
"""

from __future__ import annotations

import json
import random
import re
import time
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import anyio
import openai
import structlog
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from operators.backends.base import (
    BackendError,
    ChatRequest,
    ChatResponse,
    SamplingParams,
    Usage,
    effective_sampling,
    split_usage,
)
from operators.backends.replicas import EPISODE_HEADER, NoReplicaLeftError, ReplicaPool, routed_client
from operators.backends.usage import UsageLog, UsageRecord
from operators.errors import OperatorsError

if TYPE_CHECKING:
    from collections.abc import Sequence

    import httpx2

__all__ = ["OpenAICompatBackend", "RetryPolicy", "display_url"]

log = structlog.get_logger(__name__)

REPLICAS_BASE_URL = "http://executor-replicas"  # the routed client's placeholder: the transport picks the host
MAX_AFFINITY_LEASES = 4096  # workflow runs remembered for stickiness (the oldest is forgotten first)
_NO_KEY_PLACEHOLDER = "no-key"  # the client insists on a key; keyless servers (local vLLM) ignore it
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
_SNIPPET_CHARS = 200


class RetryPolicy(BaseModel):
    """Bounded retries with exponential backoff and full jitter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: int = Field(default=4, ge=0, le=20)
    backoff_base_s: float = Field(default=0.5, ge=0.0)
    backoff_max_s: float = Field(default=20.0, ge=0.0)

    def delay_s(self, retry_index: int, rng: random.Random, retry_after_s: float | None = None) -> float:
        """Sleep before retry number `retry_index` (0-based): uniform in [0, min(max, base * 2^i)].

        A server's `Retry-After` raises the delay to at least that value, still capped by `backoff_max_s`.
        """
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2.0**retry_index))
        delay = rng.uniform(0.0, ceiling)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self.backoff_max_s))
        return delay


class _Failure(OperatorsError):
    """One failed attempt, classified."""

    def __init__(self, reason: str, *, retryable: bool, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.retry_after_s = retry_after_s


# Minimal shape of a chat completion: lenient about extras, strict about what we use.
class _Message(BaseModel):
    content: str | None = None
    reasoning_content: str | None = None  # vLLM / DeepSeek reasoning parsers
    reasoning: str | None = None  # newer vLLM and some gateways use this name


class _Choice(BaseModel):
    index: int = 0
    message: _Message
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Completion(BaseModel):
    model: str = Field(min_length=1)
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


def display_url(url: str) -> str:
    """`url` without user info and with its query hidden: safe for logs, errors and cache keys."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    query = "<redacted>" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _is_same_model(requested: str, served: str) -> bool:
    """Exact name, or a dated snapshot of it (`-2024-07-18`, `-0125`) as hosted APIs report."""
    if served == requested:
        return True
    return re.fullmatch(re.escape(requested) + r"-(\d{4}-\d{2}-\d{2}|\d{4})", served) is not None


def _snippet(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "..."


def _retry_after_s(headers: Any) -> float | None:
    value = headers.get("retry-after") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from LLM servers; the backoff applies


class OpenAICompatBackend:
    """`ChatBackend` over an OpenAI-compatible `/chat/completions` endpoint."""

    kind = "openai"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        base_urls: Sequence[str] | None = None,
        model: str,
        api_key: SecretStr | None = None,
        sampling: SamplingParams | None = None,
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        send_seed: bool = True,
        usage_log: UsageLog | None = None,
        http_client: httpx2.AsyncClient | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not model:
            raise ValueError("model must name the model to request from the endpoint")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if (base_url is None) == (not base_urls):
            raise ValueError("give exactly one of base_url (one endpoint) and base_urls (replicas of one model)")
        urls = [base_url] if base_url is not None else list(base_urls or [])
        # Replicas serve the same model: the first one names the endpoint in cache keys, logs and errors.
        self._base_url = urls[0]
        self._pool: ReplicaPool | None = None
        if len(urls) > 1:
            if http_client is not None:
                raise ValueError("base_urls route through their own HTTP client; http_client is for one endpoint")
            self._pool = ReplicaPool(urls, role="executor", max_leases=MAX_AFFINITY_LEASES)
            http_client = routed_client(self._pool, timeout_s=timeout_s, failover=True)
        self._model = model
        self._api_key = api_key
        self._sampling = sampling or SamplingParams()
        self._timeout_s = timeout_s
        self._retry = retry or RetryPolicy()
        self._max_tokens_field = max_tokens_field
        self._send_seed = send_seed
        self._limiter = anyio.CapacityLimiter(max_concurrency)
        self._rng = rng or random.Random()
        self._closed = False
        self.usage_log = usage_log if usage_log is not None else UsageLog()
        key = api_key.get_secret_value() if api_key is not None else ""
        self._client = openai.AsyncOpenAI(
            base_url=REPLICAS_BASE_URL if self._pool is not None else self._base_url,
            api_key=key or _NO_KEY_PLACEHOLDER,
            max_retries=0,  # our RetryPolicy decides
            timeout=timeout_s,
            http_client=http_client,
        )

    # -- ChatBackend ----------------------------------------------------------------------------------
    @property
    def model(self) -> str:
        return self._model

    @property
    def replicas(self) -> ReplicaPool | None:
        """The replica pool of a multi-endpoint backend (None with one endpoint)."""
        return self._pool

    @property
    def max_concurrency(self) -> int:
        return int(self._limiter.total_tokens)

    def cache_key(self) -> str:
        identity = {
            "backend": self.kind,
            "base_url": display_url(self._base_url),
            "model": self._model,
            "sampling": self._sampling.model_dump(mode="json"),
            **({} if self._send_seed else {"send_seed": False}),
        }
        return json.dumps(identity, sort_keys=True, separators=(",", ":"))

    async def complete(self, request: ChatRequest) -> ChatResponse:
        return (await self._call(request, 1))[0]

    async def complete_many(self, request: ChatRequest, n: int) -> list[ChatResponse]:
        """`n` samples of one prompt in one request (`n` choices), so the server processes the prompt once."""
        if n < 1:
            raise BackendError(f"complete_many needs n >= 1; got {n}", retryable=False)
        return await self._call(request, n)

    async def _call(self, request: ChatRequest, n: int) -> list[ChatResponse]:
        if self._closed:
            raise BackendError(f"{self!r} is closed", retryable=False)
        if not request.messages:
            raise BackendError("a chat request needs at least one message", retryable=False)
        arguments = self._arguments(request)
        if self._pool is not None and request.affinity is not None:
            arguments["extra_headers"] = {EPISODE_HEADER: request.affinity}
        if n > 1:
            arguments["n"] = n
        started = time.perf_counter()
        attempts = 0
        while True:
            attempts += 1
            try:
                responses = await self._attempt(arguments, n)
            except _Failure as failure:
                retries_used = attempts - 1
                if not failure.retryable or retries_used >= self._retry.max_retries:
                    raise self._give_up(request, failure, attempts, started) from None
                delay = self._retry.delay_s(retries_used, self._rng, failure.retry_after_s)
                log.warning(
                    "executor_retry",
                    **self._log_context(request),
                    attempt=attempts,
                    reason=self._scrub(failure.reason),
                    delay_s=round(delay, 4),
                )
                await anyio.sleep(delay)
                continue
            latency = time.perf_counter() - started
            for response in responses:
                response.latency_s = latency
                self._record_success(request, response, attempts)
            return responses

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._client.close()

    def __repr__(self) -> str:
        if self._pool is not None:
            urls = [display_url(url) for url in self._pool.urls]
            return f"OpenAICompatBackend(base_urls={urls!r}, model={self._model!r})"
        return f"OpenAICompatBackend(base_url={display_url(self._base_url)!r}, model={self._model!r})"

    # -- one attempt ----------------------------------------------------------------------------------
    def _arguments(self, request: ChatRequest) -> dict[str, Any]:
        sampling = effective_sampling(request, self._sampling)
        arguments: dict[str, Any] = {
            "model": self._model,
            "messages": [m.model_dump() for m in request.messages],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            self._max_tokens_field: sampling.max_tokens,
        }
        if sampling.seed is not None and self._send_seed:
            arguments["seed"] = sampling.seed
        if sampling.stop:
            arguments["stop"] = list(sampling.stop)
        return arguments

    async def _attempt(self, arguments: dict[str, Any], n: int) -> list[ChatResponse]:
        try:
            async with self._limiter:
                # The client's timeout bounds each socket phase; fail_after bounds the whole call, so a
                # server trickling bytes cannot hold a slot forever.
                with anyio.fail_after(self._timeout_s):
                    raw = await self._client.chat.completions.with_raw_response.create(
                        **arguments, timeout=self._timeout_s
                    )
        except TimeoutError:
            raise _Failure(f"timed out after {self._timeout_s:g}s", retryable=True) from None
        except NoReplicaLeftError as exc:  # every replica is dead: retrying cannot help
            raise _Failure(str(exc), retryable=False) from None
        except openai.APIError as exc:
            raise self._classify(exc) from None
        return self._parse(raw.http_response.content, n)

    def _classify(self, exc: openai.APIError) -> _Failure:
        if isinstance(exc, openai.APITimeoutError):
            return _Failure(f"timed out after {self._timeout_s:g}s", retryable=True)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc
            return _Failure(f"connection failed ({type(cause).__name__}: {cause})", retryable=True)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = _snippet(exc.response.content)
            if status == 404:
                return _Failure(
                    f"model {self._model!r} was not found at {display_url(self._base_url)} (HTTP 404: "
                    f"{detail}); no other model is substituted: serve it or configure an existing one",
                    retryable=False,
                )
            if status in (401, 403):
                return _Failure(
                    f"HTTP {status}: the endpoint rejected the credentials; check the API key environment "
                    f"variable configured for this model ({detail})",
                    retryable=False,
                )
            retryable = status in _RETRYABLE_STATUS or status >= 500
            return _Failure(
                f"HTTP {status}: {detail}",
                retryable=retryable,
                retry_after_s=_retry_after_s(exc.response.headers),
            )
        return _Failure(f"{type(exc).__name__}: {exc}", retryable=False)

    def _parse(self, body: bytes, n: int = 1) -> list[ChatResponse]:
        try:
            data = json.loads(body)
        except ValueError:
            raise _Failure(f"the reply is not JSON: {_snippet(body)!r}", retryable=True) from None
        if isinstance(data, dict) and "error" in data and "choices" not in data:
            # Some gateways report failures as HTTP 200 with an error object.
            raise _Failure(f"the endpoint answered with an error: {_snippet(json.dumps(data))}", retryable=True)
        try:
            completion = _Completion.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<body>'}: {e['msg']}" for e in exc.errors())
            raise _Failure(f"the reply is not a chat completion ({problems})", retryable=True) from None
        if not _is_same_model(self._model, completion.model):
            raise _Failure(
                f"requested model {self._model!r} but the endpoint answered as {completion.model!r}; "
                "refusing a substituted model",
                retryable=False,
            )
        if len(completion.choices) < n:
            raise _Failure(
                f"asked for {n} choices but the endpoint returned {len(completion.choices)}; it may not support `n`",
                retryable=False,
            )
        choices = sorted(completion.choices, key=lambda c: c.index)[:n]
        if n == 1 and not (choices[0].message.content or "").strip():
            raise _Failure(
                f"empty reply (finish_reason={choices[0].finish_reason!r}); if 'length', raise max_tokens",
                retryable=False,
            )
        # With n > 1 an empty choice is returned as it is: the operator rejects it and re-asks on its own.
        usage = completion.usage or _Usage()
        shares = split_usage(Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens), n)
        return [
            ChatResponse(
                text=choice.message.content or "",
                reasoning=choice.message.reasoning_content or choice.message.reasoning,
                model=completion.model,
                usage=share,
                finish_reason=choice.finish_reason,
            )
            for choice, share in zip(choices, shares, strict=True)
        ]

    # -- records --------------------------------------------------------------------------------------
    def _log_context(self, request: ChatRequest) -> dict[str, Any]:
        return {
            "backend": self.kind,
            "base_url": display_url(self._base_url),
            "model": self._model,
            "operator": request.operator,
            "node_id": request.node_id,
        }

    def _record_success(self, request: ChatRequest, response: ChatResponse, attempts: int) -> None:
        record = UsageRecord(
            backend=self.kind,
            model=response.model,
            operator=request.operator,
            node_id=request.node_id,
            prompt_tokens=response.usage.prompt_tokens,
            completion_tokens=response.usage.completion_tokens,
            latency_s=response.latency_s,
            attempts=attempts,
        )
        self.usage_log.add(record)
        log.debug(
            "executor_call",
            **self._log_context(request),
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            latency_s=round(record.latency_s, 4),
            attempts=attempts,
        )

    def _give_up(self, request: ChatRequest, failure: _Failure, attempts: int, started: float) -> BackendError:
        reason = self._scrub(failure.reason)
        latency = time.perf_counter() - started
        self.usage_log.add(
            UsageRecord(
                backend=self.kind,
                model=self._model,
                operator=request.operator,
                node_id=request.node_id,
                latency_s=latency,
                attempts=attempts,
                ok=False,
                error=reason,
            )
        )
        log.warning(
            "executor_call_failed",
            **self._log_context(request),
            attempts=attempts,
            latency_s=round(latency, 4),
            reason=reason,
            retryable=failure.retryable,
        )
        if failure.retryable:
            plural = "attempt" if attempts == 1 else "attempts"
            outcome = f"gave up after {attempts} {plural} (max_retries={self._retry.max_retries})"
        else:
            outcome = f"not retryable; failed at attempt {attempts}"
        message = f"{self!r}: {reason}; {outcome}"
        return BackendError(message, retryable=failure.retryable)

    def _scrub(self, text: str) -> str:
        """Remove the key from text a server produced (some echo it back in 401 bodies)."""
        key = self._api_key.get_secret_value() if self._api_key is not None else ""
        return text.replace(key, "***") if key else text
