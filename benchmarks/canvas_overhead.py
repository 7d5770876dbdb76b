"""Canvas and MCP overhead without any LLM: per-action cost, and `act` round trips in-memory vs HTTP.

    python benchmarks/canvas_overhead.py [--quick]

Prints p50/p99 per action for the canvas core, then the same action trace through the MCP `act` tool with the
in-memory client and with the real server over streamable HTTP (a `flowsteer-mcp` subprocess on loopback),
measured side by side in one run, and the overhead relative to one typical local-executor LLM call.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import httpx
import structlog
from _guard import BenchmarkReport
from mcp import Client

from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.server import build_server
from operators.registry import default_registry

# 100 tokens at ~16 tok/s: Qwen2.5-Coder-0.5B on this CPU (docs/design/operators.md, "Backends")
TYPICAL_LLM_CALL_S = 100 / 16

INVALID = "not an action at all"

# One workflow's life: every turn is accepted except INVALID, and `finish` closes it (the next cycle opens a new one).
CYCLE = [
    "<action>add</action><operator>Plan</operator><prompt>Plan the steps briefly.</prompt>",
    "<action>add</action><structure>parallel</structure><operators>Programmer, Custom</operators>",
    "Write solve() and return the value.",
    "Reason step by step, then state the number.",
    "<action>add</action><operator>ScEnsemble</operator><prompt>Pick the majority answer.</prompt>",
    "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>",
    "Check the answer independently.",
    "Fix the answer with the feedback.",
    "<action>set_prompt</action><target>node_1</target><prompt>Plan in at most three steps.</prompt>",
    INVALID,
    "<action>add</action><operator>Format</operator><prompt>Output only the number.</prompt>",
    "<action>delete</action><target>node_1</target>",
    "<action>finish</action>",
]


def trace(length: int) -> list[str]:
    """A long, varied action trace: CYCLE over and over, cut at `length`."""
    return [CYCLE[i % len(CYCLE)] for i in range(length)]


def expected_outcomes(texts: list[str]) -> list[bool]:
    return [text != INVALID for text in texts]


@dataclass(frozen=True)
class Outcome:
    ok: bool
    feedback: str | None


@dataclass(frozen=True)
class Timed:
    samples: list[float]
    outcomes: list[Outcome]


def options() -> CanvasOptions:
    return CanvasOptions(max_rounds=200, execute_each_step=False, finish="relaxed")


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def time_calls(texts: list[str], call: Callable[[str], Awaitable[Outcome]]) -> Timed:
    samples: list[float] = []
    outcomes: list[Outcome] = []
    for text in texts:
        start = time.perf_counter()
        outcomes.append(await call(text))
        samples.append(time.perf_counter() - start)
    return Timed(samples, outcomes)


async def canvas_core(texts: list[str]) -> Timed:
    registry = default_registry()

    def fresh() -> Canvas:
        return Canvas(CanvasState(task=TaskSpec(problem="What is 6*7?", task_type="math"), options=options()), registry)

    canvas = fresh()

    async def step(text: str) -> Outcome:
        nonlocal canvas
        if canvas.done:
            canvas = fresh()
        result = await canvas.act(text)
        return Outcome(result.ok, result.feedback)

    return await time_calls(texts, step)


async def through_mcp(client: Client, texts: list[str]) -> Timed:
    state: dict[str, str] = {}

    async def new_workflow() -> None:
        result = await client.call_tool(
            "create_workflow",
            {"task": "What is 6*7?", "task_type": "math", "options": options().model_dump(exclude={"limits"})},
        )
        if result.is_error or result.structured_content is None:
            raise RuntimeError(f"create_workflow failed: {result.content}")
        state["id"] = result.structured_content["workflow_id"]

    await new_workflow()

    async def step(text: str) -> Outcome:
        result = await client.call_tool("act", {"workflow_id": state["id"], "text": text})
        content = result.structured_content
        if result.is_error or content is None:
            raise RuntimeError(f"act failed: {result.content}")
        if content["done"]:
            await new_workflow()
        return Outcome(bool(content["ok"]), str(content.get("feedback")))

    return await time_calls(texts, step)


def outcome_failures(path: str, texts: list[str], timed: Timed) -> list[str]:
    """Turns whose acceptance differs from the trace's design: a path that rejects valid turns times errors."""
    wrong = [
        (i, text, outcome)
        for i, (text, outcome, expected) in enumerate(zip(texts, timed.outcomes, expected_outcomes(texts), strict=True))
        if outcome.ok != expected
    ]
    if not wrong:
        return []
    i, text, outcome = wrong[0]
    return [
        f"{path}: {len(wrong)} of {len(texts)} turns not as designed; first: turn {i} {text[:60]!r} "
        f"ok={outcome.ok}: {' '.join((outcome.feedback or '').split())[:200]}"
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_http_server(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FLOWSTEER_LOG_LEVEL": "WARNING"}
    return subprocess.Popen(
        [sys.executable, "-m", "flowsteer_mcp", "--transport", "http", "--port", str(port), "--no-executor"],
        env=env,
        stderr=subprocess.DEVNULL,
    )


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the HTTP server exited during start-up")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise TimeoutError("the HTTP server did not become ready")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short trace (CI smoke)")
    args = parser.parse_args()
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    length = 120 if args.quick else 1000
    texts = trace(length)
    report = BenchmarkReport("canvas_overhead")

    core = await canvas_core(texts)
    app = build_server()
    async with Client(app.mcp) as client:
        memory = await through_mcp(client, texts)

    port = free_port()
    proc = start_http_server(port)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        wait_ready(url, proc)
        async with Client(url) as client:
            http = await through_mcp(client, texts)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    paths = (("canvas core (no MCP)", core), ("MCP act, in-memory", memory), ("MCP act, streamable HTTP", http))
    for name, timed in paths:
        for failure in outcome_failures(name, texts, timed):
            report.fail(failure)
    report.line(f"action trace: {length} act turns (adds with prompt turns, set_prompt, invalid text, delete, finish)")
    report.line(f"{'path':<28}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}{'% of one LLM call':>20}")
    for name, timed in paths:
        p50, p99 = percentiles(timed.samples)
        mean = statistics.fmean(timed.samples)
        report.line(
            f"{name:<28}{p50 * 1e3:>10.3f}{p99 * 1e3:>10.3f}{mean * 1e3:>10.3f}{100 * mean / TYPICAL_LLM_CALL_S:>19.3f}%"
        )
    ratio = statistics.median(http.samples) / statistics.median(memory.samples)
    report.line(f"HTTP / in-memory p50 ratio: {ratio:.2f}x; typical LLM call assumed {TYPICAL_LLM_CALL_S:.2f} s")
    report.publish()


if __name__ == "__main__":
    anyio.run(main)
