"""A ChatBackend wrapper that counts the LLM calls and tokens of one node call.

Why: traces and rewards need cost per node, and operators should not have to report it themselves. Each
node call gets its own wrapper around the shared backend; requests are stamped with the node id and
operator so the backend's own usage records are attributed too, and with the run's affinity so a
multi-endpoint executor keeps one run on one replica (its prefix cache).
"""

from __future__ import annotations

from operators.backends.base import ChatBackend, ChatRequest, ChatResponse


class MeteredBackend:
    """Delegates to `inner`, counting requests (failed ones included) and the tokens of answered ones."""

    def __init__(self, inner: ChatBackend, *, node_id: str, operator: str, affinity: str | None = None) -> None:
        self._inner = inner
        self.node_id = node_id
        self.operator = operator
        self.affinity = affinity
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.first_prompt_tokens = 0  # what the first answered request's usage counted for its prompt (0: rode along)

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def cache_key(self) -> str:
        return self._inner.cache_key()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        stamped = request.model_copy(
            update={
                "node_id": request.node_id or self.node_id,
                "operator": request.operator or self.operator,
                "affinity": request.affinity or self.affinity,
            }
        )
        self.calls += 1
        response = await self._inner.complete(stamped)
        if self.prompt_tokens == 0 and self.completion_tokens == 0:
            self.first_prompt_tokens = response.usage.prompt_tokens
        self.prompt_tokens += response.usage.prompt_tokens
        self.completion_tokens += response.usage.completion_tokens
        return response

    async def aclose(self) -> None:
        """No-op: the shared backend belongs to the engine's owner, not to one node call."""
