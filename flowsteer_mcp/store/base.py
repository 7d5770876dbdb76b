"""The store contract. A `put` that returned means the state is durable for that store's notion of durable.

A `put` is all or nothing: when it raises, the store still holds the previous state of that workflow. A
state's `history` only grows between two puts of one workflow (the canvas appends one entry per step), so a
store may write just the entries it has not seen; a history that is not an extension of the stored one is
detected and rewritten whole.

A store is either private to one server process (memory, SQLite: the workbench may cache what it committed) or
`shared` by a fleet of servers (PostgreSQL): then every read comes from the store and every write holds the
workflow's fleet-wide lock (`exclusive`) from the load to the commit, so no server serves or extends a copy that
another server has since changed.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.errors import FlowSteerError

ADMISSION_KEY = "flowsteer:create"  # the `exclusive` key of admission (count, then create); never a workflow id
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class StoreSchemaError(FlowSteerError, ValueError):
    """The database is not a workflow database this version can read (the server refuses to start)."""


class StoredWorkflow(BaseModel):
    workflow_id: str
    state: CanvasState
    created_at: float  # wall-clock seconds (time.time)
    updated_at: float  # wall-clock seconds of the last acknowledged edit


class WorkflowStore(Protocol):
    persistent: bool  # True when workflows survive a server restart (then only a longer, separate TTL applies)
    shared: bool  # True when other server processes write the same workflows: never trust a cached copy

    def exclusive(self, key: str) -> AbstractAsyncContextManager[WorkflowStore]:
        """Hold `key` (a workflow id, or `ADMISSION_KEY`) against every process of the store until the block
        exits, and yield the store to use inside the block. A private store yields itself at once (the
        workbench's own locks already serialise its one process); a shared one waits for the key."""
        ...

    async def get(self, workflow_id: str) -> StoredWorkflow | None: ...

    async def put(self, record: StoredWorkflow) -> None: ...

    async def delete(self, workflow_id: str) -> bool: ...

    async def stale(self, updated_before: float) -> list[str]:
        """Ids of the workflows whose last edit (`updated_at`) is older than `updated_before`."""
        ...

    async def list(self) -> list[StoredWorkflow]: ...

    async def count(self) -> int: ...

    async def close(self) -> None: ...


def open_store(url: str) -> WorkflowStore:
    """`memory`, `sqlite:PATH` or `postgresql://...` (a libpq URI; needs the `postgres` extra)."""
    from flowsteer_mcp.store.memory import MemoryStore
    from flowsteer_mcp.store.sqlite import SQLiteStore

    if url == "memory":
        return MemoryStore()
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:")
        if not path:
            raise ValueError("sqlite store needs a path: --store sqlite:/path/to/workflows.sqlite")
        return SQLiteStore(Path(path).expanduser())
    if url.startswith(POSTGRES_SCHEMES):
        try:
            from flowsteer_mcp.store.postgres import PostgresStore
        except ImportError as error:
            raise ValueError(
                f"the PostgreSQL store needs psycopg ({error.name} is missing): pip install 'flowsteer-mcp[postgres]'"
            ) from None
        return PostgresStore(url)
    raise ValueError(f"unknown store {url!r}; use 'memory', 'sqlite:PATH' or 'postgresql://USER@HOST/DATABASE'")
