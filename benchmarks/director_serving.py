"""Where to serve the Flow-Director on a CPU machine: on a server of its own beside the executor's, or as a LoRA
adapter on the executor's own vLLM server. Both, side by side in one run.

    .venv/bin/python benchmarks/director_serving.py [--executor qwen2.5-coder-0.5b-instruct] [--load 12] [--turns 8]

Why: an evaluation or a training run keeps the executor busy with many episodes' calls while each episode's
director writes its next action. On 2 cores a second inference server competes with the executor's for the same
cores, and the director's turns crawl (docs/runs/director-v0: 0.5 tokens/s for the local server). Issue #35 asks
for the one-server deployment (`--policy-serve executor`) to be chosen by measurement; this is the measurement.

Setup: one vLLM executor of `--executor` (this machine's CPU profile, run-time LoRA loading on), kept busy during
each phase by `--load` concurrent executor requests of 200 tokens, as an evaluation's episodes keep it. In each
phase the director writes `--turns` actions one after another (48 tokens each, greedy, `ignore_eos`), as one
episode's director does, on a prompt of its system template's size:
- shared: a rank-16 LoRA adapter on the executor's model, loaded onto the executor's server by the code path of
  `--policy-serve executor` (training/director_on_executor.py). Its weights are random: serving speed does not
  depend on their values;
- separate: the director that ships with the package on a vLLM server of its own (`--policy-serve vllm`).
A first phase runs the load alone for a minute: the executor's own rate, the baseline of both.
Figures: the director's tokens/s over its turns' wall time, the executor's tokens/s (the tokens its server
generated for the load during those turns, from vLLM's own counter), and the ratios shared / separate.
Needs `make vllm-env` and the prepared models.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import structlog
from _guard import BenchmarkReport

from flowsteer_mcp.director.card import ADAPTER_DIR, ADAPTER_WEIGHTS, CARD_FILE, DirectorCard, shipped_director
from flowsteer_mcp.director.served import ServedDirector, ServeMode
from operators.models.prepare import resolve_model
from training.serve_director import DirectorServingError, VLLMProfile, serve_shipped_director
from training.vllm.server import VLLMServer, VLLMServerError

EXECUTOR_NAME = "executor"
ACTION_TOKENS = 48
ALONE_S = 60.0  # the baseline phase: the executor's load with no director
LOAD_TOKENS = 200
TEMPLATE = Path(__file__).resolve().parents[1] / "configs" / "templates" / "director_compact.txt"


@dataclass
class Phase:
    name: str
    director_tokens: int = 0
    director_s: float = 0.0
    executor_tokens: int = 0
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def director_rate(self) -> float:
        return self.director_tokens / self.director_s

    @property
    def executor_rate(self) -> float:
        return self.executor_tokens / self.wall_s

    def line(self) -> str:
        return (
            f"{self.name:<9} director: {self.director_tokens:4d} tokens in {self.director_s:7.1f} s = "
            f"{self.director_rate:6.2f} tokens/s   executor: {self.executor_tokens:6d} tokens in {self.wall_s:6.1f} s "
            f"= {self.executor_rate:6.1f} tokens/s"
        )


async def _completion(http: httpx.AsyncClient, url: str, model: str, prompt: str, max_tokens: int) -> int:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    reply = await http.post(f"{url}/chat/completions", json=body)
    reply.raise_for_status()
    return int(reply.json()["usage"]["completion_tokens"])


async def generated_tokens(http: httpx.AsyncClient, openai_url: str) -> int:
    """vLLM's count of tokens generated so far (its Prometheus counter, every model on the server together)."""
    reply = await http.get(openai_url.removesuffix("/v1") + "/metrics")
    reply.raise_for_status()
    total = 0.0
    for line in reply.text.splitlines():
        if line.startswith("vllm:generation_tokens_total"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def run_phase(name: str, executor_url: str, served: ServedDirector | None, load: int, turns: int) -> Phase:
    """The director's `turns` actions (none: `ALONE_S` seconds of the load alone) while `load` executor requests
    run continuously. The executor's tokens are read from its server's counter (requests that straddle the phase
    count only their tokens inside it)."""
    phase = Phase(name)
    director_prompt = TEMPLATE.read_text(encoding="utf-8") + "\nTask: sum the digits of a number.\nAction:"
    stop = anyio.Event()
    async with httpx.AsyncClient(timeout=1800.0) as http:

        async def executor_stream(index: int) -> None:
            prompt = f"Write Python function number {index}: merge sort, commented."
            while not stop.is_set():
                try:
                    await _completion(http, executor_url, EXECUTOR_NAME, prompt, LOAD_TOKENS)
                except httpx.HTTPError as error:
                    phase.errors.append(f"executor request: {error!r}")
                    return

        async with anyio.create_task_group() as group:
            for index in range(load):
                group.start_soon(executor_stream, index)
            await anyio.sleep(20.0)  # the load reaches its steady state before the director speaks
            counted_before = await generated_tokens(http, executor_url)
            started = time.perf_counter()
            if served is None:
                await anyio.sleep(ALONE_S)
            else:
                try:
                    for _ in range(turns):
                        phase.director_tokens += await _completion(
                            http, served.url, served.model, director_prompt, ACTION_TOKENS
                        )
                except httpx.HTTPError as error:
                    phase.errors.append(f"director request: {error!r}")
            phase.director_s = phase.wall_s = time.perf_counter() - started
            counted = await generated_tokens(http, executor_url) - counted_before
            shared = served is not None and served.url.rstrip("/") == executor_url.rstrip("/")
            phase.executor_tokens = counted - (phase.director_tokens if shared else 0)
            stop.set()
            group.cancel_scope.cancel()
    return phase


def random_director(base_model: str, folder: Path) -> Path:
    """A director folder with a random rank-16 LoRA on `base_model` (for serving speed only: never a policy)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(base_model), dtype=torch.float32)
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    peft_model = get_peft_model(model, lora)
    with torch.no_grad():
        for parameter_name, parameter in peft_model.named_parameters():
            if "lora_B" in parameter_name:
                parameter.normal_(0.0, 0.02)
    peft_model.save_pretrained(str(folder / ADAPTER_DIR))
    card = DirectorCard(
        name="bench-random-director",
        base_model=base_model,
        adapter_bytes=(folder / ADAPTER_DIR / ADAPTER_WEIGHTS).stat().st_size,
        trained_on="nothing: random LoRA weights for benchmarks/director_serving.py",
        steps=1,
        command="benchmarks/director_serving.py",
        results="",
    )
    (folder / CARD_FILE).write_text(card.model_dump_json(exclude_defaults=True), encoding="utf-8")
    return folder


async def measure(executor_model: str, load: int, turns: int, logs: Path, report: BenchmarkReport) -> list[Phase]:
    profile = VLLMProfile.for_this_machine()
    executor = VLLMServer.start(
        resolve_model(executor_model),
        served_name=EXECUTOR_NAME,
        max_lora_rank=16,
        max_loras=1,
        dtype=profile.dtype,
        enforce_eager=profile.enforce_eager,
        max_model_len=4096,
        env={"VLLM_CPU_KVCACHE_SPACE": "4"},
        log_path=logs / "executor.log",
        ready_timeout_s=900,
    )
    phases: list[Phase] = []
    try:
        alone = await run_phase("alone", executor.openai_base_url, None, load, turns)
        for error in alone.errors:
            report.fail(f"alone: {error}")
        phases.append(alone)
        candidates: list[tuple[str, Path, ServeMode]] = [
            ("shared", random_director(executor_model, logs / "shared-director"), "executor"),
            ("separate", shipped_director().folder, "vllm"),
        ]
        for name, folder, mode in candidates:
            director = shipped_director(folder)
            async with serve_shipped_director(director, mode, executor_url=executor.openai_base_url) as served:
                phase = await run_phase(name, executor.openai_base_url, served, load, turns)
            report.line(f"{name}: {director.card.name} on {director.card.base_model}, served via {served.via}")
            for error in phase.errors:
                report.fail(f"{name}: {error}")
            phases.append(phase)
    finally:
        executor.stop()
    return phases


def main(executor_model: str, load: int, turns: int) -> None:
    report = BenchmarkReport("director_serving")
    with tempfile.TemporaryDirectory(prefix="director-serving-") as logs:
        try:
            phases = anyio.run(measure, executor_model, load, turns, Path(logs), report)
        except (VLLMServerError, DirectorServingError) as error:
            report.fail(str(error))
            phases = []
    if not report.failures:
        report.line(f"executor: {executor_model}, {load} requests of {LOAD_TOKENS} tokens at all times")
        report.line(f"director: {turns} actions of {ACTION_TOKENS} tokens, one after another")
        alone, shared, separate = phases
        report.line(
            f"alone     director: none {' ' * 37} executor: {alone.executor_tokens:6d} tokens in "
            f"{alone.wall_s:6.1f} s = {alone.executor_rate:6.1f} tokens/s"
        )
        for phase in (shared, separate):
            report.require(phase.director_tokens == turns * ACTION_TOKENS, f"{phase.name}: short director replies")
            report.line(phase.line())
        report.line(f"director tokens/s, shared / separate: {shared.director_rate / separate.director_rate:.2f}x")
        report.line(f"executor tokens/s, shared / separate: {shared.executor_rate / separate.executor_rate:.2f}x")
        report.line(
            f"executor tokens/s, shared / alone: {shared.executor_rate / alone.executor_rate:.2f}x, "
            f"separate / alone: {separate.executor_rate / alone.executor_rate:.2f}x"
        )
    report.publish()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor", default="qwen2.5-coder-0.5b-instruct", help="the executor's catalog name")
    parser.add_argument("--load", type=int, default=12, help="executor requests in flight during each phase")
    parser.add_argument("--turns", type=int, default=8, help="director actions per phase")
    args = parser.parse_args()
    if args.load < 1 or args.turns < 1:
        parser.error("--load and --turns must be at least 1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    main(args.executor, args.load, args.turns)
