"""Rollouts over several vLLM replicas of the policy (docs/design/training.md, "Replicas").

A `ReplicaPool` holds the replicas' base URLs (`http://host:port`, no `/v1`) with their in-flight requests.
An episode leases one replica the first time it generates and keeps it while that replica lives (vLLM's
prefix cache holds the episode's earlier turns); a new episode gets the replica with the fewest in-flight
requests (then the fewest episodes, then the first). A connection failure marks a replica dead: its episodes
are "lost" and their later requests fail at once, so the rollout worker can retry each of them from scratch
on another replica (at most once per replica). With no replica left, leasing raises `NoReplicaLeftError`.

The pool and the transport are the routing core of `operators/backends/replicas.py` (shared with the executor's
and the evaluation's replicas), with this module's errors. The routing happens in `ReplicaTransport`, an httpx2 transport (what `openai` is built on) under the policy's
one `AsyncOpenAI` client: each episode's client is `openai.with_options(default_headers=episode_headers(key))`,
and the transport sends the request to the episode's replica. Requests without the header (probes) go to the least loaded replica.

`ReplicaSync` publishes each step's adapter on every live replica with one `LoraSync` each and probes each;
a replica that cannot load or answer is marked dead (with one replica, the error is raised as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Protocol

import anyio
import httpx2
import structlog

from operators.backends import replicas as core
from operators.backends.replicas import CONNECTION_FAILURES, EPISODE_HEADER, Replica, episode_headers
from training.errors import TrainingError
from training.vllm.lora_sync import LoraSync, LoraSyncError, ProbeDelta, adapter_name

__all__ = [
    "CONNECTION_FAILURES",
    "EPISODE_HEADER",
    "REPLICAS_BASE_URL",
    "NoReplicaLeftError",
    "Replica",
    "ReplicaLostError",
    "ReplicaPool",
    "ReplicaSync",
    "ReplicaTransport",
    "episode_headers",
    "routed_client",
]

log = structlog.get_logger(__name__)


class NoReplicaLeftError(TrainingError, core.NoReplicaLeftError):
    """Every policy replica is dead: the run cannot generate; the message says why each one died."""


class ReplicaLostError(TrainingError, httpx2.TransportError):
    """The episode's replica died while the episode ran; it is retried from scratch, never continued elsewhere."""


class _Work(Protocol):
    async def __call__(self, url: str, sync: LoraSync, /) -> None: ...


class ReplicaPool(core.ReplicaPool):
    """The routing core (`operators/backends/replicas.py`) for the policy: raises this module's
    `NoReplicaLeftError` (a `TrainingError`) when every replica is dead."""

    no_replica_error: ClassVar[type[Exception]] = NoReplicaLeftError
    dead_event: ClassVar[str] = "vllm_replica_dead"
    revived_event: ClassVar[str] = "vllm_replica_revived"

    def __init__(self, urls: Sequence[str]) -> None:
        super().__init__(urls, role="policy")


