"""Change following: which workflows changed since a client last looked, by polling the store's `updated_at`s.

Polling (rather than a hook in the workbench) is what lets one viewer follow both an in-process store and a
SQLite file that another process (a stdio server) writes. However many browsers are open, the store is asked
at most once per `poll_s`: every subscriber reads the one shared snapshot, and whichever subscriber finds it
stale refreshes it for all. No background task is needed, so nothing outlives the last client and nothing
needs the app's lifespan (which a mounted sub-app does not get).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import anyio

from flowsteer_mcp.store.base import WorkflowStore

Versions = dict[str, float]  # workflow_id -> updated_at


@runtime_checkable
class VersionedStore(Protocol):
    """A store that can list `(workflow_id, updated_at)` without loading states (SQLiteStore can)."""

    async def versions(self) -> Versions: ...


async def store_versions(store: WorkflowStore) -> Versions:
    if isinstance(store, VersionedStore):
        return await store.versions()
    return {record.workflow_id: record.updated_at for record in await store.list()}


@dataclass(frozen=True)
class Change:
    kind: Literal["changed", "removed"]
    workflow_id: str
    updated_at: float | None = None

    def sse(self) -> str:
        """This change as one server-sent event."""
        data = {"workflow_id": self.workflow_id, "updated_at": self.updated_at}
        return f"event: {self.kind}\ndata: {json.dumps(data)}\n\n"


def diff(before: Mapping[str, float], after: Mapping[str, float]) -> list[Change]:
    """Changes from `before` to `after`: new or re-stamped workflows are changed, vanished ones removed."""
    changes = [
        Change("changed", workflow_id, updated_at)
        for workflow_id, updated_at in after.items()
        if before.get(workflow_id) != updated_at
    ]
    changes += [Change("removed", workflow_id) for workflow_id in before if workflow_id not in after]
    return changes


class ChangeFeed:
    """One per viewer app: the shared, rate-limited view of the store that every event stream reads."""

    def __init__(self, store: WorkflowStore, *, poll_s: float = 0.5) -> None:
        if poll_s <= 0:
            raise ValueError("poll_s must be positive")
        self.store = store
        self.poll_s = poll_s
        self._lock = anyio.Lock()
        self._snapshot: Versions = {}
        self._taken_at: float | None = None
        self.polls = 0  # how often the store was actually asked (tests check the sharing)
        self.closed = False

    def close(self) -> None:
        """End every subscription within one poll (a server shutting down: open streams would hold it up)."""
        self.closed = True

    async def snapshot(self) -> Versions:
        """The store's versions, at most `poll_s` old; the store is asked only when the shared copy is older."""
        async with self._lock:
            now = anyio.current_time()
            if self._taken_at is None or now - self._taken_at >= self.poll_s:
                self._snapshot = await store_versions(self.store)
                self._taken_at = anyio.current_time()
                self.polls += 1
            return dict(self._snapshot)

    async def changes(self, since: Versions | None = None) -> AsyncIterator[list[Change]]:
        """Batches of changes since `since` (default: now; empty batches mark a quiet poll), until closed."""
        seen = since if since is not None else await self.snapshot()
        while not self.closed:
            await anyio.sleep(self.poll_s)
            if self.closed:
                return
            current = await self.snapshot()
            yield diff(seen, current)
            seen = current


KEEPALIVE = ": keepalive\n\n"


async def event_stream(
    feed: ChangeFeed, *, keepalive_s: float = 15.0, since: Versions | None = None
) -> AsyncIterator[str]:
    """Server-sent events for `feed`: a `retry` hint, then one event per change since `since` and a keepalive
    comment every `keepalive_s` of silence. Ends when the consumer stops iterating (client gone) or the feed
    closes. Take `since` before the response starts, so no change falls between the request and the stream."""
    yield "retry: 2000\n\n"
    quiet_since = anyio.current_time()
    async for batch in feed.changes(since):
        for change in batch:
            yield change.sse()
        now = anyio.current_time()
        if batch:
            quiet_since = now
        elif now - quiet_since >= keepalive_s:
            yield KEEPALIVE
            quiet_since = now
