"""SQLite store: every acknowledged edit is committed to a file before the tool call returns.

One connection in WAL mode with `synchronous=FULL`; each `put` is a single-row upsert in its own transaction,
so a killed server keeps every state it acknowledged and never a half-written one. Calls run in a worker
thread so the event loop is never blocked on disk.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import anyio.to_thread

from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.store.base import StoredWorkflow

_SCHEMA = """
CREATE TABLE IF NOT EXISTS workflows (
    workflow_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
)
"""


class SQLiteStore:
    persistent = True

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(_SCHEMA)

    def _row_to_record(self, row: tuple[str, str, float, float]) -> StoredWorkflow:
        workflow_id, state, created_at, updated_at = row
        return StoredWorkflow(
            workflow_id=workflow_id,
            state=CanvasState.model_validate_json(state),
            created_at=created_at,
            updated_at=updated_at,
        )

    def _get(self, workflow_id: str) -> StoredWorkflow | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT workflow_id, state, created_at, updated_at FROM workflows WHERE workflow_id = ?", (workflow_id,)
            ).fetchone()
        return self._row_to_record(row) if row else None

    def _put(self, record: StoredWorkflow) -> None:
        payload = record.state.model_dump_json()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    "INSERT INTO workflows (workflow_id, state, created_at, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(workflow_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
                    (record.workflow_id, payload, record.created_at, record.updated_at),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _delete(self, workflow_id: str) -> bool:
        with self._lock:
            cursor = self._conn.execute("DELETE FROM workflows WHERE workflow_id = ?", (workflow_id,))
        return cursor.rowcount > 0

    def _list(self) -> list[StoredWorkflow]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT workflow_id, state, created_at, updated_at FROM workflows ORDER BY created_at"
            ).fetchall()
        return [self._row_to_record(row) for row in rows]

    def _count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM workflows").fetchone()[0])

    async def get(self, workflow_id: str) -> StoredWorkflow | None:
        return await anyio.to_thread.run_sync(self._get, workflow_id)

    async def put(self, record: StoredWorkflow) -> None:
        await anyio.to_thread.run_sync(self._put, record)

    async def delete(self, workflow_id: str) -> bool:
        return await anyio.to_thread.run_sync(self._delete, workflow_id)

    async def list(self) -> list[StoredWorkflow]:
        return await anyio.to_thread.run_sync(self._list)

    async def count(self) -> int:
        return await anyio.to_thread.run_sync(self._count)

    async def close(self) -> None:
        with self._lock:
            self._conn.close()
