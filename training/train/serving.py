"""The run's generation side: the policy's vLLM servers (started or attached), LoRA hand-over, the executor.

Several servers are replicas of the policy (`vllm.urls`, `vllm.replicas`): rollouts lease one per episode from
the service's `ReplicaPool` and each adapter is published and probed on every live replica (`ReplicaSync`).

The executor is never the policy adapter: either the policy server's base model under its own served name,
or any backend of the operators' config (a local in-process model, another endpoint, a scripted double).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

import anyio
import structlog

from operators.backends.base import ChatBackend
from operators.backends.config import OpenAIModelConfig
from operators.backends.factory import build_backend
from training.train.config import PolicyServerExecutor, TrainConfig
from training.vllm import LoraSyncError, VLLMServer
from training.vllm.replicas import ReplicaPool, ReplicaSync
from training.vllm.server import VLLMServerError, free_port, vllm_python

log = structlog.get_logger(__name__)


class PolicyService:
    """Owns the vLLM server handles (stopping only those it started), the replica pool and the run's sync."""

    def __init__(self, config: TrainConfig, model_dir: Path, log_path: Path) -> None:
        self.config = config
        self.model_dir = model_dir
        self.log_path = log_path
        self.servers: list[VLLMServer] = []
        self.pool: ReplicaPool | None = None
        self.sync: ReplicaSync | None = None

    async def open(self) -> PolicyService:
        """Attach to the configured servers, or start `vllm.replicas` (default 1) and wait for all of them
        without blocking the event loop."""
        settings = self.config.vllm
        for url in settings.attached_urls:
            self.servers.append(VLLMServer.attach(url, served_name=settings.served_name))
            log.info("vllm_attached", base_url=url)
        count = settings.n_started
        ports: list[int] = []
        while len(ports) < count:  # distinct ports, all chosen before any server binds one
            port = free_port()
            if port not in ports:
                ports.append(port)
        for index, port in enumerate(ports):
            self.servers.append(self._start(index, port))
        if count:
            async with anyio.create_task_group() as group:
                for server in self.servers:
                    group.start_soon(server.wait_ready_async)
        self.pool = ReplicaPool([server.base_url for server in self.servers])
        self.sync = ReplicaSync(self.pool, self.config.run.name, max_loaded=settings.max_loras)
        return self

    def _start(self, index: int, port: int) -> VLLMServer:
        """Launch replica `index` on `port` (not waiting for it); with several, each has its own log file."""
        settings = self.config.vllm
        log_path = self.log_path
        if settings.n_started > 1:
            log_path = self.log_path.with_name(f"{self.log_path.stem}-{index}.log")
        return VLLMServer.start(
            self.model_dir,
            served_name=settings.served_name,
            port=port,
            max_lora_rank=self.config.policy.lora.r,
            max_loras=settings.max_loras,
            dtype=settings.dtype,
            enforce_eager=settings.enforce_eager,
            max_model_len=settings.max_model_len,
            python=settings.python or vllm_python(),
            extra_args=settings.extra_args,
            env={**settings.env, **(settings.replica_env[index] if settings.replica_env else {})},
            log_path=log_path,
            ready_timeout_s=settings.ready_timeout_s,
            wait=False,
        )

    async def restart_dead(self, adapter_dir: Path, step: int) -> int:
        """Start every dead replica this run started again on its port, serve it `<run>@<step>` and put it back in
        rotation; returns how many rejoined. A restart that fails is logged and the replica stays dead (the
        others carry the run). Attached servers are left to whoever runs them."""
        if not self.config.vllm.restart_dead or self.pool is None or len(self.servers) < 2:
            return 0
        rejoined = 0
        for index, server in enumerate(self.servers):
            if server.process is None or self.pool.is_alive(server.base_url):
                continue
            server.stop()  # reaps what is left of the dead process group
            port = int(server.base_url.rsplit(":", 1)[1])
            log.warning(
                "vllm_replica_restarting", base_url=server.base_url, reason=self.pool.replica(server.base_url).reason
            )
            try:
                self.servers[index] = fresh = self._start(index, port)
                await fresh.wait_ready_async()
                await self.lora.revive(fresh.base_url, adapter_dir, step)
            except (VLLMServerError, LoraSyncError) as error:
                log.error("vllm_replica_restart_failed", base_url=server.base_url, error=str(error))
                self.servers[index].stop()
                continue
            rejoined += 1
        return rejoined

    @property
    def replicas(self) -> ReplicaPool:
        assert self.pool is not None, "open() first"
        return self.pool

    @property
    def openai_base_url(self) -> str:
        """The OpenAI base URL of a live replica, the least loaded (what the policy-server executor talks to)."""
        return f"{self.replicas.lease()}/v1"

    @property
    def lora(self) -> ReplicaSync:
        assert self.sync is not None, "open() first"
        return self.sync

    async def resume_at(self, adapter_dir: Path, step: int) -> str:
        """Serve the checkpoint's adapter as `<run>@<step>` on every replica: adopt it where the server still has
        it, else load it; drop names a killed run published after that step."""
        return await self.lora.resume_at(adapter_dir, step)

    def executor_backend(self) -> ChatBackend:
        executor = self.config.executor
        if isinstance(executor, PolicyServerExecutor):
            return build_backend(
                OpenAIModelConfig(
                    backend="openai",
                    base_url=self.openai_base_url,
                    model=self.config.vllm.served_name,
                    max_concurrency=executor.max_concurrency,
                    timeout_s=executor.timeout_s,
                    sampling=executor.sampling,
                    send_seed=executor.send_seed,
                )
            )
        return build_backend(executor)

    async def aclose(self) -> None:
        if self.sync is not None:
            await self.sync.aclose()
        for server in self.servers:
            server.stop()  # a server this run attached to is left running

    async def __aenter__(self) -> PolicyService:
        return await self.open()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()
