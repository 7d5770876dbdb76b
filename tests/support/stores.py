"""The workflow-store fixtures (a pytest plugin): one suite, run against every store.

`store` is an open store of each kind in turn (memory, SQLite, PostgreSQL), closed after the test; a test that
must reopen its store (persistence across a restart) asks for `persistent_store_url` instead and calls
`open_store` itself. PostgreSQL runs are marked slow (they start a PostgreSQL server, once per session: see
`tests/support/postgres.py`), so `make test-fast` runs the memory and SQLite cases only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from flowsteer_mcp.store.base import WorkflowStore, open_store

POSTGRES = pytest.param("postgres", marks=pytest.mark.slow)
STORE_KINDS = ("memory", "sqlite", POSTGRES)
PERSISTENT_STORE_KINDS = ("sqlite", POSTGRES)


def _url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "memory":
        return "memory"
    if kind == "sqlite":
        return f"sqlite:{tmp_path / 'workflows.sqlite'}"
    dsn: str = request.getfixturevalue("postgres_dsn")  # only PostgreSQL cases start the server
    return dsn


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The `--store` value of a fresh, empty store of each kind."""
    return _url(request.param, request, tmp_path)


@pytest.fixture(params=PERSISTENT_STORE_KINDS)
def persistent_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The `--store` value of a fresh, empty store of each persistent kind (SQLite, PostgreSQL)."""
    return _url(request.param, request, tmp_path)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[WorkflowStore]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        await opened.close()
