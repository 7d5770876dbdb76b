"""Sandbox throughput: executions per second at the concurrency limit, with p50/p99 latency.

    python benchmarks/sandbox_throughput.py [--quick] [--concurrency N]

Two workloads, measured side by side in one run: a trivial plain program (the fixed cost of process
start, isolation and cleanup), and a HumanEval-style check (solution + hidden tests + verdict). Prints
the isolation mode the runs actually used.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from dataclasses import dataclass

import anyio
import structlog
from _guard import BenchmarkReport

from operators.sandbox import concurrency_limit, run_code, select_isolation, set_concurrency_limit

TRIVIAL = "print(sum(range(100)))\n"
HUMANEVAL_SOLUTION = (
    "def below_zero(operations):\n"
    "    balance = 0\n"
    "    for op in operations:\n"
    "        balance += op\n"
    "        if balance < 0:\n"
    "            return True\n"
    "    return False\n"
)
HUMANEVAL_TESTS = (
    "def check(candidate):\n"
    "    assert candidate([]) == False\n"
    "    assert candidate([1, 2, -3, 1, 2, -3]) == False\n"
    "    assert candidate([1, 2, -4, 5, 6]) == True\n"
    "    assert candidate([1, -1, 2, -2, 5, -5, 4, -4]) == False\n"
)


@dataclass(frozen=True)
class Measurement:
    name: str
    runs: int
    wall_s: float
    latencies: list[float]
    failures: list[str]

    def line(self) -> str:
        ordered = sorted(self.latencies)
        p50 = statistics.median(ordered)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return (
            f"{self.name:<18} runs={self.runs:<5} exec/s={self.runs / self.wall_s:7.1f}  "
            f"p50={p50 * 1000:7.1f} ms  p99={p99 * 1000:7.1f} ms"
        )


async def measure(name: str, runs: int, humaneval: bool) -> Measurement:
    latencies: list[float] = []
    failures: list[str] = []

    async def one() -> None:
        started = time.perf_counter()
        if humaneval:
            result = await run_code(HUMANEVAL_SOLUTION, tests=HUMANEVAL_TESTS, entry_point="below_zero")
            ok = result.passed is True
        else:
            result = await run_code(TRIVIAL)
            ok = result.status == "ok" and result.stdout == "4950\n"
        latencies.append(time.perf_counter() - started)
        if not ok:
            detail = result.reason or result.stderr.strip()[-200:] or f"stdout {result.stdout[:80]!r}"
            failures.append(f"{name}: status {result.status}, passed={result.passed}: {detail}")

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(runs):
            group.start_soon(one)
    return Measurement(name, runs, time.perf_counter() - started, latencies, failures)


async def main(runs: int) -> None:
    report = BenchmarkReport("sandbox_throughput")
    plan = await select_isolation()
    report.line(f"isolation: {plan.report.mode} (degraded={plan.report.degraded}) {plan.report.note}".rstrip())
    report.line(f"concurrency limit: {concurrency_limit()}")
    await run_code(TRIVIAL)  # warm the page cache so the first measurement is not a cold start
    report.line(f"latency is per call, including the wait for a concurrency slot ({runs} calls submitted at once)")
    for measurement in (
        await measure("trivial program", runs, humaneval=False),
        await measure("humaneval check", runs, humaneval=True),
    ):
        for failure in measurement.failures:
            report.fail(failure)
        report.line(measurement.line())
    report.publish()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke check, noisier figures)")
    parser.add_argument("--concurrency", type=int, default=None, help="override the concurrency limit")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # keep the table clean
    if args.concurrency is not None:
        set_concurrency_limit(args.concurrency)
    anyio.run(main, 12 if args.quick else 100)
