"""PostgreSQL store: one database shared by a fleet of servers, each acknowledged edit committed before it returns.

Layout (schema version 1): as in SQLite, the small part of a state is one row of `flowsteer_workflows` and the
step history one row per step in `flowsteer_history` (so an edit costs the same at round 200 as at round 1);
`flowsteer_schema_version` holds the version. Opening the store creates or migrates the tables in one
transaction under a transaction-level advisory lock, so servers started together neither race nor half-migrate,
and a database from a newer version is refused with a clear error.

Every `put` is one transaction (autocommit otherwise). A step is serialised across the fleet by a session-level
advisory lock on the workflow (`exclusive`), not by `SELECT ... FOR UPDATE`: a step runs the workflow (minutes
of executor calls) between its load and its commit, and a row lock would have to keep a transaction open that
long (idle in transaction: it holds back vacuum for the whole database and trips the idle-in-transaction
timeout). The advisory lock lives on an idle session, dies with that session (a server killed -9 frees its
workflows at once), and the step loads and commits on that very session: since a session-level lock is only
released by its own session, a commit that succeeds proves the lock was held from load to commit. Inside the
commit, `FOR UPDATE` on the row still orders any writer that did not take the advisory lock.

Nothing logs the DSN's password: `masked_dsn` is what logs and errors show. How a fleet of servers shares a
database: (docs/design/server.md, "Persistence").
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool
from pydantic import TypeAdapter

from flowsteer_mcp.canvas.session import CanvasState, HistoryEntry
from flowsteer_mcp.errors import FlowSteerError
from flowsteer_mcp.store.base import StoredWorkflow, StoreSchemaError

log = structlog.get_logger(__name__)

SCHEMA_VERSION = 1
# The statements that bring a database from version n-1 to n, applied in order inside one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE flowsteer_workflows (
            workflow_id text PRIMARY KEY,
            state text NOT NULL,
            history_length integer NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL
        )""",
        """CREATE TABLE flowsteer_history (
            workflow_id text NOT NULL REFERENCES flowsteer_workflows ON DELETE CASCADE,
            seq integer NOT NULL,
            entry text NOT NULL,
            PRIMARY KEY (workflow_id, seq)
        )""",
        "CREATE INDEX flowsteer_workflows_updated_at ON flowsteer_workflows (updated_at)",
    ),
}
POOL_MAX_SIZE = 16  # each step in flight holds one session (its lock) for its whole run, so keep this above them
CONNECT_TIMEOUT_S = 10
_SECRET_KEYS = ("password", "sslpassword")
_HISTORY = TypeAdapter(list[HistoryEntry])
# One statement, one snapshot: the small row and its history can never come from two different commits.
_SELECT = """SELECT w.workflow_id, w.state, w.created_at, w.updated_at,
    COALESCE((SELECT array_agg(h.entry ORDER BY h.seq) FROM flowsteer_history h
              WHERE h.workflow_id = w.workflow_id), '{}')
    FROM flowsteer_workflows w"""


class StoreUnavailable(FlowSteerError, RuntimeError):
    """The PostgreSQL server cannot be reached or refused the connection (the server refuses to start)."""


