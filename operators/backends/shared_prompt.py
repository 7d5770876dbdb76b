"""One `n` request for several sampled calls of the same prompt.

Why: a node with `samples: k` runs its operator k times on the same input. The k-1 sampled runs send the
same first prompt; on a backend that supports `n` (vLLM's OpenAI-compatible server) that prompt should be
processed once, as one request with n = k-1, instead of k-1 times. The operators themselves stay single
calls: each sampled run talks to its own `member()` view of a `SharedPromptBatch`, which holds the members'
first requests until every member has either asked or finished, then sends the identical ones as one
`complete_many` request and hands each member its choice. Later requests of a member (re-asks, follow-ups)
differ per member and go straight to the backend. A shared call that is interrupted leaves the members to
ask on their own, so a timeout of one run never strands the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

import anyio

from operators.backends.base import BackendError, ChatBackend, ChatRequest, ChatResponse

__all__ = ["BatchMember", "SharedPromptBatch"]


class _ManyBackend(ChatBackend, Protocol):
    async def complete_many(self, request: ChatRequest, n: int) -> list[ChatResponse]: ...


@dataclass
class _Slot:
    request: ChatRequest
    response: ChatResponse | None = None
    error: BackendError | None = None
    rode_along: bool = False  # answered by a request another member's slot stands for
    prompt_tokens: int = 0  # the prompt tokens of the shared request that answered it (0: not shared)


def _prompt_key(request: ChatRequest) -> str:
    """What must be equal for two requests to share one `n` request: everything but the seed and metadata."""
    payload = request.model_dump(mode="json", exclude={"node_id": True, "operator": True, "draw": {"seed"}})
    return json.dumps(payload, sort_keys=True)


class SharedPromptBatch:
    """Coalesces the first request of each of `members` concurrent calls into `complete_many` requests."""

    def __init__(self, inner: _ManyBackend, members: int) -> None:
        self._inner = inner
        self._undecided = members  # members that have neither sent a first request nor finished
        self._slots: list[_Slot] = []
        self._ready = anyio.Event()
        self._done = anyio.Event()
        self._claimed = False
        self._prompt_claimed = False
        self.shared_requests = 0  # complete_many requests sent (for tests and logs)

    async def sent_nothing(self) -> bool:
        """Once every member has decided: True when no member sent a first request through the batch (all
        were answered otherwise, e.g. from a memo), so no request of the batch processed the prompt."""
        await self._ready.wait()
        return not self._slots

    def claim_prompt(self) -> bool:
        """True for the first caller only, once the batch sent nothing: who pays the prompt nobody sent."""
        if self._slots or self._prompt_claimed:
            return False
        self._prompt_claimed = True
        return True

    def member(self) -> BatchMember:
        return BatchMember(self)

    def _decided(self) -> None:
        self._undecided -= 1
        if self._undecided <= 0:
            self._ready.set()

    async def _first(self, request: ChatRequest, slot: _Slot) -> ChatResponse:
        self._slots.append(slot)
        self._decided()
        await self._ready.wait()
        if not self._claimed:
            self._claimed = True
            try:
                await self._send()
            finally:
                self._done.set()
        else:
            await self._done.wait()
        if slot.error is not None:
            raise slot.error
        if slot.response is not None:
            return slot.response
        return await self._inner.complete(request)  # alone with its prompt, or the shared call was interrupted

    async def _send(self) -> None:
        groups: dict[str, list[_Slot]] = {}
        for slot in self._slots:
            groups.setdefault(_prompt_key(slot.request), []).append(slot)
        for group in groups.values():
            if len(group) < 2:
                continue
            self.shared_requests += 1
            try:
                responses = await self._inner.complete_many(group[0].request, len(group))
            except BackendError as exc:
                for slot in group:
                    slot.error = exc
                continue
            prompt_tokens = responses[0].usage.prompt_tokens if responses else 0
            for index, (slot, response) in enumerate(zip(group, responses, strict=False)):
                slot.response = response
                slot.rode_along = index > 0
                slot.prompt_tokens = prompt_tokens


class BatchMember:
    """One call's view of the batch: its first request is shared, the rest go straight to the backend."""

    def __init__(self, batch: SharedPromptBatch) -> None:
        self._batch = batch
        self._asked = False
        self._slot: _Slot | None = None

    async def pays_unsent_prompt(self) -> bool:
        """For a member answered without a request (a reused result): whether it pays the batch's prompt, as
        the one member standing for a request the batch would otherwise have sent. Leaves the batch first."""
        self.finished()
        return await self._batch.sent_nothing() and self._batch.claim_prompt()

    @property
    def shared_prompt_tokens(self) -> int | None:
        """The prompt tokens of the shared request that answered its first request (None: not shared)."""
        return self._slot.prompt_tokens if self._slot is not None and self._slot.prompt_tokens else None

    @property
    def requests_saved(self) -> int:
        """1 when this member's first request rode along in another member's `n` request (for call counts)."""
        return 1 if self._slot is not None and self._slot.rode_along else 0

    @property
    def model(self) -> str:
        return self._batch._inner.model

    def cache_key(self) -> str:
        return self._batch._inner.cache_key()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if self._asked:
            return await self._batch._inner.complete(request)
        self._asked = True
        self._slot = _Slot(request)
        return await self._batch._first(request, self._slot)

    def finished(self) -> None:
        """The call is over (done, failed or cancelled): the others stop waiting for its first request."""
        if not self._asked:
            self._asked = True
            self._batch._decided()

    async def aclose(self) -> None:
        """No-op: the backend belongs to the engine's owner."""
