"""The workbench: all live workflows of a server, with per-workflow locks, limits and idle expiry.

Operations on one workflow are serialised by its lock; different workflows proceed concurrently. A
mutating operation writes the new state to the store before it returns, so what a client saw acknowledged
is what a restart (with a persistent store) brings back.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import structlog

from flowsteer_mcp.canvas.execution import WorkflowExecutor
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.store.base import StoredWorkflow, WorkflowStore
from operators.registry import OperatorRegistry

log = structlog.get_logger(__name__)


class WorkflowNotFound(LookupError):
    pass


class WorkbenchFull(RuntimeError):
    pass


@dataclass
class _Entry:
    record: StoredWorkflow
    last_used: float
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class Workbench:
    def __init__(
        self,
        store: WorkflowStore,
        registry: OperatorRegistry,
        executor: WorkflowExecutor,
        *,
        max_workflows: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.registry = registry
        self.executor = executor
        self.max_workflows = max_workflows
        self.ttl_s = ttl_s
        self._clock = clock
        self._live: dict[str, _Entry] = {}
        self._locks: dict[str, anyio.Lock] = {}

    def _lock(self, workflow_id: str) -> anyio.Lock:
        lock = self._locks.get(workflow_id)
        if lock is None:
            lock = self._locks[workflow_id] = anyio.Lock()
        return lock

    async def create(self, state: CanvasState) -> tuple[str, Canvas]:
        await self.sweep()
        if await self.store.count() >= self.max_workflows:
            raise WorkbenchFull(
                f"This server already holds {self.max_workflows} workflows; delete finished ones with delete_workflow."
            )
        workflow_id = "wf_" + secrets.token_hex(8)
        now = time.time()
        record = StoredWorkflow(workflow_id=workflow_id, state=state, created_at=now, updated_at=now)
        await self.store.put(record)
        self._live[workflow_id] = _Entry(record=record, last_used=self._clock())
        log.info("workflow_created", workflow_id=workflow_id, task_type=state.task.task_type)
        return workflow_id, Canvas(state, self.registry, self.executor)

    async def _entry(self, workflow_id: str) -> _Entry:
        entry = self._live.get(workflow_id)
        if entry is None:
            record = await self.store.get(workflow_id)
            if record is None:
                raise WorkflowNotFound(workflow_id)
            entry = self._live.setdefault(workflow_id, _Entry(record=record, last_used=self._clock()))
        entry.last_used = self._clock()
        return entry

    @asynccontextmanager
    async def open(self, workflow_id: str, *, write: bool = True) -> AsyncIterator[Canvas]:
        """Lock a workflow and hand out its canvas; on success a writing caller's new state is stored."""
        async with self._lock(workflow_id):
            entry = await self._entry(workflow_id)
            canvas = Canvas(entry.record.state, self.registry, self.executor)
            try:
                yield canvas
            finally:
                entry.record.state = canvas.state  # the canvas may have restored a snapshot
            if write:
                record = entry.record.model_copy(update={"updated_at": time.time()})
                await self.store.put(record)
                entry.record = record

    async def delete(self, workflow_id: str) -> bool:
        async with self._lock(workflow_id):
            self._live.pop(workflow_id, None)
            deleted = await self.store.delete(workflow_id)
        self._locks.pop(workflow_id, None)
        return deleted

    async def list(self) -> list[StoredWorkflow]:
        await self.sweep()
        return await self.store.list()

    async def sweep(self) -> int:
        """Expire idle workflows: dropped from a memory store, only evicted from the cache of a persistent one."""
        now = self._clock()
        expired = [
            wid for wid, e in self._live.items() if now - e.last_used > self.ttl_s and not self._lock(wid).locked()
        ]
        for workflow_id in expired:
            self._live.pop(workflow_id, None)
            if not self.store.persistent:
                await self.store.delete(workflow_id)
                self._locks.pop(workflow_id, None)
                log.info("workflow_expired", workflow_id=workflow_id)
        return len(expired)
