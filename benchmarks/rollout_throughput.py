"""Rollout throughput: trajectories per minute, asynchronous trajectories vs a round-synchronous schedule.

    python benchmarks/rollout_throughput.py [--quick] [--concurrency N] [--trajectories T]

Both schedules run the same trajectories through the real in-memory MCP canvas, the real `PolicyDirector`
and the real `collect_groups` (scoring, reward, advantages), against an in-process OpenAI-compatible policy
stub (an httpx mock transport answering like vLLM, with token ids and log-probs) whose latency is injected:
most calls take `--latency` seconds, a seeded share `--tail-share` take `--tail-latency` (a long generation).
Trajectory lengths differ too (1 to 4 operators before `finish`, each with its prompt turn).

- async: `collect_groups` over every trajectory at once, at most N running (no barriers).
- round-synchronous (the reference's schedule): waves of N trajectories; inside a wave every trajectory
  waits at a barrier before each round, so a round lasts as long as its slowest call and a wave as long as
  its longest trajectory.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import re
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import structlog
from _guard import BenchmarkReport
from mcp import Client
from openai import AsyncOpenAI

from flowsteer_mcp.canvas.execution import ExecutionReport, ProgressCallback
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult, TurnRecord
from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.policy import PolicyDirector
from flowsteer_mcp.server import build_server
from operators.registry import OperatorRegistry, default_registry
from training.data import Problem
from training.rollout import RolloutBatch, collect_groups, in_process_clients
from training.rollout.worker import MakeDirector

OPERATORS = ["Custom", "Programmer", "ScEnsemble", "Format"]
DRAWS = {"Programmer": 3}  # the ensemble after it needs candidates (the canvas refuses it otherwise)


class LatencyPolicyStub:
    """OpenAI-compatible chat endpoint (httpx mock transport) with injected, seeded latency.

    Script per trajectory (chosen by the request seed): add 1 + seed % 4 operators, then finish.
    """

    def __init__(self, latency_s: float, tail_latency_s: float, tail_share: float, seed: int = 0) -> None:
        self.latency_s = latency_s
        self.tail_latency_s = tail_latency_s
        self.tail_share = tail_share
        self._random = random.Random(seed)
        self._ids = itertools.count(1000)
        self.calls = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self._handle)

    async def _handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.calls += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            tail = self._random.random() < self.tail_share
            await anyio.sleep(self.tail_latency_s if tail else self.latency_s)
            return httpx2.Response(200, json=self._completion(body))
        finally:
            self.in_flight -= 1

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        content = self._script(messages, int(body.get("seed") or 0))
        prompt_ids = [next(self._ids) for _ in range(sum(len(str(m["content"]).split()) for m in messages))]
        completion_ids = [next(self._ids) for _ in content.split()]
        logprobs: list[dict[str, Any]] = [
            {"token": "t", "logprob": -0.1, "bytes": None, "top_logprobs": []} for _ in completion_ids
        ]
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
            "token_ids": completion_ids,
            "logprobs": {"content": logprobs},
        }
        usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [choice],
            "usage": usage,
            "prompt_token_ids": prompt_ids,
        }

    @staticmethod
    def _script(messages: list[dict[str, Any]], seed: int) -> str:
        if len(messages) == 1:
            return "Solve the problem step by step and give the final number."
        found = re.search(r"^DSL: (.*)$", str(messages[-1]["content"]), re.MULTILINE)
        dsl = found.group(1) if found and found.group(1) != "(empty)" else ""
        present = [name for name in OPERATORS if name in dsl]
        if len(present) < 1 + seed % len(OPERATORS):
            operator = OPERATORS[len(present)]
            draws = f"<samples>{DRAWS[operator]}</samples>" if operator in DRAWS else ""
            return f"<action>add</action><operator>{operator}</operator>{draws}"
        return "<action>finish</action>"


class HoldingRunner:
    """Benchmark runner: every workflow run takes `hold_s` and answers "42" (no LLM)."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s

    async def run(
        self, graph: WorkflowGraph, task: TaskSpec, *, progress: ProgressCallback | None = None
    ) -> ExecutionReport:
        await anyio.sleep(self.hold_s)
        return ExecutionReport(status="ok", output="42")


