"""Rollout scaling over policy replicas, and the MCP+canvas cost per episode at 256 concurrent episodes.

    python benchmarks/rollout_scaling.py [--quick] [--replicas 1,2,4] [--capacity C] [--latency S]

1. Scaling. Real rollouts (the in-memory MCP canvas, `PolicyDirector`, `collect_groups`, as in
   rollout_throughput.py) with the policy behind 1, 2 and 4 replicas, routed the way the trainer routes
   (training/train/loop.py): one `AsyncOpenAI` on `routed_client(ReplicaPool(urls))`, each episode's client
   `with_options(default_headers=episode_headers(episode_key(...)))`, and `collect_groups(..., replicas=pool)`.
   Each replica is a real HTTP server on a free 127.0.0.1 port, in its own forked process, answering like vLLM
   (token ids and log-probs, rollout_throughput's scripted stub). It works on at most `--capacity` requests at
   once, each for `--latency` s, and queues the rest: a vLLM replica's finite batch, without which more
   replicas could not help. N replicas run N x the episodes at N x the concurrency (2 x capacity per replica,
   so each slot has a request waiting), so the capacity model allows at most N x the episodes/s of one; the
   ratio over that is the routing's efficiency, and "slot use" the share of the replicas' slots kept busy.
   Why real servers in processes: the requests cross real sockets and the client's connection pool, as in
   training, and the servers' threads do not take the GIL from the event loop being measured. Why these
   defaults: an episode costs the rollout process about 0.12 s of CPU for its ~6 calls (part 2); at 1 s a
   call and 4 slots a replica, 4 replicas answer at most 16 calls/s, about a third of a core, and the servers
   far less (both printed as CPU per wall second), so these 2 cores are not the bottleneck. `--quick` halves
   the latency (twice the CPU rate) and runs fewer episodes. A replica that dies (`--die-after`) fails the
   run: a failover measures nothing about scaling.
2. Overhead. `--overhead-concurrency` (256; 64 with --quick) concurrent episodes against a zero-latency
   in-process policy (an httpx mock transport behind the same `ReplicaTransport`): wall-clock and CPU time per
   episode, less the policy's own handler time, i.e. the MCP canvas, director, client, routing and scoring.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import random
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import anyio
import httpx2
import structlog
from _guard import BenchmarkReport
from openai import AsyncOpenAI
from rollout_throughput import HoldingRunner, LatencyPolicyStub, trajectory_failures

from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.policy import PolicyDirector
from flowsteer_mcp.server import build_server
from operators.registry import OperatorRegistry, default_registry
from training.data import Problem
from training.rollout import RolloutBatch, collect_groups, episode_key, in_process_clients
from training.rollout.worker import MakeDirector
from training.vllm.replicas import (
    REPLICAS_BASE_URL,
    NoReplicaLeftError,
    ReplicaPool,
    ReplicaTransport,
    episode_headers,
    routed_client,
)

READY_S = 20.0  # a replica process that has not bound its port by then failed to start
MAX_RETRIES = 2  # the trainer's policy client's (training/train/loop.py)


# -- the replica servers (each in its own forked process) -------------------------------------------------------


class ReplicaState:
    """One replica's capacity model: at most `capacity` chat calls worked on at once, the rest wait their turn."""

    def __init__(self, capacity: int, latency_s: float, die_after: int | None) -> None:
        self.latency_s = latency_s
        self.die_after = die_after
        self._slots = threading.BoundedSemaphore(capacity)
        self._lock = threading.Lock()
        self._stub = LatencyPolicyStub(0.0, 0.0, 0.0)  # only its vLLM-like answers; the latency is injected here
        self.total_calls = 0
        self.counters = {"calls": 0, "connections": 0, "peak_waiting": 0, "peak_busy": 0}
        self._waiting = 0
        self._busy = 0

    def count_connection(self) -> None:
        with self._lock:
            self.counters["connections"] += 1

    def chat(self, body: dict[str, Any]) -> bytes | None:
        """The answer, after its turn and its latency; None once the replica has died (the connection is cut)."""
        with self._lock:
            self.total_calls += 1
            if self.die_after is not None and self.total_calls > self.die_after:
                return None
            self.counters["calls"] += 1
            self._waiting += 1
            self.counters["peak_waiting"] = max(self.counters["peak_waiting"], self._waiting)
        with self._slots:
            with self._lock:
                self._waiting -= 1
                self._busy += 1
                self.counters["peak_busy"] = max(self.counters["peak_busy"], self._busy)
            time.sleep(self.latency_s)
            answer = json.dumps(self._stub._completion(body)).encode()
            with self._lock:
                self._busy -= 1
        return answer

    def take_stats(self) -> dict[str, float]:
        """The counters since the last call (then reset), with this process's CPU seconds so far."""
        with self._lock:
            taken: dict[str, float] = {**self.counters, "cpu_s": time.process_time()}
            self.counters = dict.fromkeys(self.counters, 0)
        return taken