class ReplicaTransport(core.ReplicaTransport):
    """Sends each request to its episode's replica (header `EPISODE_HEADER`), counting it in flight there.

    The request's path is kept and put under the replica's URL, so the client's base URL is a placeholder
    (`REPLICAS_BASE_URL`). A connection failure marks the replica dead and is raised to the caller; a later
    request of an episode whose replica died raises `ReplicaLostError` (the episode is retried from scratch).
    """

    lost_error: ClassVar[type[Exception] | None] = ReplicaLostError

    def __init__(self, pool: core.ReplicaPool, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        super().__init__(pool, inner, failover=False)


REPLICAS_BASE_URL = "http://policy-replicas/v1"  # the routed client's placeholder: ReplicaTransport picks the host


def routed_client(pool: core.ReplicaPool, *, timeout_s: float | None = None) -> httpx2.AsyncClient:
    """An httpx2 client (for `AsyncOpenAI(http_client=...)`) whose requests go through the pool."""
    return httpx2.AsyncClient(transport=ReplicaTransport(pool), timeout=timeout_s)


class ReplicaSync:
    """`LoraSync` on every replica of a pool: each step's adapter is loaded and probed on every live replica.

    A replica that cannot load the adapter or answer the probe is marked dead (counted in `failed_loads`); with
    a single replica the `LoraSyncError` is raised as before, since there is no other replica to go on with.
    """

    def __init__(self, pool: ReplicaPool, run_name: str, *, max_loaded: int = 1, timeout_s: float = 120.0) -> None:
        self.pool = pool
        self.run_name = run_name
        self.syncs = {url: LoraSync(url, run_name, max_loaded=max_loaded, timeout_s=timeout_s) for url in pool.urls}
        self.failed_loads = 0

    def _live(self) -> list[tuple[str, LoraSync]]:
        self.pool.require_alive()
        return [(url, sync) for url, sync in self.syncs.items() if self.pool.is_alive(url)]

    @property
    def loaded(self) -> list[str]:
        """The adapter names loaded on the live replicas (the same on each), oldest first."""
        live = self._live()
        return live[0][1].loaded

    @property
    def current(self) -> str | None:
        return self._live()[0][1].current

    def _fail(self, url: str, action: str, error: LoraSyncError) -> None:
        if len(self.syncs) == 1:
            raise error
        self.failed_loads += 1
        self.pool.mark_dead(url, f"{action}: {error}")

    async def _each(self, action: str, work: _Work) -> None:
        """Run `work(url, sync)` on every live replica at once; a replica whose work fails is marked dead."""

        async def one(url: str, sync: LoraSync) -> None:
            try:
                await work(url, sync)
            except LoraSyncError as error:
                self._fail(url, action, error)

        live = self._live()
        if len(live) == 1:  # no task group: a single replica's error is raised as itself, not in a group
            await one(*live[0])
        else:
            async with anyio.create_task_group() as group:
                for url, sync in live:
                    group.start_soon(one, url, sync)
        self.pool.require_alive()

    async def publish(self, adapter_dir: Path, step: int) -> str:
        """Load `adapters/step-N` as `<run>@N` on every live replica and confirm it on each."""

        async def load(url: str, sync: LoraSync) -> None:
            await sync.publish(adapter_dir, step)

        await self._each(f"load {adapter_name(self.run_name, step)}", load)
        return adapter_name(self.run_name, step)

    async def resume_at(self, adapter_dir: Path, step: int) -> str:
        """On each replica: drop names published after `step`, then adopt `<run>@<step>` if it is still served,
        else load it from the checkpoint's adapter."""
        name = adapter_name(self.run_name, step)

        async def resume(url: str, sync: LoraSync) -> None:
            await sync.unload_later_than(step)
            if name in await sync.served():
                await sync.adopt(step)
            else:
                await sync.publish(adapter_dir, step)

        await self._each(f"resume {name}", resume)
        return name

    async def revive(self, url: str, adapter_dir: Path, step: int) -> None:
        """A dead replica restarted with nothing loaded: serve it `<run>@<step>` through a fresh `LoraSync` (the
        old one remembers adapters the dead process held), then put it back in rotation. A failed load raises
        and leaves the replica dead."""
        old = self.syncs[url]
        fresh = LoraSync(url, self.run_name, max_loaded=old.max_loaded, timeout_s=old.timeout_s)
        try:
            await fresh.publish(adapter_dir, step)
        except BaseException:
            await fresh.aclose()
            raise
        self.syncs[url] = fresh
        await old.aclose()
        self.pool.revive(url)

    async def unload_later_than(self, step: int) -> None:
        async def unload(url: str, sync: LoraSync) -> None:
            await sync.unload_later_than(step)

        await self._each(f"unload adapters after step {step}", unload)

    async def verify_each(
        self, probe_messages: Sequence[dict[str, str]], *, base_model: str, adapter: str | None = None
    ) -> dict[str, ProbeDelta]:
        """The stale-adapter probe on every live replica, by URL; a replica that cannot answer is marked dead."""
        deltas: dict[str, ProbeDelta] = {}

        async def probe(url: str, sync: LoraSync) -> None:
            deltas[url] = await sync.verify_changed(probe_messages, base_model=base_model, adapter=adapter)

        await self._each("probe", probe)
        return {url: delta for url, delta in deltas.items() if self.pool.is_alive(url)}

    async def verify_changed(
        self, probe_messages: Sequence[dict[str, str]], *, base_model: str, adapter: str | None = None
    ) -> ProbeDelta:
        """The smallest probe delta over the live replicas: zero on any replica means one is not applying it."""
        deltas = await self.verify_each(probe_messages, base_model=base_model, adapter=adapter)
        return min(deltas.values(), key=lambda delta: delta.max_abs_diff)

    async def aclose(self) -> None:
        for sync in self.syncs.values():
            await sync.aclose()
