"""The store contract (`flowsteer_mcp/store/base.py`), one suite for every store: memory, SQLite and PostgreSQL.

What a put acknowledged is what a get returns, whole; a history that extends the stored one and one that does
not both come back exactly; a failed put leaves the previous state; `stale` finds workflows by their last edit;
and a persistent store gives all of it back after it was closed and reopened (a server restart).
"""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.session import CanvasState, HistoryEntry
from flowsteer_mcp.store.base import StoredWorkflow, WorkflowStore, open_store


def entry(k: int) -> HistoryEntry:
    return HistoryEntry(round=k, source="act", input=f"turn {k}", ok=True, message=f"step {k}", dsl="Plan")


def record(workflow_id: str, steps: int, *, at: float = 1.0) -> StoredWorkflow:
    state = CanvasState(task=TaskSpec(problem=f"task of {workflow_id}"), rounds_used=steps)
    state.history = [entry(k) for k in range(1, steps + 1)]
    state.last_feedback = f"feedback after {steps} steps"
    return StoredWorkflow(workflow_id=workflow_id, state=state, created_at=at, updated_at=at + steps)


def stored(workflow_id: str, problem: str, *, at: float) -> StoredWorkflow:
    return StoredWorkflow(
        workflow_id=workflow_id, state=CanvasState(task=TaskSpec(problem=problem)), created_at=at, updated_at=at
    )


async def test_store_contract(store: WorkflowStore, store_url: str) -> None:
    assert store.persistent is (store_url != "memory")
    assert await store.get("wf_a") is None and await store.count() == 0
    await store.put(stored("wf_a", "first", at=1.0))
    await store.put(stored("wf_b", "second", at=2.0))
    updated = stored("wf_a", "first, edited", at=1.0)
    updated.state.rounds_used = 4
    await store.put(updated)
    got = await store.get("wf_a")
    assert got is not None and got.state.task.problem == "first, edited" and got.state.rounds_used == 4
    assert [r.workflow_id for r in await store.list()] == ["wf_a", "wf_b"]
    assert await store.count() == 2
    assert await store.delete("wf_a") is True
    assert await store.delete("wf_a") is False
    assert [r.workflow_id for r in await store.list()] == ["wf_b"]


async def test_each_put_is_read_back_whole_as_the_history_grows(store: WorkflowStore) -> None:
    for steps in range(0, 6):
        await store.put(record("wf_a", steps))
        assert await store.get("wf_a") == record("wf_a", steps)
    assert await store.list() == [record("wf_a", 5)]


async def test_a_history_that_is_not_an_extension_is_rewritten(store: WorkflowStore) -> None:
    """A shorter or a shifted history (e.g. trimmed to its newest entries) replaces the stored one."""
    await store.put(record("wf_a", 4))
    shifted = record("wf_a", 6)
    shifted.state.history = shifted.state.history[2:]  # same length as stored, different entries
    await store.put(shifted)
    assert await store.get("wf_a") == shifted
    shorter = record("wf_a", 2)
    await store.put(shorter)
    assert await store.get("wf_a") == shorter
    assert await store.delete("wf_a") is True
    assert await store.get("wf_a") is None


async def test_stale_lists_workflows_last_edited_before_a_time(store: WorkflowStore) -> None:
    await store.put(record("wf_a", 0, at=10.0))  # updated_at 10
    await store.put(record("wf_b", 5, at=10.0))  # updated_at 15
    await store.put(record("wf_c", 9, at=10.0))  # updated_at 19
    assert sorted(await store.stale(15.0)) == ["wf_a"]
    assert sorted(await store.stale(19.5)) == ["wf_a", "wf_b", "wf_c"]


async def test_exclusive_yields_a_store_that_reads_and_writes_the_same_workflows(store: WorkflowStore) -> None:
    await store.put(record("wf_a", 2))
    async with store.exclusive("wf_a") as held:
        assert await held.get("wf_a") == record("wf_a", 2)
        await held.put(record("wf_a", 3))
    assert await store.get("wf_a") == record("wf_a", 3)


async def test_a_failed_put_keeps_the_previous_state_whole(persistent_store_url: str) -> None:
    store = open_store(persistent_store_url)
    try:
        good = record("wf_a", 3)
        await store.put(good)
        broken = record("wf_a", 5)
        broken.state.history[-1].message = "lone \ud800 surrogate"  # fails after the earlier rows were written
        with pytest.raises(ValueError):
            await store.put(broken)
        assert await store.get("wf_a") == good
    finally:
        await store.close()


async def test_a_reopened_store_gives_back_every_acknowledged_put(persistent_store_url: str) -> None:
    first = open_store(persistent_store_url)
    try:
        for steps in range(0, 4):
            await first.put(record("wf_a", steps))
        await first.put(record("wf_b", 2, at=5.0))
        await first.put(record("wf_gone", 1, at=6.0))
        assert await first.delete("wf_gone") is True
    finally:
        await first.close()
    second = open_store(persistent_store_url)  # a restart: the schema is there already and stays as it is
    try:
        assert await second.list() == [record("wf_a", 3), record("wf_b", 2, at=5.0)]
        await second.put(record("wf_a", 5))  # and it carries on appending
        assert await second.get("wf_a") == record("wf_a", 5)
    finally:
        await second.close()
