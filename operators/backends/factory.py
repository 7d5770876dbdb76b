"""Build a `ChatBackend` from a validated model entry, with the builder its backend registered.

Which backends exist is the registry's to say (`operators/backends/registry.py`); built-in ones import their
module only when built (`operators/backends/builtin.py`), so an `openai` executor never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from operators.backends.base import ChatBackend
from operators.backends.config import ConfigError, ModelConfig, NamedModelConfig, load_executor_config
from operators.backends.registry import backend_registry
from operators.backends.usage import UsageLog
from operators.plugins import UnknownPluginError

__all__ = ["build_backend", "build_executor_backend"]


def build_backend(
    model_cfg: ModelConfig | NamedModelConfig,
    *,
    env: Mapping[str, str] | None = None,
    usage_log: UsageLog | None = None,
) -> ChatBackend:
    """A ready backend for `model_cfg`; secrets are read from `env` (default: the process environment).

    `usage_log` lets several openai backends share one log; the local and scripted backends keep their own.
    """
    config = model_cfg.config if isinstance(model_cfg, NamedModelConfig) else model_cfg
    try:
        spec = backend_registry().get(config.backend)
    except UnknownPluginError as exc:
        raise ConfigError(str(exc)) from None
    return spec.build(config, env, usage_log)


def build_executor_backend(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    usage_log: UsageLog | None = None,
) -> ChatBackend:
    """The executor backend from the config file (or `$FLOWSTEER_CONFIG`, or the default) plus overrides."""
    return build_backend(load_executor_config(path, env=env), env=env, usage_log=usage_log)
