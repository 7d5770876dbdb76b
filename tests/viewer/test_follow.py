"""Change following: diffs of `updated_at`s, one shared poll for every client, and a read-only SQLite follower
that sees what another connection (a stdio server) commits."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import pytest

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.store.base import StoredWorkflow
from flowsteer_mcp.store.memory import MemoryStore
from flowsteer_mcp.store.sqlite import SQLiteStore, StoreSchemaError
from flowsteer_mcp.viewer.follow import KEEPALIVE, Change, ChangeFeed, diff, event_stream, store_versions


def record(workflow_id: str, updated_at: float, problem: str = "What is 2 + 2?") -> StoredWorkflow:
    state = CanvasState(task=TaskSpec(problem=problem))
    return StoredWorkflow(workflow_id=workflow_id, state=state, created_at=1.0, updated_at=updated_at)


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.polls = 0

    async def versions(self) -> dict[str, float]:
        self.polls += 1
        return await super().versions()


def test_diff_reports_new_restamped_and_removed_workflows() -> None:
    changes = diff({"same": 1.0, "edited": 1.0, "gone": 1.0}, {"same": 1.0, "edited": 2.0, "new": 3.0})
    assert changes == [Change("changed", "edited", 2.0), Change("changed", "new", 3.0), Change("removed", "gone")]
    assert Change("changed", "w1", 2.5).sse() == 'event: changed\ndata: {"workflow_id": "w1", "updated_at": 2.5}\n\n'
    assert json.loads(Change("removed", "w1").sse().split("data: ")[1]) == {"workflow_id": "w1", "updated_at": None}


async def test_clients_share_one_poll_per_interval() -> None:
    store = CountingStore()
    await store.put(record("w1", 1.0))
    feed = ChangeFeed(store, poll_s=3600)
    first, second = await feed.snapshot(), await feed.snapshot()
    assert first == second == {"w1": 1.0}
    assert store.polls == 1 and feed.polls == 1


async def test_feed_yields_a_change_after_a_put() -> None:
    store = MemoryStore()
    await store.put(record("w1", 1.0))
    feed = ChangeFeed(store, poll_s=0.01)
    with anyio.fail_after(10):
        batches = feed.changes()
        assert await anext(batches) == []
        await store.put(record("w1", 2.0))
        batch = await anext(batches)
        while not batch:
            batch = await anext(batches)
        await batches.aclose()  # type: ignore[attr-defined]
    assert batch == [Change("changed", "w1", 2.0)]


async def test_event_stream_sends_changes_removals_and_keepalives() -> None:
    store = MemoryStore()
    await store.put(record("w1", 1.0))
    stream = event_stream(ChangeFeed(store, poll_s=0.01), keepalive_s=0.0)
    with anyio.fail_after(10):
        assert await anext(stream) == "retry: 2000\n\n"
        assert await anext(stream) == KEEPALIVE  # a quiet poll
        await store.delete("w1")
        event = await anext(stream)
        while event == KEEPALIVE:
            event = await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
    assert event.startswith("event: removed\n") and '"workflow_id": "w1"' in event


async def test_closing_the_feed_ends_every_stream() -> None:
    """A stopping server closes the feed so open event streams end instead of holding the shutdown up."""
    feed = ChangeFeed(MemoryStore(), poll_s=0.01)
    stream = event_stream(feed)
    with anyio.fail_after(10):
        assert await anext(stream) == "retry: 2000\n\n"
        feed.close()
        rest = [event async for event in stream]
    assert rest == []


async def test_store_versions_match_the_records() -> None:
    store = MemoryStore()
    await store.put(record("a", 1.5))
    await store.put(record("b", 2.5))
    assert await store_versions(store) == {"a": 1.5, "b": 2.5}


async def test_read_only_sqlite_follows_a_writer_and_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "workflows.sqlite"
    writer = SQLiteStore(path)
    await writer.put(record("w1", 1.0))
    reader = SQLiteStore(path, read_only=True)
    try:
        assert await store_versions(reader) == {"w1": 1.0}
        feed = ChangeFeed(reader, poll_s=0.01)
        batches = feed.changes()
        with anyio.fail_after(10):
            assert await anext(batches) == []
            await writer.put(record("w1", 2.0, problem="Edited while the viewer follows"))
            batch = await anext(batches)
            while not batch:
                batch = await anext(batches)
            await batches.aclose()  # type: ignore[attr-defined]
        assert batch == [Change("changed", "w1", 2.0)]
        seen = await reader.get("w1")
        assert seen is not None and seen.state.task.problem == "Edited while the viewer follows"
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await reader.put(record("w2", 3.0))
        assert await writer.versions() == {"w1": 2.0}
    finally:
        await reader.close()
        await writer.close()


def test_read_only_sqlite_refuses_a_missing_file_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "workflows.sqlite"
    with pytest.raises(StoreSchemaError, match="does not exist"):
        SQLiteStore(path, read_only=True)
    assert not path.parent.exists()


def test_read_only_sqlite_refuses_a_file_of_another_schema(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    sqlite3.connect(path).close()  # an empty database: schema version 0, never migrated read-only
    with pytest.raises(StoreSchemaError, match="schema version 0"):
        SQLiteStore(path, read_only=True)


async def test_changes_count_from_the_snapshot_taken_before_the_stream() -> None:
    """The events route takes `since` before its headers go out; a change after that moment is reported even
    when the stream's own first look already sees it."""
    store = MemoryStore()
    feed = ChangeFeed(store, poll_s=0.01)
    since = await feed.snapshot()
    await store.put(record("w1", 2.0))
    await anyio.sleep(0.02)  # the shared snapshot is stale now: the stream's first look sees w1 already
    stream = feed.changes(since)
    batch = await stream.__anext__()
    assert batch == [Change("changed", "w1", 2.0)]
    await stream.aclose()