class RoundBarrier:
    """A reusable barrier whose party count shrinks as trajectories end (anyio has none)."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self._event = anyio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        event = self._event
        if self.arrived >= self.parties:
            self._open()
        else:
            await event.wait()

    def leave(self) -> None:
        self.parties -= 1
        if self.arrived and self.arrived >= self.parties:
            self._open()

    def _open(self) -> None:
        self._event.set()
        self._event = anyio.Event()
        self.arrived = 0


class LockstepPolicyDirector(PolicyDirector):
    """The policy director, made to wait for every trajectory of its wave before each round."""

    def __init__(self, barrier: RoundBarrier, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.barrier = barrier

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        try:
            return await super().run(task, client)
        finally:
            self.barrier.leave()

    async def _round(self, *args: Any, **kwargs: Any) -> tuple[TurnRecord, dict[str, Any]]:
        # Forward whatever the real round takes: a copied signature went stale once and failed every trajectory.
        await self.barrier.wait()
        return await super()._round(*args, **kwargs)


def make_directors(
    client: AsyncOpenAI, registry: OperatorRegistry, barrier: RoundBarrier | None, seeds: Callable[[], int]
) -> MakeDirector:
    def make(_: Problem, __: int) -> PolicyDirector:
        options: dict[str, Any] = {
            "sampling": PolicySampling(seed=seeds()),
            "canvas_options": {"finish": "relaxed", "max_rounds": 12},
            "registry": registry,
        }
        if barrier is None:
            return PolicyDirector(client, "policy", **options)
        return LockstepPolicyDirector(barrier, client, "policy", **options)

    return make


def trajectory_failures(schedule: str, batches: list[RolloutBatch]) -> list[str]:
    """Trajectories that errored, timed out or never finished: a schedule with any of them measured nothing."""
    failed = [e for batch in batches for e in batch.episodes if e.metrics.status != "ok" or not e.metrics.finished]
    total = sum(len(batch.episodes) for batch in batches)
    if not failed:
        return []
    first = failed[0].metrics
    reason = first.error or f"status {first.status}, finished={first.finished}, end reason {first.end_reason}"
    return [f"{schedule}: {len(failed)} of {total} trajectories failed; first: {reason}"]


async def run_schedules(args: argparse.Namespace) -> BenchmarkReport:
    registry = default_registry()
    group_size = args.group_size
    n_problems = max(1, args.trajectories // group_size)
    problems = [
        Problem(id=f"p{i}", source="bench", problem_type="math", problem=f"What is 6*7? (#{i})", ground_truth="42")
        for i in range(n_problems)
    ]
    total = n_problems * group_size
    report = BenchmarkReport("rollout_throughput")
    results: dict[str, tuple[float, list[RolloutBatch], int]] = {}
    for schedule in ("async", "round-synchronous"):
        stub = LatencyPolicyStub(args.latency, args.tail_latency, args.tail_share, seed=args.seed)
        client = AsyncOpenAI(
            base_url="http://policy.stub/v1",
            api_key="stub",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=stub.transport()),
        )
        server = build_server(registry=registry, runner=HoldingRunner(args.executor_hold))
        make_client = in_process_clients(server.mcp)
        seeds = itertools.count()
        common: dict[str, Any] = {
            "make_client": make_client,
            "group_size": group_size,
            "timeout_s": args.trajectory_timeout,
        }
        started = time.monotonic()
        batches: list[RolloutBatch] = []
        if schedule == "async":
            directors = make_directors(client, registry, None, seeds.__next__)
            batches.append(
                await collect_groups(problems, make_director=directors, concurrency=args.concurrency, **common)
            )
        else:
            per_wave = max(1, args.concurrency // group_size)
            for start in range(0, n_problems, per_wave):
                wave = problems[start : start + per_wave]
                barrier = RoundBarrier(len(wave) * group_size)
                directors = make_directors(client, registry, barrier, seeds.__next__)
                batches.append(
                    await collect_groups(wave, make_director=directors, concurrency=len(wave) * group_size, **common)
                )
        results[schedule] = (time.monotonic() - started, batches, stub.peak_in_flight)
        for failure in trajectory_failures(schedule, batches):
            report.fail(failure)
        await client.close()

    report.line(
        f"rollout throughput: {total} trajectories (G={group_size}), concurrency {args.concurrency}, "
        f"policy latency {args.latency:.3f} s ({args.tail_share:.0%} at {args.tail_latency:.2f} s), "
        f"executor hold {args.executor_hold:.3f} s"
    )
    for schedule, (wall_s, batches, peak) in results.items():
        turns = [e.metrics.turns for batch in batches for e in batch.episodes]
        report.line(
            f"  {schedule:<18} {60.0 * total / wall_s:8.1f} trajectories/min  wall {wall_s:6.2f} s  "
            f"peak policy calls in flight {peak:3d}  mean turns {sum(turns) / len(turns):.1f}"
        )
    ratio = results["round-synchronous"][0] / results["async"][0]
    report.line(f"  async / round-synchronous throughput ratio: {ratio:.2f}x")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help="small run (about half a minute here): 32 trajectories, concurrency 8"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--trajectories", type=int, default=128)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.1, help="typical policy call latency (s)")
    parser.add_argument("--tail-latency", type=float, default=1.0, help="latency of the slow calls (s)")
    parser.add_argument("--tail-share", type=float, default=0.1, help="share of slow calls")
    parser.add_argument(
        "--executor-hold", type=float, default=0.02, help="simulated executor time per workflow run (s)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--trajectory-timeout", type=float, default=300.0, help="time limit of one trajectory (s); one over it fails"
    )
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.trajectories = 8, 32
    logging.disable(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    anyio.run(run_schedules, args).publish()


if __name__ == "__main__":
    main()
