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

import anyio
import httpx
from mcp import Client

from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.server import build_server
from operators.registry import default_registry

TYPICAL_LLM_CALL_S = 100 / 16  # 100 tokens at ~16 tok/s: Qwen2.5-Coder-0.5B on this CPU (spec 20-operators §3)

CYCLE = [
    "<action>add</action><operator>Plan</operator><prompt>Plan the steps briefly.</prompt>",
    "<action>add</action><structure>parallel</structure><operators>Programmer, Custom</operators>",
    "Write solve() and return the value.",
    "Reason step by step, then state the number.",
    "<action>add</action><operator>ScEnsemble</operator><prompt>Pick the majority answer.</prompt>",
    "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>",
    "Check the answer independently.",
    "Fix the answer with the feedback.",
    "<action>set_prompt</action><target>{last}</target><prompt>Plan in at most three steps.</prompt>",
    "<action>add</action><operator>Format</operator><prompt>Output only the number.</prompt>",
    "<action>finish</action>",
    "not an action at all",
]


def trace(length: int) -> list[str]:
    """A long, varied action trace; stages are deleted again so the graph stays within the canvas limits."""
    texts: list[str] = []
    stage = 0
    while len(texts) < length:
        first = stage + 1
        for text in CYCLE:
            texts.append(text.replace("{last}", f"node_{first}"))
        stage += 5
        texts.extend(f"<action>delete</action><target>node_{first + i}</target>" for i in range(5))
    return texts[:length]


def options() -> CanvasOptions:
    return CanvasOptions(max_rounds=200, execute_each_step=False, finish="relaxed")


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def time_calls(texts: list[str], call: Callable[[str], Awaitable[object]]) -> list[float]:
    samples = []
    for text in texts:
        start = time.perf_counter()
        await call(text)
        samples.append(time.perf_counter() - start)
    return samples


async def canvas_core(texts: list[str]) -> list[float]:
    registry = default_registry()

    def fresh() -> Canvas:
        return Canvas(CanvasState(task=TaskSpec(problem="What is 6*7?", task_type="math"), options=options()), registry)

    canvas = fresh()

    async def step(text: str) -> None:
        nonlocal canvas
        if canvas.done:
            canvas = fresh()
        await canvas.act(text)

    return await time_calls(texts, step)


async def through_mcp(client: Client, texts: list[str]) -> list[float]:
    state: dict[str, str] = {}

    async def new_workflow() -> None:
        result = await client.call_tool(
            "create_workflow",
            {"task": "What is 6*7?", "task_type": "math", "options": options().model_dump(exclude={"limits"})},
        )
        assert result.structured_content is not None, result.content
        state["id"] = result.structured_content["workflow_id"]

    await new_workflow()

    async def step(text: str) -> None:
        result = await client.call_tool("act", {"workflow_id": state["id"], "text": text})
        content = result.structured_content
        if result.is_error or content is None:
            raise RuntimeError(f"act failed: {result.content}")
        if content["done"]:
            await new_workflow()

    return await time_calls(texts, step)


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
    logging.getLogger("httpx").setLevel(logging.WARNING)
    length = 120 if args.quick else 1000
    texts = trace(length)

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

    print(f"action trace: {length} act turns (adds with prompt turns, set_prompt, deletes, finishes, invalid text)")
    print(f"{'path':<28}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}{'% of one LLM call':>20}")
    for name, samples in (
        ("canvas core (no MCP)", core),
        ("MCP act, in-memory", memory),
        ("MCP act, streamable HTTP", http),
    ):
        p50, p99 = percentiles(samples)
        mean = statistics.fmean(samples)
        print(
            f"{name:<28}{p50 * 1e3:>10.3f}{p99 * 1e3:>10.3f}{mean * 1e3:>10.3f}{100 * mean / TYPICAL_LLM_CALL_S:>19.3f}%"
        )
    ratio = statistics.median(http) / statistics.median(memory)
    print(f"HTTP / in-memory p50 ratio: {ratio:.2f}x; typical LLM call assumed {TYPICAL_LLM_CALL_S:.2f} s")


if __name__ == "__main__":
    anyio.run(main)
