"""Rollouts over several vLLM replicas of the policy (docs/design/training.md, "Replicas").

A `ReplicaPool` holds the replicas' base URLs (`http://host:port`, no `/v1`) with their in-flight requests.
An episode leases one replica the first time it generates and keeps it while that replica lives (vLLM's
prefix cache holds the episode's earlier turns); a new episode gets the replica with the fewest in-flight
requests (then the fewest episodes, then the first). A connection failure marks a replica dead: its episodes
are "lost" and their later requests fail at once, so the rollout worker can retry each of them from scratch
on another replica (at most once per replica). With no replica left, leasing raises `NoReplicaLeftError`.

The routing happens in `ReplicaTransport`, an httpx2 transport (what `openai` is built on) under the policy's
one `AsyncOpenAI` client: each episode's client is `openai.with_options(default_headers=episode_headers(key))`,
and the transport sends the request to the episode's replica. Requests without the header (probes) go to the least loaded replica.

`ReplicaSync` publishes each step's adapter on every live replica with one `LoraSync` each and probes each;
a replica that cannot load or answer is marked dead (with one replica, the error is raised as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio
import httpx2
import structlog

from training.errors import TrainingError
from training.vllm.lora_sync import LoraSync, LoraSyncError, ProbeDelta, adapter_name

log = structlog.get_logger(__name__)

EPISODE_HEADER = "x-flowsteer-episode"
# Failures of the connection itself (refused, reset, closed without an answer): the replica is gone. Timeouts
# are not among them: a slow replica is still alive, and the episode's own time limit handles it.
CONNECTION_FAILURES: tuple[type[Exception], ...] = (
    httpx2.ConnectError,
    httpx2.RemoteProtocolError,
    httpx2.ReadError,
    httpx2.WriteError,
)


class NoReplicaLeftError(TrainingError, RuntimeError):
    """Every policy replica is dead: the run cannot generate; the message says why each one died."""


class ReplicaLostError(TrainingError, httpx2.TransportError):
    """The episode's replica died while the episode ran; it is retried from scratch, never continued elsewhere."""


def episode_headers(key: str) -> dict[str, str]:
    """The header that makes every request of one episode go to that episode's replica."""
    return {EPISODE_HEADER: key}


@dataclass
class Replica:
    index: int
    url: str  # http://host:port, without /v1
    in_flight: int = 0  # HTTP requests sent and not yet answered
    episodes: int = 0  # episodes that hold a lease on it now
    alive: bool = True
    reason: str | None = None  # why it was marked dead


@dataclass
class _Lease:
    replica: Replica | None  # the replica of the running attempt; None between attempts
    lost: bool = False  # that replica died while the attempt held it
    tried: set[int] = field(default_factory=set)  # replicas this episode has run on


class _Work(Protocol):
    async def __call__(self, url: str, sync: LoraSync, /) -> None: ...


