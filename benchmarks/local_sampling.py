"""k sampled draws of one prompt on the in-process local backend: k sequential `complete` calls vs ONE
`complete_many(k)` (one `generate` of k rows), side by side in one run.

    .venv/bin/python benchmarks/local_sampling.py [--model NAME_OR_FOLDER] [--k 8] [--max-tokens 64]

Why: a `samples: k` node sends its k-1 sampled draws as one `n` request; on a CPU, decoding is bound by
reading the weights, so k rows in one `generate` should cost little more than one row. Both modes use the
same sampled draw (temperature, top-p, seed); the sequential mode gives call i the seed `draw_seed(seed, i)`,
as the fallback without `n` support does. Sample texts (and so token counts) differ between the modes, so
compare tokens/s as well as wall time. The model is loaded and warmed up before anything is timed.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass

import anyio
import structlog
from _guard import BenchmarkReport

from operators.backends.base import BackendError, ChatMessage, ChatRequest, ChatResponse, DrawSettings, draw_seed
from operators.backends.local import LocalBackend, resolve_dtype
from operators.errors import OperatorsError

PROMPT = (
    "Write a Python function `fib(n)` that returns the n-th Fibonacci number (fib(0) == 0, fib(1) == 1). "
    "Reply with one ```python code block."
)
SEED = 1234


@dataclass(frozen=True)
class Measurement:
    name: str
    wall_s: float
    replies: list[ChatResponse]

    @property
    def completion_tokens(self) -> int:
        return sum(reply.usage.completion_tokens for reply in self.replies)

    def line(self) -> str:
        tokens = self.completion_tokens
        return (
            f"{self.name:<26} wall={self.wall_s:8.1f} s  completion tokens={tokens:5d}  "
            f"tokens/s={tokens / self.wall_s:6.1f}"
        )


def sampled_request(draw: DrawSettings, max_tokens: int) -> ChatRequest:
    return ChatRequest(messages=[ChatMessage(role="user", content=PROMPT)], draw=draw, max_tokens=max_tokens)


async def sequential(backend: LocalBackend, draw: DrawSettings, k: int, max_tokens: int) -> Measurement:
    started = time.perf_counter()
    replies = []
    for index in range(k):
        seeded = draw.model_copy(update={"seed": draw_seed(draw.seed, index)})
        replies.append(await backend.complete(sampled_request(seeded, max_tokens)))
    return Measurement(f"sequential complete x{k}", time.perf_counter() - started, replies)


async def batched(backend: LocalBackend, draw: DrawSettings, k: int, max_tokens: int) -> Measurement:
    started = time.perf_counter()
    replies = await backend.complete_many(sampled_request(draw, max_tokens), k)
    return Measurement(f"one complete_many({k})", time.perf_counter() - started, replies)


def check(report: BenchmarkReport, measurement: Measurement, k: int) -> None:
    report.require(len(measurement.replies) == k, f"{measurement.name}: {len(measurement.replies)} replies, not {k}")
    empty = sum(1 for reply in measurement.replies if reply.usage.completion_tokens < 1)
    report.require(empty == 0, f"{measurement.name}: {empty} replies without a completion token")


async def main(model: str, k: int, max_tokens: int, dtype: str, threads: int | None) -> None:
    report = BenchmarkReport("local_sampling")
    draw = DrawSettings(temperature=0.8, top_p=0.95, seed=SEED)
    try:
        backend = LocalBackend(model, dtype=dtype, num_threads=threads)
    except (OperatorsError, ValueError) as exc:  # unknown or unprepared model, bad dtype
        report.fail(f"cannot use model {model!r}: {exc}")
        report.publish()
        return
    try:
        await backend.load()
        await backend.complete(sampled_request(draw, 4))  # warm-up: first-call allocations are not timed
        one, many = await sequential(backend, draw, k, max_tokens), await batched(backend, draw, k, max_tokens)
    except BackendError as exc:
        report.fail(f"a run failed: {exc}")
        report.publish()
        return
    finally:
        await backend.aclose()
    report.line(
        f"model: {backend.model} ({backend.path})  k={k}  max_tokens={max_tokens}  dtype={resolve_dtype(dtype)}"
    )
    for measurement in (one, many):
        check(report, measurement, k)
        report.line(measurement.line())
    distinct = len({reply.text for reply in many.replies})
    report.require(k == 1 or distinct > 1, f"{many.name}: all {k} sampled rows are identical")
    report.line(f"distinct sampled texts in the batch: {distinct} of {k}")
    report.line(f"wall-time ratio sequential / batched: {one.wall_s / many.wall_s:.2f}x")
    report.publish()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="catalog name or model folder")
    parser.add_argument("--k", type=int, default=8, help="sampled draws of the prompt")
    parser.add_argument("--max-tokens", type=int, default=64, help="reply budget of every draw")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.k < 1 or args.max_tokens < 1:
        parser.error("--k and --max-tokens must be at least 1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # keep the table clean
    anyio.run(main, args.model, args.k, args.max_tokens, args.dtype, args.threads)
