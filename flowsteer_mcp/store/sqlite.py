"""SQLite store: every acknowledged edit is committed to a file before the tool call returns.

Layout (schema version 2): the small part of a state (task, options, graph, pending edit, last result) is one
row of `workflows`; the append-only step history is one row per step in `history`. A `put` rewrites the small
row and appends only the steps the file has not seen, so an edit costs the same at round 200 as at round 1
(rewriting the whole state made each edit slower and the file larger as a workflow aged).

One connection in WAL mode with `synchronous=FULL`; each `put` is one transaction, so a killed server keeps
every state it acknowledged and never a half-written one. Calls run in a worker thread so the event loop is
never blocked on disk. A database from before the history table (schema 0: one JSON document per workflow)
is migrated in place on open, in one transaction; anything else it cannot read is refused with a clear error.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from urllib.parse import quote

import anyio.to_thread
import structlog
from pydantic import TypeAdapter, ValidationError

from flowsteer_mcp.canvas.session import CanvasState, HistoryEntry
from flowsteer_mcp.store.base import StoredWorkflow, StoreSchemaError

log = structlog.get_logger(__name__)

SCHEMA_VERSION = 2
_LEGACY_COLUMNS = ["workflow_id", "state", "created_at", "updated_at"]
_TABLES = (
    """CREATE TABLE workflows (
        workflow_id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        history_length INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )""",
    """CREATE TABLE history (
        workflow_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (workflow_id, seq)
    ) WITHOUT ROWID""",
    "CREATE INDEX workflows_updated_at ON workflows (updated_at)",
)
_HISTORY = TypeAdapter(list[HistoryEntry])
_Row = tuple[str, str, float, float]


def _unusable(path: Path, error: sqlite3.Error) -> StoreSchemaError:
    return StoreSchemaError(f"cannot open {path} as a workflow database ({error}); pass another --store sqlite:PATH.")


class SQLiteStore:
    persistent = True
    shared = False  # one server process per file (read-only viewers aside): see `exclusive`

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        """Open (creating when needed) the database at `path`. With `read_only`, the file must exist at the
        current schema and is opened through SQLite's `mode=ro`, so this connection can never write (a
        viewer following a file a server writes); it still sees every transaction that server commits."""
        self.path = path
        self.read_only = read_only
        self._lock = threading.Lock()
        if read_only:
            self._conn = self._connect_read_only(path)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as error:
            raise _unusable(path, error) from None
        try:
            with self._lock:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=FULL")
                self._prepare_schema()
        except sqlite3.DatabaseError as error:
            self._conn.close()
            raise _unusable(path, error) from None
        except BaseException:
            self._conn.close()
            raise

    @staticmethod
    def _connect_read_only(path: Path) -> sqlite3.Connection:
        if not path.is_file():
            raise StoreSchemaError(f"{path} does not exist; pass the --store sqlite:PATH a server writes.")
        uri = f"file:{quote(str(path.resolve()))}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as error:
            raise _unusable(path, error) from None
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as error:
            conn.close()
            raise _unusable(path, error) from None
        if version != SCHEMA_VERSION:
            conn.close()
            raise StoreSchemaError(
                f"{path} has workflow schema version {version}; a read-only open needs version {SCHEMA_VERSION} "
                "(start a flowsteer-mcp server on it once to migrate it)."
            )
        return conn

    # ----- schema ------------------------------------------------------------------------------------------
    def _prepare_schema(self) -> None:
        version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {name for (name,) in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version == SCHEMA_VERSION:
            return
        if version != 0:
            raise StoreSchemaError(
                f"{self.path} has workflow schema version {version}; this flowsteer-mcp reads version "
                f"{SCHEMA_VERSION} (and migrates older ones). Use the flowsteer-mcp that wrote it, or another "
                "--store sqlite:PATH."
            )
        if not tables:
            with self._transaction():
                self._create_tables()
            return
        columns = [row[1] for row in self._conn.execute("PRAGMA table_info(workflows)")]
        if tables != {"workflows"} or columns != _LEGACY_COLUMNS:
            raise StoreSchemaError(
                f"{self.path} is not a FlowSteer workflow database (tables: {', '.join(sorted(tables))}); "
                "pass another --store sqlite:PATH."
            )
        self._migrate_legacy()

    def _create_tables(self) -> None:
        for statement in _TABLES:
            self._conn.execute(statement)
        self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _migrate_legacy(self) -> None:
        """Schema 0 kept each whole state (history included) in one JSON column: split the history out."""
        with self._transaction():
            self._conn.execute("ALTER TABLE workflows RENAME TO legacy_workflows")
            self._create_tables()
            rows = self._conn.execute(
                "SELECT workflow_id, state, created_at, updated_at FROM legacy_workflows"
            ).fetchall()
            for workflow_id, state, created_at, updated_at in rows:
                try:
                    parsed = CanvasState.model_validate_json(state)
                except ValidationError as error:
                    raise StoreSchemaError(
                        f"{self.path}: workflow {workflow_id} cannot be migrated ({error.error_count()} invalid "
                        "fields); the file was left unchanged."
                    ) from None
                record = StoredWorkflow(
                    workflow_id=workflow_id, state=parsed, created_at=created_at, updated_at=updated_at
                )
                self._write(record)
            self._conn.execute("DROP TABLE legacy_workflows")
        log.info("workflow_store_migrated", path=str(self.path), workflows=len(rows), schema=SCHEMA_VERSION)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction (the caller holds `_lock`): committed whole or rolled back whole."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    # ----- reads ---------------------------------------------------------------------------------------------
    def _assemble(self, row: _Row, entries: Sequence[str]) -> StoredWorkflow:
        workflow_id, state_json, created_at, updated_at = row
        state = CanvasState.model_validate_json(state_json)
        state.history = _HISTORY.validate_json("[" + ",".join(entries) + "]")
        return StoredWorkflow(workflow_id=workflow_id, state=state, created_at=created_at, updated_at=updated_at)

    def _get(self, workflow_id: str) -> StoredWorkflow | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT workflow_id, state, created_at, updated_at FROM workflows WHERE workflow_id = ?", (workflow_id,)
            ).fetchone()
            if row is None:
                return None
            entries = [
                entry
                for (entry,) in self._conn.execute(
                    "SELECT entry FROM history WHERE workflow_id = ? ORDER BY seq", (workflow_id,)
                )
            ]
        return self._assemble(row, entries)

    def _list(self) -> list[StoredWorkflow]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT workflow_id, state, created_at, updated_at FROM workflows ORDER BY created_at, workflow_id"
            ).fetchall()
            histories: dict[str, list[str]] = {}
            for workflow_id, entry in self._conn.execute(
                "SELECT workflow_id, entry FROM history ORDER BY workflow_id, seq"
            ):
                histories.setdefault(workflow_id, []).append(entry)
        return [self._assemble(row, histories.get(row[0], [])) for row in rows]

    def _versions(self) -> dict[str, float]:
        with self._lock:
            rows = self._conn.execute("SELECT workflow_id, updated_at FROM workflows")
            return {workflow_id: updated_at for workflow_id, updated_at in rows}

    def _count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM workflows").fetchone()[0])

    def _stale(self, updated_before: float) -> list[str]:
        with self._lock:
            rows = self._conn.execute("SELECT workflow_id FROM workflows WHERE updated_at < ?", (updated_before,))
            return [workflow_id for (workflow_id,) in rows]

    # ----- writes --------------------------------------------------------------------------------------------
    def _put(self, record: StoredWorkflow) -> None:
        with self._lock, self._transaction():
            self._write(record)

    def _write(self, record: StoredWorkflow) -> None:
        """Upsert the small row and bring the history rows in line (inside the caller's transaction)."""
        workflow_id, history = record.workflow_id, record.state.history
        head = record.state.model_dump_json(exclude={"history"})
        start = self._kept_history(workflow_id, history)
        self._conn.execute("DELETE FROM history WHERE workflow_id = ? AND seq >= ?", (workflow_id, start))
        self._conn.executemany(
            "INSERT INTO history (workflow_id, seq, entry) VALUES (?, ?, ?)",
            ((workflow_id, seq, history[seq].model_dump_json()) for seq in range(start, len(history))),
        )
        self._conn.execute(
            "INSERT INTO workflows (workflow_id, state, history_length, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(workflow_id) DO UPDATE SET state = excluded.state, history_length = excluded.history_length, "
            "updated_at = excluded.updated_at",
            (workflow_id, head, len(history), record.created_at, record.updated_at),
        )

    def _kept_history(self, workflow_id: str, history: Sequence[HistoryEntry]) -> int:
        """How many stored history rows stay: all of them when `history` extends them, else none."""
        row = self._conn.execute(
            "SELECT history_length FROM workflows WHERE workflow_id = ?", (workflow_id,)
        ).fetchone()
        stored = int(row[0]) if row else 0
        if stored == 0 or stored > len(history):
            return 0
        last = self._conn.execute(
            "SELECT entry FROM history WHERE workflow_id = ? AND seq = ?", (workflow_id, stored - 1)
        ).fetchone()
        return stored if last is not None and last[0] == history[stored - 1].model_dump_json() else 0

    def _delete(self, workflow_id: str) -> bool:
        with self._lock, self._transaction():
            self._conn.execute("DELETE FROM history WHERE workflow_id = ?", (workflow_id,))
            cursor = self._conn.execute("DELETE FROM workflows WHERE workflow_id = ?", (workflow_id,))
        return cursor.rowcount > 0

    # ----- the async contract --------------------------------------------------------------------------------
    @asynccontextmanager
    async def exclusive(self, key: str) -> AsyncIterator[SQLiteStore]:
        """No cross-process lock: a file has one server, whose workbench locks serialise its steps. SQLite could
        only serialise two servers by holding its one write lock for a whole step (minutes, blocking every other
        workflow), and each would still trust its own cache, so a fleet of servers uses PostgreSQL instead."""
        yield self

    async def get(self, workflow_id: str) -> StoredWorkflow | None:
        return await anyio.to_thread.run_sync(self._get, workflow_id)

    async def put(self, record: StoredWorkflow) -> None:
        await anyio.to_thread.run_sync(self._put, record)

    async def delete(self, workflow_id: str) -> bool:
        return await anyio.to_thread.run_sync(self._delete, workflow_id)

    async def stale(self, updated_before: float) -> list[str]:
        return await anyio.to_thread.run_sync(self._stale, updated_before)

    async def list(self) -> list[StoredWorkflow]:
        return await anyio.to_thread.run_sync(self._list)

    async def versions(self) -> dict[str, float]:
        """`workflow_id -> updated_at` of every workflow, without loading states (what a change follower polls)."""
        return await anyio.to_thread.run_sync(self._versions)

    async def count(self) -> int:
        return await anyio.to_thread.run_sync(self._count)

    async def close(self) -> None:
        with self._lock:
            self._conn.close()
