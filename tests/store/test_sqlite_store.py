"""The SQLite store keeps history incrementally (one row per step), migrates the old one-blob layout, and refuses
databases it cannot read with a clear error. The contract every store keeps: tests/store/test_store_contract.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.session import CanvasState, HistoryEntry
from flowsteer_mcp.store.base import StoredWorkflow
from flowsteer_mcp.store.sqlite import SCHEMA_VERSION, SQLiteStore, StoreSchemaError

LEGACY_SCHEMA = """
CREATE TABLE workflows (
    workflow_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
)
"""


def entry(k: int) -> HistoryEntry:
    return HistoryEntry(round=k, source="act", input=f"turn {k}", ok=True, message=f"step {k}", dsl="Plan")


def record(workflow_id: str, steps: int, *, at: float = 1.0) -> StoredWorkflow:
    state = CanvasState(task=TaskSpec(problem=f"task of {workflow_id}"), rounds_used=steps)
    state.history = [entry(k) for k in range(1, steps + 1)]
    state.last_feedback = f"feedback after {steps} steps"
    return StoredWorkflow(workflow_id=workflow_id, state=state, created_at=at, updated_at=at + steps)


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "wf.sqlite"


async def test_history_is_stored_one_row_per_step_outside_the_state_row(database: Path) -> None:
    store = SQLiteStore(database)
    try:
        for steps in range(0, 6):
            await store.put(record("wf_a", steps))
        (state_json,) = rows(database, "SELECT state FROM workflows")[0]
        assert isinstance(state_json, str) and "history" not in json.loads(state_json)
        assert "step 1" not in state_json  # each put rewrites only the small part of the state
        assert rows(database, "SELECT seq, json_extract(entry, '$.round') FROM history ORDER BY seq") == [
            (k, k + 1) for k in range(5)
        ]
        assert await store.get("wf_a") == record("wf_a", 5)
    finally:
        await store.close()


async def test_a_history_that_is_not_an_extension_is_rewritten(database: Path) -> None:
    """A shorter or a shifted history (e.g. trimmed to its newest entries) replaces the stored one."""
    store = SQLiteStore(database)
    try:
        await store.put(record("wf_a", 4))
        shifted = record("wf_a", 6)
        shifted.state.history = shifted.state.history[2:]  # same length as stored, different entries
        await store.put(shifted)
        assert await store.get("wf_a") == shifted
        shorter = record("wf_a", 2)
        await store.put(shorter)
        assert await store.get("wf_a") == shorter
        assert await store.delete("wf_a") is True
        assert rows(database, "SELECT COUNT(*) FROM history") == [(0,)]
    finally:
        await store.close()


async def test_a_legacy_database_is_migrated_in_place(database: Path) -> None:
    legacy = [record("wf_old", 3, at=5.0), record("wf_empty", 0, at=2.0)]
    with sqlite3.connect(database) as conn:
        conn.execute(LEGACY_SCHEMA)
        for item in legacy:
            conn.execute(
                "INSERT INTO workflows VALUES (?, ?, ?, ?)",
                (item.workflow_id, item.state.model_dump_json(), item.created_at, item.updated_at),
            )
    conn.close()

    for _ in range(2):  # the second open finds the current schema and changes nothing
        store = SQLiteStore(database)
        try:
            assert await store.list() == sorted(legacy, key=lambda r: r.created_at)
        finally:
            await store.close()
    assert rows(database, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert rows(database, "SELECT COUNT(*) FROM history") == [(3,)]


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        ("PRAGMA user_version = 99", "schema version 99"),
        ("CREATE TABLE workflows (id TEXT)", "not a FlowSteer workflow database"),
    ],
)
def test_a_database_it_cannot_read_is_a_clear_error(database: Path, prepare: str, message: str) -> None:
    with sqlite3.connect(database) as conn:
        conn.execute(prepare)
    conn.close()
    with pytest.raises(StoreSchemaError, match=message):
        SQLiteStore(database)


def test_a_file_that_is_not_sqlite_is_a_clear_error(database: Path) -> None:
    database.write_text("not a database at all, " * 100)
    with pytest.raises(StoreSchemaError, match=r"cannot open .* as a workflow database \(file is not a database\)"):
        SQLiteStore(database)


def test_a_path_it_cannot_open_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreSchemaError, match=r"cannot open .* as a workflow database"):
        SQLiteStore(tmp_path)  # a directory
