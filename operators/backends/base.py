"""The executor-LLM seam: one request/response shape for every backend."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from operators.errors import OperatorsError


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class SamplingParams(BaseModel):
    """Sampling settings; part of the memoisation key of every node."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)


class DrawSettings(BaseModel):
    """The per-call part of sampling (temperature, top-p, seed) that the engine sets for every operator call.

    Why apart from `SamplingParams`: the reply budget and stop strings stay the backend's configuration,
    while the engine decides per call whether it is the greedy draw or a seeded sample.
    """

    model_config = ConfigDict(frozen=True)

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


GREEDY = DrawSettings()


class ChatRequest(BaseModel):
    messages: list[ChatMessage]
    sampling: SamplingParams | None = None  # None: the backend's configured defaults
    draw: DrawSettings | None = None  # overrides temperature, top_p and seed of the sampling in effect
    max_tokens: int | None = None  # caps the reply length of this call below the sampling's max_tokens
    operator: str | None = None  # for usage records
    node_id: str | None = None
    # Routing only, never part of a memo or replay key nor of a recording (excluded from dumps): requests with
    # the same affinity (one workflow's runs) go to the same replica of a multi-endpoint executor, whose prefix
    # cache holds their shared prompt parts.
    affinity: str | None = Field(default=None, exclude=True)


def effective_sampling(request: ChatRequest, defaults: SamplingParams) -> SamplingParams:
    """The sampling a backend applies to `request`: its own or the defaults, with the call's draw settings
    applied on top and the reply length capped by `max_tokens`."""
    sampling = request.sampling or defaults
    if request.draw is not None:
        sampling = sampling.model_copy(update=request.draw.model_dump())
    if request.max_tokens is not None and request.max_tokens < sampling.max_tokens:
        sampling = sampling.model_copy(update={"max_tokens": request.max_tokens})
    return sampling


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatResponse(BaseModel):
    text: str
    reasoning: str | None = None  # `reasoning_content` of reasoning models, kept apart from the answer
    model: str
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    finish_reason: str | None = None


class BackendError(OperatorsError):
    """A call failed after the backend's own retries; `retryable` says whether it was transient."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@runtime_checkable
class ChatBackend(Protocol):
    """Anything that can answer a chat request: an OpenAI-compatible endpoint, a local model, a script."""

    @property
    def model(self) -> str: ...

    def cache_key(self) -> str:
        """Identity of (backend, model, default sampling) for memoisation."""
        ...

    async def complete(self, request: ChatRequest) -> ChatResponse: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class SupportsCompleteMany(Protocol):
    """Optional backend capability: `n` samples of one prompt in one request (OpenAI-compatible `n`, as vLLM
    serves it), so the prompt is processed once. Responses come in choice order; the request's usage is
    split so the totals stay right (prompt tokens on the first response)."""

    async def complete_many(self, request: ChatRequest, n: int) -> list[ChatResponse]: ...


def draw_seed(seed: int | None, index: int) -> int | None:
    """The seed of the `index`-th of several samples that share `seed` (index 0 keeps it)."""
    return None if seed is None else (seed + index) % 2**31


async def complete_many(backend: ChatBackend, request: ChatRequest, n: int) -> list[ChatResponse]:
    """`n` samples of `request`: one request where the backend supports `n`, otherwise `n` calls whose seeds
    are `draw_seed(seed, i)` so the samples stay distinct and reproducible."""
    if n < 1:
        raise ValueError(f"complete_many needs n >= 1; got {n}")
    if isinstance(backend, SupportsCompleteMany):
        return await backend.complete_many(request, n)
    draw = request.draw or GREEDY
    responses = []
    for index in range(n):
        seeded = draw.model_copy(update={"seed": draw_seed(draw.seed, index)})
        responses.append(await backend.complete(request.model_copy(update={"draw": seeded})))
    return responses


def split_usage(usage: Usage, n: int) -> list[Usage]:
    """One request's usage over its `n` choices: the prompt counted once (first), completions shared out."""
    share, rest = divmod(usage.completion_tokens, n)
    return [
        Usage(prompt_tokens=usage.prompt_tokens if i == 0 else 0, completion_tokens=share + (rest if i == 0 else 0))
        for i in range(n)
    ]