def _handler(state: ReplicaState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like vLLM

        def setup(self) -> None:
            super().setup()
            state.count_connection()

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": "policy"}]}).encode())
            elif self.path == "/stats":
                self._send(200, json.dumps(state.take_stats()).encode())
            else:
                self._send(404, b'{"detail": "Not Found"}')

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, b'{"detail": "Not Found"}')
                return
            answer = state.chat(json.loads(raw))
            if answer is None:
                self.close_connection = True  # a dead server answers nothing
                return
            self._send(200, answer)

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def serve_replica(ready: Connection, capacity: int, latency_s: float, die_after: int | None) -> None:
    """The replica process: bind a free loopback port, send it to the parent, serve until terminated."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ReplicaState(capacity, latency_s, die_after)))
    server.daemon_threads = True
    ready.send(int(server.server_address[1]))
    ready.close()
    server.serve_forever(poll_interval=0.1)


class ReplicaFleet:
    """Replica processes started (forked before any thread or event loop) and stopped by the benchmark."""

    def __init__(self, count: int, capacity: int, latency_s: float, die_after: int | None) -> None:
        self._args = (capacity, latency_s, die_after)
        self._count = count
        self.processes: list[BaseProcess] = []
        self.urls: list[str] = []

    def start(self) -> None:
        context = multiprocessing.get_context("fork")  # no re-import: the child starts serving at once
        for _ in range(self._count):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=serve_replica, args=(send, *self._args), daemon=True)
            process.start()
            send.close()
            self.processes.append(process)
            if not receive.poll(READY_S):
                raise RuntimeError(f"replica process {process.pid} did not bind a port in {READY_S:.0f} s")
            self.urls.append(f"http://127.0.0.1:{receive.recv()}")
        for url in self.urls:
            self._wait_ready(url)

    @staticmethod
    def _wait_ready(url: str) -> None:
        deadline = time.monotonic() + READY_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def stats(self, count: int) -> list[dict[str, float]]:
        """The first `count` replicas' counters since the last call (blocking: call it off the event loop)."""
        taken = []
        for url in self.urls[:count]:
            with urllib.request.urlopen(f"{url}/stats", timeout=5) as answer:
                stats = json.loads(answer.read())
            stats["connections"] -= 1  # this request's own
            taken.append(stats)
        return taken

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join(5)


@contextmanager
def replica_fleet(count: int, capacity: int, latency_s: float, die_after: int | None) -> Iterator[ReplicaFleet]:
    fleet = ReplicaFleet(count, capacity, latency_s, die_after)
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()


# -- rollouts ---------------------------------------------------------------------------------------------------


