"""Routing requests over several replicas of one OpenAI-compatible model (docs/design/training.md, "Replicas").

The pure routing core shared by the executor (`OpenAICompatBackend` with `base_urls`), the evaluation's policy
and MCP fleets (`flowsteer eval`) and the training's policy replicas (`training/vllm/replicas.py`, which adds
its episode-retry rules and adapter sync on top). Nothing here imports `training` or `flowsteer_mcp`.

A `ReplicaPool` holds the replicas' base URLs with their in-flight requests. A key (an episode, a workflow run)
leases one replica the first time it sends and keeps it while that replica lives (vLLM's prefix cache holds
the key's earlier prompts); a new key gets the replica with the fewest in-flight requests (then the fewest
leases, then the first). A connection failure marks a replica dead; with no replica left, routing raises the
pool's `no_replica_error` (a `NoReplicaLeftError`) naming each replica's cause of death.

`ReplicaTransport` is an httpx2 transport (what `openai` is built on) that sends each request to its key's
replica: the key comes from the `EPISODE_HEADER` header, else from the `AFFINITY` context variable, else the
request goes to the least loaded replica without a lease. With `failover=True` (stateless chat requests: the
executor, the evaluation's policy) a request whose replica's connection fails is sent again, at once, to the
least loaded live replica, and its key moves there; without it (training) the failure is raised to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import ClassVar

import httpx2
import structlog

from operators.errors import OperatorsError

__all__ = [
    "AFFINITY",
    "CONNECTION_FAILURES",
    "EPISODE_HEADER",
    "NoReplicaLeftError",
    "Replica",
    "ReplicaPool",
    "ReplicaTransport",
    "episode_headers",
    "routed_client",
]

log = structlog.get_logger(__name__)

EPISODE_HEADER = "x-flowsteer-episode"
# The key of the requests sent from this context when they carry no `EPISODE_HEADER` (set per episode by an
# evaluation, so a director shared by all episodes still keeps each episode on one replica).
AFFINITY: ContextVar[str | None] = ContextVar("flowsteer_replica_affinity", default=None)
# Failures of the connection itself (refused, reset, closed without an answer): the replica is gone. Timeouts
# are not among them: a slow replica is still alive, and the caller's own time limit handles it.
CONNECTION_FAILURES: tuple[type[Exception], ...] = (
    httpx2.ConnectError,
    httpx2.RemoteProtocolError,
    httpx2.ReadError,
    httpx2.WriteError,
)


class NoReplicaLeftError(OperatorsError, RuntimeError):
    """Every replica of a pool is dead: nothing can answer; the message says why each one died."""


def episode_headers(key: str) -> dict[str, str]:
    """The header that makes every request of one episode (or run) go to that key's replica."""
    return {EPISODE_HEADER: key}


@dataclass
class Replica:
    index: int
    url: str  # the replica's base URL (the request's path is appended to it)
    in_flight: int = 0  # HTTP requests sent and not yet answered (or sessions open, for an MCP fleet)
    episodes: int = 0  # keys that hold a lease on it now
    alive: bool = True
    reason: str | None = None  # why it was marked dead


@dataclass
class _Lease:
    replica: Replica | None  # the replica of the running attempt; None between attempts
    lost: bool = False  # that replica died while the attempt held it
    tried: set[int] = field(default_factory=set)  # replicas this key has run on


