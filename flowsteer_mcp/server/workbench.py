"""The workbench: all live workflows of a server, with per-workflow locks, limits and expiry.

Writes to one workflow are serialised by its lock; different workflows proceed concurrently. A writer
works on a copy of the state, and the live state is replaced only once the store has accepted the new one:
memory and store change together or not at all. So what a client saw acknowledged is what a restart (with a
persistent store) brings back, and a refused write leaves the workflow exactly as it was, still usable.

Reads never wait for the lock: they see the last committed state (records are replaced whole, never mutated),
so a client can watch a workflow while a step that runs it for minutes holds the lock. After every committed
change (create, edit, delete, expiry) the workbench tells its listeners (resource subscriptions, the viewer).

Expiry: a workflow unused (neither read nor edited) for `ttl_s` leaves the cache; from a memory store it is
deleted then. A persistent workflow is deleted once unedited for `persistent_ttl_s` (None keeps it until
delete_workflow). A workflow in use (held, awaited or being read) is never expired under its user. The lock
table holds only workflows that some task holds or waits for, so unknown, deleted and expired ids leave nothing
behind.

A shared store (PostgreSQL under a fleet of servers) changes under this process, so nothing is cached for it:
every read loads the last committed state from the store, and every write (and delete, expiry, admission)
holds the store's fleet-wide lock (`store.exclusive`) from its load to its commit, after the in-process lock
(so one server's steps queue in-process and hold at most one database session per workflow). Expiry of a
shared workflow re-reads its `updated_at` under that lock, so an edit made by another server saves it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import anyio
import structlog

from flowsteer_mcp.canvas.execution import RUN_SCOPE, WorkflowRunner
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.errors import FlowSteerError
from flowsteer_mcp.store.base import ADMISSION_KEY, StoredWorkflow, WorkflowStore
from operators.registry import OperatorRegistry

log = structlog.get_logger(__name__)

DEFAULT_PERSISTENT_TTL_S = 30 * 86_400.0  # a month without an edit
_REASON_CHARS = 300


class WorkflowNotFound(FlowSteerError, LookupError):
    pass


class WorkbenchFull(FlowSteerError, RuntimeError):
    pass


class WorkflowNotSaved(FlowSteerError, RuntimeError):
    """The store refused a new state; the workflow (or the workbench, for a create) is exactly as before."""


@dataclass(frozen=True)
class WorkflowChange:
    """A committed change of one workflow, as listeners receive it."""

    kind: Literal["created", "updated", "deleted"]
    workflow_id: str


ChangeListener = Callable[[WorkflowChange], Awaitable[None]]


@dataclass
class _Entry:
    record: StoredWorkflow  # the committed state: replaced whole after each accepted write, never mutated
    last_used: float  # `clock` time of the last read or edit


@dataclass
class _LockSlot:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    users: int = 0  # tasks holding or waiting for the lock; the slot is dropped when it reaches 0


class Workbench:
    def __init__(
        self,
        store: WorkflowStore,
        registry: OperatorRegistry,
        runner: WorkflowRunner,
        *,
        max_workflows: int,
        ttl_s: float,
        persistent_ttl_s: float | None = DEFAULT_PERSISTENT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.runner = runner
        self.max_workflows = max_workflows
        self.ttl_s = ttl_s
        self.persistent_ttl_s = persistent_ttl_s
        self._clock = clock  # idle time in the cache
        self._wall_clock = wall_clock  # stored timestamps (they outlive the process)
        self._live: dict[str, _Entry] = {}
        self._locks: dict[str, _LockSlot] = {}
        self._readers: dict[str, int] = {}  # workflow id -> reads in progress (they never take the lock)
        self._listeners: list[ChangeListener] = []
        self._admission = anyio.Lock()  # makes count-then-put in `create` one step, so max_workflows is exact

    @property
    def lock_count(self) -> int:
        """Workflows some task holds or waits for (0 when the server is idle)."""
        return len(self._locks)

    # ----- locking ---------------------------------------------------------------------------------------
    @asynccontextmanager
    async def _locked(self, workflow_id: str) -> AsyncIterator[None]:
        slot = self._locks.get(workflow_id)
        if slot is None:
            slot = self._locks[workflow_id] = _LockSlot()
        slot.users += 1
        try:
            async with slot.lock:
                yield
        finally:
            slot.users -= 1
            if slot.users == 0:
                del self._locks[workflow_id]

    def _in_use(self, workflow_id: str) -> bool:
        return workflow_id in self._locks or workflow_id in self._readers

    @asynccontextmanager
    async def _reading(self, workflow_id: str) -> AsyncIterator[None]:
        self._readers[workflow_id] = self._readers.get(workflow_id, 0) + 1
        try:
            yield
        finally:
            left = self._readers[workflow_id] - 1
            if left:
                self._readers[workflow_id] = left
            else:
                del self._readers[workflow_id]

    # ----- change listeners ------------------------------------------------------------------------------
    def add_listener(self, listener: ChangeListener) -> None:
        """Call `listener` after every committed change; a failing listener is logged, never the caller's error."""
        self._listeners.append(listener)

    async def _announce(self, kind: Literal["created", "updated", "deleted"], workflow_id: str) -> None:
        change = WorkflowChange(kind=kind, workflow_id=workflow_id)
        for listener in list(self._listeners):
            try:
                await listener(change)
            except Exception:
                log.warning("workflow_listener_failed", workflow_id=workflow_id, kind=kind, exc_info=True)

    # ----- operations --------------------------------------------------------------------------------------
    async def create(self, state: CanvasState) -> tuple[str, Canvas]:
        async with self._admission:
            await self.sweep()
            async with self.store.exclusive(ADMISSION_KEY) as store:  # max_workflows is exact across a fleet
                workflow_id = await self._admit(state, store)
        log.info("workflow_created", workflow_id=workflow_id, task_type=state.task.task_type)
        await self._announce("created", workflow_id)
        return workflow_id, Canvas(_working_copy(state), self.registry, self.runner)

    async def _admit(self, state: CanvasState, store: WorkflowStore) -> str:
        """Count, then store the new workflow (the caller holds admission in-process and in the store)."""
        if await store.count() >= self.max_workflows:
            raise WorkbenchFull(
                f"This server already holds {self.max_workflows} workflows; delete finished ones with delete_workflow."
            )
        workflow_id = "wf_" + secrets.token_hex(8)
        now = self._wall_clock()
        committed = state.model_copy(deep=True)  # the caller keeps no handle on the live state
        record = StoredWorkflow(workflow_id=workflow_id, state=committed, created_at=now, updated_at=now)
        with anyio.CancelScope(shield=True):
            await self._save(store, record, "The new workflow could not be saved ({reason}); nothing was created.")
            self._cache(record)
        return workflow_id

    @asynccontextmanager
    async def open(self, workflow_id: str, *, write: bool = True) -> AsyncIterator[Canvas]:
        """Hand out a canvas on a copy of a workflow's committed state. A writer holds the workflow's lock, and
        its new state is stored and then made live when the body returns normally (an exception discards it);
        a reader takes no lock and its changes are never kept. The canvas is the caller's only inside the block."""
        if not write:
            async with self._reading(workflow_id):
                entry = await self._entry(workflow_id, self.store)
                yield Canvas(_working_copy(entry.record.state), self.registry, self.runner)
            return
        async with self._locked(workflow_id), self.store.exclusive(workflow_id) as store:
            entry = await self._entry(workflow_id, store)
            canvas = Canvas(_working_copy(entry.record.state), self.registry, self.runner)
            scope = RUN_SCOPE.set(workflow_id)  # its runs reuse only its own memoised calls
            try:
                yield canvas
            finally:
                RUN_SCOPE.reset(scope)
            record = entry.record.model_copy(update={"state": canvas.state, "updated_at": self._wall_clock()})
            with anyio.CancelScope(shield=True):  # a write that started ends with memory and store alike
                await self._save(
                    store,
                    record,
                    f"The change to workflow {workflow_id} could not be saved ({{reason}}); nothing changed: "
                    "the workflow is exactly as before this call and can be used as usual.",
                )
                entry.record = record
        await self._announce("updated", workflow_id)  # after the lock: a slow listener never delays the next writer

    async def delete(self, workflow_id: str) -> bool:
        async with self._locked(workflow_id), self.store.exclusive(workflow_id) as store:
            self._live.pop(workflow_id, None)
            deleted = await store.delete(workflow_id)
        if deleted:
            await self._announce("deleted", workflow_id)
        return deleted

    async def list(self) -> list[StoredWorkflow]:
        await self.sweep()
        return await self.store.list()

    async def sweep(self) -> int:
        """Expire unused workflows (see the module docstring); returns how many left the cache or the store."""
        expired: set[str] = set()
        now = self._clock()
        for workflow_id in [w for w, e in self._live.items() if now - e.last_used > self.ttl_s]:
            if await self._expire_idle(workflow_id):
                expired.add(workflow_id)
        if self.store.persistent and self.persistent_ttl_s is not None:
            cutoff = self._wall_clock() - self.persistent_ttl_s
            for workflow_id in await self.store.stale(cutoff):
                if await self._delete_unedited(workflow_id, cutoff):
                    expired.add(workflow_id)
        return len(expired)

    # ----- internals -------------------------------------------------------------------------------------
    async def _entry(self, workflow_id: str, store: WorkflowStore) -> _Entry:
        """The committed state: the cached one of a private store, always the stored one of a shared store."""
        entry = None if self.store.shared else self._live.get(workflow_id)
        if entry is None:
            record = await store.get(workflow_id)
            if record is None:
                raise WorkflowNotFound(workflow_id)
            entry = self._cache(record)
        entry.last_used = self._clock()
        return entry

    def _cache(self, record: StoredWorkflow) -> _Entry:
        """The entry of a committed record, kept in `_live` only for a private store (a shared one caches nothing)."""
        entry = _Entry(record=record, last_used=self._clock())
        return entry if self.store.shared else self._live.setdefault(record.workflow_id, entry)

    async def _save(self, store: WorkflowStore, record: StoredWorkflow, message: str) -> None:
        try:
            await store.put(record)
        except Exception as error:
            reason = f"{type(error).__name__}: {error}"[:_REASON_CHARS]
            log.error("workflow_not_saved", workflow_id=record.workflow_id, reason=reason)
            raise WorkflowNotSaved(message.format(reason=type(error).__name__)) from error

    async def _expire_idle(self, workflow_id: str) -> bool:
        if self._in_use(workflow_id):
            return False
        async with self._locked(workflow_id):
            entry = self._live.get(workflow_id)
            if entry is None or self._clock() - entry.last_used <= self.ttl_s:
                return False
            del self._live[workflow_id]
            if not self.store.persistent:
                await self.store.delete(workflow_id)
                log.info("workflow_expired", workflow_id=workflow_id)
                await self._announce("deleted", workflow_id)
            return True

    async def _delete_unedited(self, workflow_id: str, cutoff: float) -> bool:
        if self._in_use(workflow_id):
            return False
        async with self._locked(workflow_id), self.store.exclusive(workflow_id) as store:
            entry = None if self.store.shared else self._live.get(workflow_id)
            current = entry.record if entry is not None else await store.get(workflow_id)
            if current is None or current.updated_at >= cutoff:
                return False  # gone, or edited (here or by another server) while the stale list was being read
            self._live.pop(workflow_id, None)
            if not await store.delete(workflow_id):
                return False
            log.info("workflow_expired", workflow_id=workflow_id, persistent=True)
            await self._announce("deleted", workflow_id)
            return True


def _working_copy(state: CanvasState) -> CanvasState:
    """A copy the canvas may change freely. History entries are shared: the canvas only appends to the list."""
    working = state.model_copy(update={"history": []}).model_copy(deep=True)
    working.history = list(state.history)
    return working
