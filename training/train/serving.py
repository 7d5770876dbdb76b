"""The run's generation side: the policy's vLLM server (started or attached), LoRA hand-over, the executor.

The executor is never the policy adapter: either the policy server's base model under its own served name,
or any backend of the operators' config (a local in-process model, another endpoint, a scripted double).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

import structlog

from operators.backends.base import ChatBackend
from operators.backends.config import OpenAIModelConfig
from operators.backends.factory import build_backend
from training.train.config import PolicyServerExecutor, TrainConfig
from training.vllm import LoraSync, VLLMServer
from training.vllm.server import vllm_python

log = structlog.get_logger(__name__)


class PolicyService:
    """Owns the vLLM server handle (stopping it only if it started it) and the run's `LoraSync`."""

    def __init__(self, config: TrainConfig, model_dir: Path, log_path: Path) -> None:
        self.config = config
        self.model_dir = model_dir
        self.log_path = log_path
        self.server: VLLMServer | None = None
        self.sync: LoraSync | None = None

    async def open(self) -> PolicyService:
        """Attach to the configured server, or start one and wait for it without blocking the event loop."""
        settings = self.config.vllm
        if settings.url:
            self.server = VLLMServer.attach(settings.url, served_name=settings.served_name)
            log.info("vllm_attached", base_url=settings.url)
        else:
            self.server = VLLMServer.start(
                self.model_dir,
                served_name=settings.served_name,
                max_lora_rank=self.config.policy.lora.r,
                max_loras=settings.max_loras,
                dtype=settings.dtype,
                enforce_eager=settings.enforce_eager,
                max_model_len=settings.max_model_len,
                python=settings.python or vllm_python(),
                extra_args=settings.extra_args,
                env=settings.env,
                log_path=self.log_path,
                ready_timeout_s=settings.ready_timeout_s,
                wait=False,
            )
            await self.server.wait_ready_async()
        self.sync = LoraSync(self.server.base_url, self.config.run.name, max_loaded=settings.max_loras)
        return self

    @property
    def openai_base_url(self) -> str:
        assert self.server is not None, "open() first"
        return self.server.openai_base_url

    @property
    def lora(self) -> LoraSync:
        assert self.sync is not None, "open() first"
        return self.sync

    async def resume_at(self, adapter_dir: Path, step: int) -> str:
        """Serve the checkpoint's adapter as `<run>@<step>`: adopt it if the server still has it, else load it;
        drop names a killed run published after that step."""
        await self.lora.unload_later_than(step)
        assert self.server is not None
        if f"{self.config.run.name}@{step}" in self.server.models():
            return await self.lora.adopt(step)
        return await self.lora.publish(adapter_dir, step)

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
                )
            )
        return build_backend(executor)

    async def aclose(self) -> None:
        if self.sync is not None:
            await self.sync.aclose()
        if self.server is not None:
            self.server.stop()

    async def __aenter__(self) -> PolicyService:
        return await self.open()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()
