"""In-memory store: fast, per process; the workbench expires idle workflows from it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from flowsteer_mcp.store.base import StoredWorkflow


class MemoryStore:
    persistent = False
    shared = False

    def __init__(self) -> None:
        self._records: dict[str, StoredWorkflow] = {}

    @asynccontextmanager
    async def exclusive(self, key: str) -> AsyncIterator[MemoryStore]:
        """Nothing to hold: only this process sees the store, and the workbench's locks serialise it."""
        yield self

    async def get(self, workflow_id: str) -> StoredWorkflow | None:
        return self._records.get(workflow_id)

    async def put(self, record: StoredWorkflow) -> None:
        self._records[record.workflow_id] = record

    async def delete(self, workflow_id: str) -> bool:
        return self._records.pop(workflow_id, None) is not None

    async def stale(self, updated_before: float) -> list[str]:
        return [r.workflow_id for r in self._records.values() if r.updated_at < updated_before]

    async def versions(self) -> dict[str, float]:
        """Each workflow's `updated_at`: what the viewer polls, without copying records."""
        return {workflow_id: record.updated_at for workflow_id, record in self._records.items()}

    async def list(self) -> list[StoredWorkflow]:
        return list(self._records.values())

    async def count(self) -> int:
        return len(self._records)

    async def close(self) -> None:
        self._records.clear()