class ReplicaPool:
    """N replica URLs with in-flight counters, sticky leases per key and dead-replica bookkeeping.

    Everything runs on one event loop (no awaits inside), so no lock is needed. `role` names the replicas in
    the error raised when none is left ("policy", "executor", "MCP server"). `max_leases` bounds the keys
    remembered (the oldest is forgotten first): a server routing workflow runs never learns when a run is over.
    """

    no_replica_error: ClassVar[type[Exception]] = NoReplicaLeftError
    dead_event: ClassVar[str] = "replica_dead"  # the log event of `mark_dead`
    revived_event: ClassVar[str] = "replica_revived"  # the log event of `revive`

    def __init__(self, urls: Sequence[str], *, role: str = "policy", max_leases: int | None = None) -> None:
        cleaned = [url.rstrip("/") for url in urls]
        if not cleaned:
            raise ValueError("a replica pool needs at least one URL")
        repeated = sorted({url for url in cleaned if cleaned.count(url) > 1})
        if repeated:
            raise ValueError(f"replica URLs must be distinct, repeated: {repeated}")
        if max_leases is not None and max_leases < 1:
            raise ValueError("max_leases must be at least 1")
        self.role = role
        self.max_leases = max_leases
        self.replicas = [Replica(index, url) for index, url in enumerate(cleaned)]
        self._leases: dict[str, _Lease] = {}
        self.deaths = 0  # replicas marked dead since the pool was made
        self.revivals = 0  # dead replicas put back after a restart

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

        Without a key, the least loaded live replica, with no lease. Raises the pool's `no_replica_error`
        when every replica is dead.
        """
        return self.route(key).url

    def lost(self, key: str) -> bool:
        """Whether `key`'s replica died while the key held it (its attempt must be started again)."""
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
        """Take a replica out of rotation: the keys running on it are lost; new ones go elsewhere."""
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
        log.warning(
            self.dead_event, role=self.role, url=replica.url, reason=reason, episodes_lost=lost, alive=self.n_alive
        )

    def revive(self, url: str) -> None:
        """Put a replica that was restarted back in rotation (its old requests count down as they fail)."""
        replica = self.replica(url)
        if replica.alive:
            return
        replica.alive, replica.reason = True, None
        self.revivals += 1
        log.info(self.revived_event, role=self.role, url=replica.url, alive=self.n_alive)

    def require_alive(self) -> None:
        """Raise the pool's `no_replica_error`, naming each replica's cause of death, when none is alive."""
        if self.n_alive == 0:
            raise self.no_replica_error(self._obituary())

    def route(self, key: str | None) -> Replica:
        """What `lease` does, returning the replica itself (its in-flight counter is the caller's to keep)."""
        lease = self._leases.get(key) if key is not None else None
        if lease is not None and lease.replica is not None and lease.replica.alive:
            return lease.replica  # sticky: the key's earlier prompts are in this replica's prefix cache
        self.require_alive()
        live = [replica for replica in self.replicas if replica.alive]
        if lease is not None:
            self._release(lease)  # re-routed: its replica died
            live = [replica for replica in live if replica.index not in lease.tried] or live
        chosen = min(live, key=lambda replica: (replica.in_flight, replica.episodes, replica.index))
        if key is not None:
            if lease is None:
                self._evict_oldest()
                lease = self._leases[key] = _Lease(None)
            lease.replica = chosen
            lease.tried.add(chosen.index)
            chosen.episodes += 1
        return chosen

    # -- internals ----------------------------------------------------------------------------------------------

    @staticmethod
    def _release(lease: _Lease) -> None:
        if lease.replica is not None and lease.replica.episodes > 0:
            lease.replica.episodes -= 1
        lease.replica = None
        lease.lost = False

    def _evict_oldest(self) -> None:
        if self.max_leases is not None and len(self._leases) >= self.max_leases:
            self.forget(next(iter(self._leases)))

    def _obituary(self) -> str:
        causes = "; ".join(f"{replica.url}: {replica.reason}" for replica in self.replicas)
        return f"no {self.role} replica is left ({len(self.replicas)} configured, all dead): {causes}"


# httpx's default pool (100 connections, 20 kept alive) is shared by every replica behind one client: at the
# paper's 128 concurrent episodes over 4 replicas, requests queued inside the client while routing counted them
# as replica load, and 44% of calls opened a new connection (benchmarks/rollout_scaling.py). The callers bound
# their concurrency themselves, so the pool does not.
REPLICA_LIMITS = httpx2.Limits(max_connections=None, max_keepalive_connections=None)


class ReplicaTransport(httpx2.AsyncBaseTransport):
    """Sends each request to its key's replica (header `EPISODE_HEADER`, else `AFFINITY`), counting it in flight.

    The request's path is kept and put under the replica's URL, so the client's base URL is a placeholder. A
    connection failure marks the replica dead; with `failover` the request is sent again to another live
    replica (until none is left), else the failure is raised to the caller. `lost_error`, when set, is raised
    at once for a key whose replica died while it held it (training retries such an episode from scratch).
    """

    lost_error: ClassVar[type[Exception] | None] = None

    def __init__(
        self, pool: ReplicaPool, inner: httpx2.AsyncBaseTransport | None = None, *, failover: bool = False
    ) -> None:
        self.pool = pool
        self.failover = failover
        self._inner = inner or httpx2.AsyncHTTPTransport(limits=REPLICA_LIMITS)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        key = request.headers.get(EPISODE_HEADER)
        if key is not None:
            del request.headers[EPISODE_HEADER]
        else:
            key = AFFINITY.get()
        if key is not None and self.lost_error is not None and self.pool.lost(key):
            raise self.lost_error(f"episode {key}: its {self.pool.role} replica died; it is retried from scratch")
        path = request.url.path
        while True:
            replica = self.pool.route(key)
            target = httpx2.URL(replica.url)
            request.url = request.url.copy_with(
                scheme=target.scheme, host=target.host, port=target.port, path=target.path.rstrip("/") + path
            )
            request.headers["host"] = target.netloc.decode("ascii")
            replica.in_flight += 1
            try:
                response = await self._inner.handle_async_request(request)
                await response.aread()  # in flight until the whole answer is in
                return response
            except CONNECTION_FAILURES as error:
                self.pool.mark_dead(replica.url, f"{type(error).__name__}: {error}")
                if not self.failover:
                    raise
                self.pool.require_alive()  # none left: the pool's error, naming each replica's cause of death
                log.info("replica_failover", role=self.pool.role, dead=replica.url, key=key)
            finally:
                replica.in_flight -= 1

    async def aclose(self) -> None:
        await self._inner.aclose()


def routed_client(pool: ReplicaPool, *, timeout_s: float | None = None, failover: bool = False) -> httpx2.AsyncClient:
    """An httpx2 client (for `AsyncOpenAI(http_client=...)`) whose requests go through the pool."""
    return httpx2.AsyncClient(transport=ReplicaTransport(pool, failover=failover), timeout=timeout_s)
