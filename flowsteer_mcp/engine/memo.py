"""Per-node memoisation: reuse an operator result when nothing that could change it has changed.

Why: the canvas re-runs the whole workflow after every edit; with a content-hash key per node call, an edit
only re-runs the nodes it affects (the edited node and everything downstream whose input changed).

The key covers the node id, operator, prompt, the node's full `OperatorInput` (which already holds every
upstream output it can see), the loop iteration, the backend identity (model + sampling), the engine's
runtime settings and the call's draw (temperature, top-p, seed): an identical greedy call is reused, while
two samples (different seeds) never share an entry. Only completed calls are stored, so a timed-out or
cancelled call is never replayed; a failed one only under the `charged` scope, and never an outage
(`NodeCaller._remember`).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, Field

from operators.backends.base import GREEDY, DrawSettings
from operators.base import OperatorInput, OperatorOutput

if TYPE_CHECKING:
    from flowsteer_mcp.engine.memo_store import MemoStore

DEFAULT_MEMO_ENTRIES = 2048


def digest(payload: Any) -> str:
    """Stable sha256 of a JSON-able payload (sorted keys, non-JSON values stringified)."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def inputs_digest(inputs: OperatorInput) -> str:
    return digest(inputs.model_dump(mode="json"))[:16]


def memo_key(
    *,
    node_id: str,
    operator: str,
    prompt: str | None,
    inputs: OperatorInput,
    iteration: int | None,
    backend_key: str,
    settings: dict[str, Any],
    draw: DrawSettings = GREEDY,
    scope: str | None = None,
) -> str:
    """The memo key of one node call; `scope` (a workflow id) keeps the runs of different workflows apart."""
    return digest(
        {
            "scope": scope,
            "draw": draw.model_dump(mode="json"),
            "node_id": node_id,
            "operator": operator,
            "prompt": prompt,
            "inputs": inputs.model_dump(mode="json"),
            "iteration": iteration,
            "backend": backend_key,
            "settings": settings,
        }
    )


class MemoEntry(BaseModel):
    """A node result, what it cost when it was computed, and which workflows paid for it."""

    output: OperatorOutput
    llm_calls: int = 0
    tokens: int = 0
    latency_s: float = 0.0
    paid_by: set[str] = Field(default_factory=set)  # workflows charged for it (memo scope "charged": each pays once)
    # The call's first request, so a workflow reusing it pays for it as its own batching would have:
    requested: bool = False  # whether the call sent any request at all
    first_prompt_tokens: int = 0  # the prompt tokens of the first request (of the shared `n` request it rode in)
    paid_prompt_tokens: int = 0  # how many of those `tokens` counts (0 when it rode in another draw's request)
    first_call_counted: int = 0  # 1 when `llm_calls` counts the first request (0 when it rode along)

    def charge(self, *, pays_first_request: bool) -> tuple[int, int]:
        """(tokens, LLM calls) a workflow pays for this call, made in its own requests: the completions and
        later requests as they were, and the first request's prompt (and the request as a call) only when the
        workflow would have sent that request itself; a draw that would have ridden in another draw's `n`
        request pays no prompt. Why not the recorded cost: it depends on how the maker batched the call (a draw
        that rode in a 7-draw request carries no prompt, the same draw made alone carries a whole one)."""
        if not self.requested:
            return self.tokens, self.llm_calls
        first = 1 if pays_first_request else 0
        tokens = self.tokens - self.paid_prompt_tokens + first * self.first_prompt_tokens
        calls = self.llm_calls - self.first_call_counted + first
        return tokens, calls


class MemoCache:
    """Bounded LRU of node results, shared by every run of one engine (a single event loop uses it).

    It also knows which keys are being computed right now (`computing`), so a run that needs a result another
    run is computing can wait for it instead of asking the executor a second time. With a `store`, every entry
    is also written to that file and a miss looks there, so the results outlive the process (`memo_store`)."""

    def __init__(self, max_entries: int = DEFAULT_MEMO_ENTRIES, *, store: MemoStore | None = None) -> None:
        if max_entries < 1:
            raise ValueError("MemoCache needs room for at least one entry (max_entries >= 1)")
        self.max_entries = max_entries
        self.store = store
        self._entries: OrderedDict[str, MemoEntry] = OrderedDict()
        self._computing: dict[str, anyio.Event] = {}
        self.hits = 0
        self.misses = 0

    @asynccontextmanager
    async def computing(self, key: str) -> AsyncIterator[None]:
        """Mark `key` as being computed for the duration of the block (what `wait_for` waits on)."""
        done = self._computing.setdefault(key, anyio.Event())
        try:
            yield
        finally:
            if self._computing.get(key) is done:
                del self._computing[key]
            done.set()

    def is_computing(self, key: str) -> bool:
        return key in self._computing

    async def wait_for(self, key: str) -> None:
        """Return when the computation of `key` under way ends (at once when none is); it may have failed."""
        event = self._computing.get(key)
        if event is not None:
            await event.wait()

    def charge(self, key: str, payer: str | None) -> bool:
        """Record that `payer` paid for the entry; True when it had not yet (so it must be charged now)."""
        entry = self._held(key)
        if entry is None or payer is None or payer in entry.paid_by:
            return False
        entry.paid_by.add(payer)
        if self.store is not None:
            self.store.put(key, entry)
        return True

    def get(self, key: str) -> MemoEntry | None:
        entry = self._held(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        return entry.model_copy(deep=True)

    def put(self, key: str, entry: MemoEntry) -> None:
        """Store `entry`; which results may be stored is the caller's rule (`NodeCaller._remember`)."""
        self._hold(key, entry.model_copy(deep=True))
        if self.store is not None:
            self.store.put(key, entry)

    def _held(self, key: str) -> MemoEntry | None:
        """The entry of `key`, from memory, else from the store (then held in memory); None when neither has it."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry
        found = self.store.get(key) if self.store is not None else None
        if found is not None:
            self._hold(key, found)
        return found

    def _hold(self, key: str, entry: MemoEntry) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget the entries held in memory (a store keeps its own)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        if key in self._entries:
            return True
        return isinstance(key, str) and self.store is not None and self.store.get(key) is not None
