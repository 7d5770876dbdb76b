"""What the PostgreSQL store adds to the contract (tests/store/test_store_contract.py runs that on it too).

A versioned schema created idempotently, even by servers opening together; a newer schema refused; history one
row per step; the fleet-wide lock of `exclusive`: it serialises two stores on one database, a wait for it can be
cancelled, and it dies with its session (a server killed -9), after which the dead session can commit nothing;
and the DSN's password never reaches a log or an error message. Every test has its own database on one real
PostgreSQL server per session (tests/support/postgres.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from tests.store.test_store_contract import record
from tests.support.postgres import REQUIRE_POSTGRES, PostgresServer, missing_postgres_reason

if (reason := missing_postgres_reason()) is not None and not REQUIRE_POSTGRES:
    pytest.skip(reason, allow_module_level=True)

import psycopg  # only once the skip above has not happened

from flowsteer_mcp.store import postgres as postgres_module
from flowsteer_mcp.store.base import StoreSchemaError, open_store
from flowsteer_mcp.store.postgres import SCHEMA_VERSION, PostgresStore, StoreUnavailable, masked_dsn

pytestmark = pytest.mark.slow


def rows(dsn: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


@asynccontextmanager
async def opened(dsn: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(dsn)
    try:
        yield store
    finally:
        await store.close()


def test_the_schema_is_versioned_and_opening_again_changes_nothing(postgres_dsn: str) -> None:
    errors: list[BaseException] = []

    def open_once() -> None:
        try:
            anyio.run(PostgresStore(postgres_dsn).close)
        except BaseException as error:
            errors.append(error)

    starters = [threading.Thread(target=open_once) for _ in range(4)]  # a fleet starting at once
    for thread in starters:
        thread.start()
    for thread in starters:
        thread.join()
    assert errors == []
    assert rows(postgres_dsn, "SELECT version FROM flowsteer_schema_version") == [(SCHEMA_VERSION,)]
    tables = rows(postgres_dsn, "SELECT tablename FROM pg_tables WHERE tablename LIKE 'flowsteer_%' ORDER BY 1")
    assert tables == [("flowsteer_history",), ("flowsteer_schema_version",), ("flowsteer_workflows",)]


def test_a_database_from_a_newer_version_is_refused(postgres_dsn: str) -> None:
    anyio.run(PostgresStore(postgres_dsn).close)
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("UPDATE flowsteer_schema_version SET version = 99")
    with pytest.raises(StoreSchemaError, match="schema version 99"):
        PostgresStore(postgres_dsn)


def test_a_foreign_table_of_the_same_name_is_a_clear_error_and_changes_nothing(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TABLE flowsteer_workflows (id integer)")
    with pytest.raises(StoreSchemaError, match="cannot prepare the workflow tables"):
        PostgresStore(postgres_dsn)
    assert rows(postgres_dsn, "SELECT to_regclass('flowsteer_schema_version') IS NULL") == [(True,)]


async def test_history_is_stored_one_row_per_step_outside_the_state_row(postgres_dsn: str) -> None:
    async with opened(postgres_dsn) as store:
        for steps in range(0, 6):
            await store.put(record("wf_a", steps))
    ((state_json,),) = rows(postgres_dsn, "SELECT state FROM flowsteer_workflows")
    assert isinstance(state_json, str) and "history" not in json.loads(state_json)
    history = rows(postgres_dsn, "SELECT seq, (entry::json ->> 'round')::int FROM flowsteer_history ORDER BY seq")
    assert history == [(k, k + 1) for k in range(5)]


async def test_exclusive_serialises_two_stores_on_one_database(postgres_dsn: str) -> None:
    """Two servers: while A holds a workflow, B waits for it (and not for another workflow)."""
    async with opened(postgres_dsn) as first, opened(postgres_dsn) as second:
        order: list[str] = []
        a_holds = anyio.Event()

        async def a() -> None:
            async with first.exclusive("wf_a"):
                order.append("a in")
                a_holds.set()
                async with second.exclusive("wf_other"):  # another workflow is not blocked
                    order.append("b other")
                await anyio.sleep(0.5)
                order.append("a out")

        async def b() -> None:
            await a_holds.wait()
            async with second.exclusive("wf_a"):
                order.append("b in")

        async with anyio.create_task_group() as group:
            group.start_soon(a)
            group.start_soon(b)
        assert order == ["a in", "b other", "a out", "b in"]
        assert rows(postgres_dsn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == [(0,)]


async def test_a_cancelled_wait_leaves_no_lock_behind(postgres_dsn: str) -> None:
    async with opened(postgres_dsn) as first, opened(postgres_dsn) as second:
        async with first.exclusive("wf_a"):
            with anyio.move_on_after(0.3) as waited:
                async with second.exclusive("wf_a"):
                    pytest.fail("entered a workflow another store holds")
            assert waited.cancelled_caught
        with anyio.fail_after(5):
            async with second.exclusive("wf_a"):
                pass
        assert rows(postgres_dsn, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == [(0,)]


async def test_the_lock_dies_with_its_session_and_the_dead_session_commits_nothing(postgres_dsn: str) -> None:
    """A server killed mid-step: its session ends, another server takes the workflow, and nothing the dead
    session still tries to write lands (the commit fails, since it needed the lock's own session)."""
    async with opened(postgres_dsn) as first, opened(postgres_dsn) as second:
        await first.put(record("wf_a", 1))
        async with first.exclusive("wf_a") as held:
            with psycopg.connect(postgres_dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted")
            with anyio.fail_after(5):
                async with second.exclusive("wf_a") as other:
                    await other.put(record("wf_a", 2))
            with pytest.raises(psycopg.OperationalError):
                await held.put(record("wf_a", 9))
        assert await second.get("wf_a") == record("wf_a", 2)


async def test_sessions_commit_durably_even_when_the_database_says_otherwise(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('synchronous_commit', 'off', false)")
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None
        conn.execute(f'ALTER DATABASE "{name[0]}" SET synchronous_commit = off')
    async with opened(postgres_dsn) as store, store.exclusive("wf_a") as held, held._connection() as conn:
        cursor = await conn.execute("SHOW synchronous_commit")
        assert await cursor.fetchone() == ("on",)


def test_the_password_is_masked_in_logs_and_errors(
    postgres_server: PostgresServer, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = postgres_server.password
    assert password in postgres_dsn
    assert password not in masked_dsn(postgres_dsn) and "password=***" in masked_dsn(postgres_dsn)
    assert "password=***" in masked_dsn(f"host=db user=u password={password}")
    # A fresh logger: the module's own may have been cached by an earlier test's logging set-up, and a cached
    # logger writes past `capture_logs`.
    monkeypatch.setattr(postgres_module, "log", structlog.get_logger(postgres_module.__name__))
    with capture_logs() as logs:
        store = open_store(postgres_dsn)
        anyio.run(store.close)
    assert logs and password not in repr(logs)
    wrong = postgres_dsn.replace(password, password + "-wrong")
    with pytest.raises(StoreUnavailable, match="password authentication failed") as raised:
        PostgresStore(wrong)
    assert password not in str(raised.value)
    with pytest.raises(StoreUnavailable, match="cannot connect"):
        PostgresStore(f"postgresql://u:{password}@127.0.0.1:1/none?connect_timeout=2")
