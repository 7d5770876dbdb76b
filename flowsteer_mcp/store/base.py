"""The store contract. A `put` that returned means the state is durable for that store's notion of durable.

A `put` is all or nothing: when it raises, the store still holds the previous state of that workflow. A
state's `history` only grows between two puts of one workflow (the canvas appends one entry per step), so a
store may write just the entries it has not seen; a history that is not an extension of the stored one is
detected and rewritten whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from flowsteer_mcp.canvas.session import CanvasState


class StoredWorkflow(BaseModel):
    workflow_id: str
    state: CanvasState
    created_at: float  # wall-clock seconds (time.time)
    updated_at: float  # wall-clock seconds of the last acknowledged edit


class WorkflowStore(Protocol):
    persistent: bool  # True when workflows survive a server restart (then only a longer, separate TTL applies)

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
    """`memory` or `sqlite:PATH`."""
    from flowsteer_mcp.store.memory import MemoryStore
    from flowsteer_mcp.store.sqlite import SQLiteStore

    if url == "memory":
        return MemoryStore()
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:")
        if not path:
            raise ValueError("sqlite store needs a path: --store sqlite:/path/to/workflows.sqlite")
        return SQLiteStore(Path(path).expanduser())
    raise ValueError(f"unknown store {url!r}; use 'memory' or 'sqlite:PATH'")
