"""Choose the runner a server or command runs workflows with: an engine over the configured executor, over the
embedded local model, or none."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from flowsteer_mcp.canvas.execution import NoRunner, WorkflowRunner
from operators.registry import OperatorRegistry

if TYPE_CHECKING:
    from flowsteer_mcp.engine import WorkflowEngine
    from flowsteer_mcp.engine.memo_store import MemoStore
    from operators.backends.base import ChatBackend
    from operators.backends.config import EngineConfig

log = structlog.get_logger(__name__)
_EXECUTOR_ENV = (
    "FLOWSTEER_CONFIG",
    "FLOWSTEER_EXECUTOR_MODEL",
    "FLOWSTEER_EXECUTOR_BACKEND",
    "FLOWSTEER_EXECUTOR_BASE_URL",
)


def engine_with(
    registry: OperatorRegistry, backend: ChatBackend, settings: EngineConfig, *, memo_store: MemoStore | None = None
) -> WorkflowEngine:
    """An engine over `backend` with the `[engine]` settings of a config file (timeouts, re-asks); its memo also
    keeps its entries in `memo_store` when one is given."""
    from flowsteer_mcp.engine import MemoCache, WorkflowEngine

    return WorkflowEngine(
        registry,
        backend,
        memo=MemoCache(store=memo_store),
        sandbox_timeout_s=settings.sandbox_timeout_s,
        call_timeout_s=settings.call_timeout_s,
        run_timeout_s=settings.run_timeout_s,
        max_reasks=settings.reasks,
        sampled_reasks=settings.sampled_reasks,
        memo_scope=settings.memo_scope,
    )


def executor_configured(config: Path | None) -> bool:
    return config is not None or any(os.environ.get(name) for name in _EXECUTOR_ENV)


def build_runner(registry: OperatorRegistry, config: Path | None = None, *, required: bool = False) -> WorkflowRunner:
    """An engine over the configured executor backend, with the config's `[engine]` settings; without
    configuration, the embedded default local model when it has been prepared (`flowsteer models prepare`), else
    NoRunner (or an error when `required`)."""
    from flowsteer_mcp.engine import WorkflowEngine
    from operators.backends.config import default_config, load_config, resolve_executor
    from operators.backends.factory import build_backend

    if executor_configured(config):
        settings = load_config(config)  # the file named, else $FLOWSTEER_CONFIG, else the default
        backend = build_backend(resolve_executor(settings))
        return engine_with(registry, backend, settings.engine)
    from operators.models import is_prepared

    default = resolve_executor(default_config())
    model_name = getattr(default.config, "path", "")
    if is_prepared(model_name):
        log.info("executor_default_local_model", model=model_name)
        return WorkflowEngine(registry, build_backend(default))
    if required:
        raise RuntimeError(
            f"No executor configured and the default local model {model_name!r} is not prepared: run "
            f"`flowsteer models prepare {model_name}` or pass --config FILE (see README)."
        )
    log.warning("no_executor_configured", hint=f"flowsteer models prepare {model_name}, or --config FILE")
    return NoRunner()