def masked_dsn(dsn: str) -> str:
    """The DSN as `key=value` pairs with every password replaced by `***`: what logs and error messages show."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<a DSN libpq cannot parse>"
    return make_conninfo("", **{k: "***" if k in _SECRET_KEYS else v for k, v in params.items()})


def lock_key(key: str) -> int:
    """The advisory-lock number of a workflow id: 64 bits of a hash (a collision only serialises two steps)."""
    digest = hashlib.blake2b(f"flowsteer-mcp:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


_SCHEMA_LOCK = lock_key("schema")


class PostgresStore:
    persistent = True
    shared = True

    def __init__(self, dsn: str, *, pool_max_size: int = POOL_MAX_SIZE) -> None:
        """Check the database now (so a wrong DSN or schema stops the server at start, with a clear error) and
        prepare its schema; the connection pool opens on first use, inside the server's event loop."""
        self.dsn_shown = masked_dsn(dsn)
        self._dsn = dsn
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_max_size,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            configure=_configure,
            name="flowsteer-store",
        )
        self._opened = False
        self._opening = anyio.Lock()
        self._held: psycopg.AsyncConnection[Any] | None = None  # set on the views `exclusive` yields
        self._prepare_schema()

    # ----- schema ------------------------------------------------------------------------------------------
    def _prepare_schema(self) -> None:
        try:
            conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as error:  # libpq's messages name host, port and user, never the password
            raise StoreUnavailable(f"cannot connect to the PostgreSQL store {self.dsn_shown}: {error}") from None
        try:
            with conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                conn.execute("CREATE TABLE IF NOT EXISTS flowsteer_schema_version (version integer NOT NULL)")
                row = conn.execute("SELECT max(version) FROM flowsteer_schema_version").fetchone()
                version = int(row[0]) if row and row[0] is not None else 0
                self._migrate(conn, version)
                durability = conn.execute("SHOW synchronous_commit").fetchone()
        except psycopg.Error as error:
            raise StoreSchemaError(
                f"cannot prepare the workflow tables in {self.dsn_shown} ({type(error).__name__}: {error})"
            ) from None
        log.info("workflow_store_opened", store="postgresql", dsn=self.dsn_shown, schema=SCHEMA_VERSION)
        if durability and durability[0] == "off":
            log.warning(
                "workflow_store_synchronous_commit_off", dsn=self.dsn_shown, action="the store's sessions set it on"
            )

    def _migrate(self, conn: psycopg.Connection[Any], version: int) -> None:
        """Bring the database from `version` to `SCHEMA_VERSION` (the caller's transaction)."""
        if version > SCHEMA_VERSION:
            raise StoreSchemaError(
                f"{self.dsn_shown} has workflow schema version {version}; this flowsteer-mcp reads version "
                f"{SCHEMA_VERSION} (and migrates older ones). Use the flowsteer-mcp that wrote it, or another database."
            )
        if version == SCHEMA_VERSION:
            return
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[target]:
                conn.execute(statement)
        conn.execute("DELETE FROM flowsteer_schema_version")
        conn.execute("INSERT INTO flowsteer_schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
        log.info(
            "workflow_store_migrated", store="postgresql", dsn=self.dsn_shown, start=version, schema=SCHEMA_VERSION
        )

    # ----- sessions ----------------------------------------------------------------------------------------
    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The session that holds this view's lock, else one from the pool."""
        if self._held is not None:
            yield self._held
            return
        if not self._opened:
            async with self._opening:
                if not self._opened:
                    await self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
                    self._opened = True
        async with self._pool.connection() as conn:
            yield conn

    @asynccontextmanager
    async def exclusive(self, key: str) -> AsyncIterator[PostgresStore]:
        """Hold the advisory lock of `key` on one session until the block exits, and yield a view of this store
        whose every call runs on that session. Waiting for the lock is cancellable (psycopg cancels the query on
        the server); a session whose unlock fails is closed, which frees the lock too."""
        if self._held is not None:
            raise RuntimeError("exclusive() does not nest on one session")
        async with self._connection() as conn:
            try:
                # inside the try: a wait cancelled just as the lock was granted still unlocks below
                await conn.execute("SELECT pg_advisory_lock(%s)", (lock_key(key),))
                view = copy.copy(self)
                view._held = conn
                yield view
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        await conn.execute("SELECT pg_advisory_unlock_all()")
                    except psycopg.Error:
                        await conn.close()  # the pool drops a closed session; the server frees its locks

    # ----- reads ---------------------------------------------------------------------------------------------
    @staticmethod
    def _assemble(row: tuple[Any, ...]) -> StoredWorkflow:
        workflow_id, state_json, created_at, updated_at, entries = row
        state = CanvasState.model_validate_json(state_json)
        state.history = _HISTORY.validate_json("[" + ",".join(entries) + "]")
        return StoredWorkflow(workflow_id=workflow_id, state=state, created_at=created_at, updated_at=updated_at)

    async def get(self, workflow_id: str) -> StoredWorkflow | None:
        async with self._connection() as conn:
            cursor = await conn.execute(_SELECT + " WHERE w.workflow_id = %s", (workflow_id,))
            row = await cursor.fetchone()
        return None if row is None else self._assemble(row)

    async def versions(self) -> dict[str, float]:
        """`workflow_id -> updated_at` of every workflow, without loading states (what a change follower polls)."""
        async with self._connection() as conn:
            cursor = await conn.execute("SELECT workflow_id, updated_at FROM flowsteer_workflows")
            return {workflow_id: updated_at for workflow_id, updated_at in await cursor.fetchall()}

    async def count(self) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute("SELECT count(*) FROM flowsteer_workflows")
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def stale(self, updated_before: float) -> list[str]:
        async with self._connection() as conn:
            cursor = await conn.execute(
                "SELECT workflow_id FROM flowsteer_workflows WHERE updated_at < %s", (updated_before,)
            )
            return [workflow_id for (workflow_id,) in await cursor.fetchall()]

    async def list(self) -> list[StoredWorkflow]:
        async with self._connection() as conn:
            cursor = await conn.execute(_SELECT + " ORDER BY w.created_at, w.workflow_id")
            rows = await cursor.fetchall()
        return [self._assemble(row) for row in rows]

    # ----- writes --------------------------------------------------------------------------------------------
    async def put(self, record: StoredWorkflow) -> None:
        """One transaction: upsert the small row, then bring the history rows in line (appending only new ones)."""
        workflow_id, history = record.workflow_id, record.state.history
        head = record.state.model_dump_json(exclude={"history"})
        async with self._connection() as conn, conn.transaction():
            start = await self._kept_history(conn, workflow_id, history)
            await conn.execute(
                "INSERT INTO flowsteer_workflows (workflow_id, state, history_length, created_at, updated_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (workflow_id) DO UPDATE SET state = excluded.state, "
                "history_length = excluded.history_length, updated_at = excluded.updated_at",
                (workflow_id, head, len(history), record.created_at, record.updated_at),
            )
            await conn.execute(
                "DELETE FROM flowsteer_history WHERE workflow_id = %s AND seq >= %s", (workflow_id, start)
            )
            if start < len(history):
                async with conn.cursor() as cursor:
                    await cursor.executemany(
                        "INSERT INTO flowsteer_history (workflow_id, seq, entry) VALUES (%s, %s, %s)",
                        [(workflow_id, seq, history[seq].model_dump_json()) for seq in range(start, len(history))],
                    )

    @staticmethod
    async def _kept_history(
        conn: psycopg.AsyncConnection[Any], workflow_id: str, history: Sequence[HistoryEntry]
    ) -> int:
        """How many stored history rows stay: all of them when `history` extends them, else none. Locks the row."""
        cursor = await conn.execute(
            "SELECT history_length FROM flowsteer_workflows WHERE workflow_id = %s FOR UPDATE", (workflow_id,)
        )
        row = await cursor.fetchone()
        stored = int(row[0]) if row else 0
        if stored == 0 or stored > len(history):
            return 0
        cursor = await conn.execute(
            "SELECT entry FROM flowsteer_history WHERE workflow_id = %s AND seq = %s", (workflow_id, stored - 1)
        )
        last = await cursor.fetchone()
        return stored if last is not None and last[0] == history[stored - 1].model_dump_json() else 0

    async def delete(self, workflow_id: str) -> bool:
        async with self._connection() as conn:
            cursor = await conn.execute("DELETE FROM flowsteer_workflows WHERE workflow_id = %s", (workflow_id,))
            return cursor.rowcount > 0

    async def close(self) -> None:
        if self._held is None:
            await self._pool.close()


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    """Each new session: never acknowledge a commit before it is durable, whatever the database's default."""
    cursor = await conn.execute("SHOW synchronous_commit")
    row = await cursor.fetchone()
    if row is not None and row[0] == "off":
        await conn.execute("SET synchronous_commit = on")
