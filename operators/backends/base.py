"""The executor-LLM seam: one request/response shape for every backend."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field


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


class ChatRequest(BaseModel):
    messages: list[ChatMessage]
    sampling: SamplingParams | None = None  # None: the backend's configured defaults
    max_tokens: int | None = None  # caps the reply length of this call below the sampling's max_tokens
    operator: str | None = None  # for usage records
    node_id: str | None = None


def effective_sampling(request: ChatRequest, defaults: SamplingParams) -> SamplingParams:
    """The sampling a backend applies to `request`: its own or the defaults, capped by `max_tokens`."""
    sampling = request.sampling or defaults
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


class BackendError(Exception):
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