class ReplicaPool:
    """N replica URLs with in-flight counters, sticky leases per episode key and dead-replica bookkeeping.

    Everything runs on one event loop (no awaits inside), so no lock is needed.
    """

    def __init__(self, urls: Sequence[str]) -> None:
        cleaned = [url.rstrip("/") for url in urls]
        if not cleaned:
            raise ValueError("a replica pool needs at least one URL")
        repeated = sorted({url for url in cleaned if cleaned.count(url) > 1})
        if repeated:
            raise ValueError(f"replica URLs must be distinct, repeated: {repeated}")
        self.replicas = [Replica(index, url) for index, url in enumerate(cleaned)]
        self._leases: dict[str, _Lease] = {}
        self.deaths = 0  # replicas marked dead since the pool was made

    @property
    def urls(self) -> list[str]:
        return [replica.url for replica in self.replicas]

    @property
    def alive(self) -> list[str]:
        return [replica.url for replica in self.replicas if replica.alive]

    @property
    def n_alive(self) -> int:
        return sum(replica.alive for replica in self.replicas)

    def replica(self, url: str) -> Replica:
        url = url.rstrip("/")
        for replica in self.replicas:
            if replica.url == url:
                return replica
        raise KeyError(f"{url} is not a replica of this pool ({self.urls})")

    def is_alive(self, url: str) -> bool:
        return self.replica(url).alive

    def lease(self, key: str | None = None) -> str:
        """The URL `key`'s requests go to: its replica while alive, else the least loaded live one.

        Without a key, the least loaded live replica, with no lease. Raises `NoReplicaLeftError` when every
        replica is dead.
        """
        return self.route(key).url

    def lost(self, key: str) -> bool:
        """Whether `key`'s replica died while the episode held it (its attempt must be started again)."""
        lease = self._leases.get(key)
        return lease is not None and lease.lost

    def end_episode(self, key: str) -> bool:
        """Release `key`'s lease (its attempt is over); True when its replica died meanwhile. The replicas it
        ran on are remembered until `forget`, so a retry goes to another one."""
        lease = self._leases.get(key)
        if lease is None:
            return False
        lost = lease.lost
        self._release(lease)
        return lost

    def can_retry(self, key: str) -> bool:
        """Whether a live replica remains that `key` has not run on yet."""
        lease = self._leases.get(key)
        tried = lease.tried if lease is not None else set()
        return any(replica.alive and replica.index not in tried for replica in self.replicas)

    def forget(self, key: str) -> None:
        """Drop everything known about `key` (its episode is final)."""
        lease = self._leases.pop(key, None)
        if lease is not None:
            self._release(lease)

    def mark_dead(self, url: str, reason: str) -> None:
        """Take a replica out of rotation: the episodes running on it are lost; new ones go elsewhere."""
        replica = self.replica(url)
        if not replica.alive:
            return
        replica.alive = False
        replica.reason = reason
        self.deaths += 1
        lost = 0
        for lease in self._leases.values():
            if lease.replica is replica:
                lease.lost = True
                lost += 1
        log.warning("vllm_replica_dead", url=replica.url, reason=reason, episodes_lost=lost, alive=self.n_alive)

    def require_alive(self) -> None:
        """Raise `NoReplicaLeftError`, naming each replica's cause of death, when none is alive."""
        if self.n_alive == 0:
            raise NoReplicaLeftError(self._obituary())

    # -- internals ----------------------------------------------------------------------------------------------

    @staticmethod
    def _release(lease: _Lease) -> None:
        if lease.replica is not None and lease.replica.episodes > 0:
            lease.replica.episodes -= 1
        lease.replica = None
        lease.lost = False

    def route(self, key: str | None) -> Replica:
        """What `lease` does, returning the replica itself (its in-flight counter is the transport's to keep)."""
        lease = self._leases.get(key) if key is not None else None
        if lease is not None and lease.replica is not None and lease.replica.alive:
            return lease.replica  # sticky: the episode's earlier turns are in this replica's prefix cache
        self.require_alive()
        live = [replica for replica in self.replicas if replica.alive]
        if lease is not None:
            self._release(lease)  # re-routed: its replica died
            live = [replica for replica in live if replica.index not in lease.tried] or live
        chosen = min(live, key=lambda replica: (replica.in_flight, replica.episodes, replica.index))
        if key is not None:
            if lease is None:
                lease = self._leases[key] = _Lease(None)
            lease.replica = chosen
            lease.tried.add(chosen.index)
            chosen.episodes += 1
        return chosen

    def _obituary(self) -> str:
        causes = "; ".join(f"{replica.url}: {replica.reason}" for replica in self.replicas)
        return f"no policy replica is left ({len(self.replicas)} configured, all dead): {causes}"


class ReplicaTransport(httpx2.AsyncBaseTransport):
    """Sends each request to its episode's replica (header `EPISODE_HEADER`), counting it in flight there.

    The request's path is kept and put under the replica's URL, so the client's base URL is a placeholder
    (`REPLICAS_BASE_URL`). A connection failure marks the replica dead and is raised to the caller.
    """

    def __init__(self, pool: ReplicaPool, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.pool = pool
        self._inner = inner or httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        key = request.headers.get(EPISODE_HEADER)
        if key is not None:
            del request.headers[EPISODE_HEADER]
            if self.pool.lost(key):
                raise ReplicaLostError(f"episode {key}: its policy replica died; it is retried from scratch")
        replica = self.pool.route(key)
        target = httpx2.URL(replica.url)
        request.url = request.url.copy_with(
            scheme=target.scheme,
            host=target.host,
            port=target.port,
            path=target.path.rstrip("/") + request.url.path,
        )
        request.headers["host"] = target.netloc.decode("ascii")
        replica.in_flight += 1
        try:
            response = await self._inner.handle_async_request(request)
            await response.aread()  # in flight until the whole answer is in
            return response
        except CONNECTION_FAILURES as error:
            self.pool.mark_dead(replica.url, f"{type(error).__name__}: {error}")
            raise
        finally:
            replica.in_flight -= 1

    async def aclose(self) -> None:
        await self._inner.aclose()


REPLICAS_BASE_URL = "http://policy-replicas/v1"  # the routed client's placeholder: ReplicaTransport picks the host


def routed_client(pool: ReplicaPool, *, timeout_s: float | None = None) -> httpx2.AsyncClient:
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