def problems_for(episodes: int, group_size: int, tag: str) -> list[Problem]:
    return [
        Problem(id=f"{tag}{i}", source="bench", problem_type="math", problem=f"What is 6*7? (#{i})", ground_truth="42")
        for i in range(max(1, episodes // group_size))
    ]


def trainer_directors(openai: AsyncOpenAI, registry: OperatorRegistry, prefix: str) -> MakeDirector:
    """Directors built as the trainer builds them: each episode's client carries its replica lease header.

    The stub's script length follows the seed (1 + seed % 4 operators); random seeds keep the lengths from
    lining up with the order episodes lease replicas in (consecutive seeds gave one replica every long episode).
    """
    draw = random.Random(0)

    def make(problem: Problem, index: int) -> PolicyDirector:
        client = openai.with_options(default_headers=episode_headers(episode_key(prefix, problem, index)))
        return PolicyDirector(
            client,
            "policy",
            sampling=PolicySampling(seed=draw.randrange(2**31)),
            canvas_options={"finish": "relaxed", "max_rounds": 12},
            registry=registry,
        )

    return make


@dataclass
class Measured:
    """One batch of rollouts: its wall and CPU time, and whatever made it fail."""

    label: str
    episodes: int
    wall_s: float
    cpu_s: float
    failures: list[str] = field(default_factory=list)
    replicas: list[dict[str, float]] = field(default_factory=list)


async def timed_batch(
    label: str, args: argparse.Namespace, problems: list[Problem], openai: AsyncOpenAI, pool: ReplicaPool
) -> Measured:
    """`collect_groups` over `problems` through `pool`, as the trainer calls it, timed; failures are recorded."""
    registry = default_registry()
    server = build_server(registry=registry, runner=HoldingRunner(args.executor_hold))
    started, cpu = time.monotonic(), time.process_time()
    try:
        batch = await collect_groups(
            problems,
            make_director=trainer_directors(openai, registry, f"{label}:"),
            make_client=in_process_clients(server.mcp),
            group_size=args.group_size,
            concurrency=args.concurrency,
            timeout_s=args.trajectory_timeout,
            episode_prefix=f"{label}:",
            replicas=pool,
        )
    except NoReplicaLeftError as error:
        return Measured(label, 0, time.monotonic() - started, time.process_time() - cpu, [f"{label}: {error}"])
    measured = Measured(label, len(batch.episodes), time.monotonic() - started, time.process_time() - cpu)
    measured.failures = trajectory_failures(label, [batch]) + replica_failures(label, batch, pool)
    return measured


def replica_failures(label: str, batch: RolloutBatch, pool: ReplicaPool) -> list[str]:
    """A replica that died, or an episode retried on another, makes the run a failover test, not a measurement."""
    if not pool.deaths and not batch.retried:
        return []
    causes = "; ".join(f"{r.url}: {r.reason}" for r in pool.replicas if not r.alive)
    return [f"{label}: {pool.deaths} replica(s) died, {batch.retried} episode(s) retried ({causes})"]


async def scaling_run(n: int, args: argparse.Namespace, fleet: ReplicaFleet) -> Measured:
    """Rollouts with the policy behind the fleet's first `n` replicas: N x the episodes at N x the concurrency."""
    per_run = argparse.Namespace(**{**vars(args), "concurrency": args.concurrency_per_replica * n})
    pool = ReplicaPool(fleet.urls[:n])
    openai = AsyncOpenAI(
        base_url=REPLICAS_BASE_URL, api_key="not-needed", max_retries=MAX_RETRIES, http_client=routed_client(pool)
    )
    before = await anyio.to_thread.run_sync(fleet.stats, n)  # zeroes the counters
    try:
        problems = problems_for(args.episodes_per_replica * n, args.group_size, f"r{n}-")
        measured = await timed_batch(f"{n} replica(s)", per_run, problems, openai, pool)
    finally:
        await openai.close()
    measured.replicas = await anyio.to_thread.run_sync(fleet.stats, n)
    for now, then in zip(measured.replicas, before, strict=True):
        now["cpu_s"] -= then["cpu_s"]
    return measured


# -- the overhead at 256 concurrent episodes --------------------------------------------------------------------


class ZeroLatencyPolicy:
    """An in-process policy answering at once (vLLM-like answers); its own handler time is summed to leave out."""

    def __init__(self) -> None:
        self._stub = LatencyPolicyStub(0.0, 0.0, 0.0)
        self.spent_s = 0.0
        self.calls = 0

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        started = time.perf_counter()  # no await below: the handler's wall time is its CPU time
        response = httpx2.Response(200, json=self._stub._completion(json.loads(request.content)))
        self.spent_s += time.perf_counter() - started
        self.calls += 1
        return response


async def overhead_run(args: argparse.Namespace) -> tuple[Measured, ZeroLatencyPolicy]:
    """`--overhead-episodes` episodes, `--overhead-concurrency` at once, on the zero-latency policy."""
    policy = ZeroLatencyPolicy()
    pool = ReplicaPool(["http://zero-latency.replica"])
    transport = ReplicaTransport(pool, httpx2.MockTransport(policy.handle))
    openai = AsyncOpenAI(
        base_url=REPLICAS_BASE_URL,
        api_key="not-needed",
        max_retries=MAX_RETRIES,
        http_client=httpx2.AsyncClient(transport=transport),
    )
    per_run = argparse.Namespace(**{**vars(args), "concurrency": args.overhead_concurrency})
    try:
        problems = problems_for(args.overhead_episodes, args.group_size, "o-")
        measured = await timed_batch("overhead", per_run, problems, openai, pool)
    finally:
        await openai.close()
    return measured, policy


# -- the report -------------------------------------------------------------------------------------------------


def scaling_lines(report: BenchmarkReport, runs: list[Measured], ns: list[int], args: argparse.Namespace) -> None:
    base = runs[0].episodes / runs[0].wall_s / ns[0]  # episodes/s per replica of the smallest fleet
    report.line(
        f"rollout scaling: policy latency {args.latency:.3f} s, capacity {args.capacity} calls per replica, "
        f"{args.episodes_per_replica} episodes and concurrency {args.concurrency_per_replica} per replica, "
        f"G={args.group_size}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    for n, run in zip(ns, runs, strict=True):
        rate = run.episodes / run.wall_s
        calls = [int(r["calls"]) for r in run.replicas]
        slots_s = n * args.capacity / args.latency  # the calls per second the capacity model allows at most
        replica_cpu = sum(r["cpu_s"] for r in run.replicas)
        report.line(
            f"  {n} replica(s): {rate:6.2f} episodes/s  {rate / (base * ns[0]):5.2f}x vs {ns[0]} "
            f"(at most {n / ns[0]:.2f}x, efficiency {rate / (base * n):4.0%})  wall {run.wall_s:6.2f} s  "
            f"slot use {sum(calls) / run.wall_s / slots_s:4.0%}  calls per replica {'/'.join(map(str, calls))}  "
            f"connections {sum(int(r['connections']) for r in run.replicas)}  "
            f"CPU per wall s: rollouts {run.cpu_s / run.wall_s:.2f}, replicas {replica_cpu / run.wall_s:.2f}"
        )


def overhead_lines(report: BenchmarkReport, run: Measured, policy: ZeroLatencyPolicy, concurrency: int) -> None:
    outside_wall = (run.wall_s - policy.spent_s) / run.episodes
    outside_cpu = (run.cpu_s - policy.spent_s) / run.episodes
    report.line(
        f"MCP+canvas overhead at {concurrency} concurrent episodes ({run.episodes} episodes, zero-latency policy, "
        f"{policy.calls / run.episodes:.1f} policy calls each): {1000 * outside_wall:.1f} ms wall and "
        f"{1000 * outside_cpu:.1f} ms CPU per episode outside the policy "
        f"(the policy's own answers {1000 * policy.spent_s / run.episodes:.2f} ms; one core sustains at most "
        f"{1 / outside_cpu:.1f} episodes/s)"
    )


async def run_all(args: argparse.Namespace, fleet: ReplicaFleet) -> BenchmarkReport:
    report = BenchmarkReport("rollout_scaling")
    runs = [await scaling_run(n, args, fleet) for n in args.replicas]
    overhead, policy = await overhead_run(args)
    for run in [*runs, overhead]:
        for failure in run.failures:
            report.fail(failure)
        report.require(bool(run.failures) or run.episodes > 0, f"{run.label}: no episode ran")
    if report.failures:
        return report
    scaling_lines(report, runs, args.replicas, args)
    overhead_lines(report, overhead, policy, args.overhead_concurrency)
    return report


# Per mode, for each option left unset: quick is `make bench`'s regression run, full gives the figures.
FULL = {"latency": 1.0, "episodes_per_replica": 32, "overhead_concurrency": 256, "overhead_episodes": 512}
QUICK = {"latency": 0.5, "episodes_per_replica": 12, "overhead_concurrency": 64, "overhead_episodes": 64}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"small run (under a minute here): {QUICK}")
    parser.add_argument("--replicas", default="1,2,4", help="replica counts, comma-separated (ratios vs the first)")
    parser.add_argument("--capacity", type=int, default=4, help="chat calls a replica works on at once")
    parser.add_argument("--latency", type=float, help=f"time of one chat call on a replica (s); {FULL['latency']}")
    parser.add_argument("--episodes-per-replica", type=int, help=f"default {FULL['episodes_per_replica']}")
    parser.add_argument("--concurrency-per-replica", type=int, help="default: 2 x capacity")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--executor-hold", type=float, default=0.0, help="simulated executor time per workflow run (s)")
    parser.add_argument("--overhead-concurrency", type=int, help=f"default {FULL['overhead_concurrency']}")
    parser.add_argument("--overhead-episodes", type=int, help=f"default {FULL['overhead_episodes']}")
    parser.add_argument("--die-after", type=int, help="each replica dies after this many chat calls (a failed run)")
    parser.add_argument("--trajectory-timeout", type=float, default=300.0)
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.replicas = sorted(int(n) for n in args.replicas.split(","))
    if args.concurrency_per_replica is None:
        args.concurrency_per_replica = 2 * args.capacity
    return args


def main() -> None:
    args = parse_args()
    logging.disable(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with replica_fleet(max(args.replicas), args.capacity, args.latency, args.die_after) as fleet:
        report = anyio.run(run_all, args, fleet)
    report.publish()


if __name__ == "__main__":
    main()
