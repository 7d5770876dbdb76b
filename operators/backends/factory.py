"""Build a `ChatBackend` from a validated model entry.

Each backend module is imported only when its kind is requested, so an `openai` executor never imports
torch/transformers (the `local` backend does) and the scripted test double stays out of production paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from operators.backends.base import ChatBackend
from operators.backends.config import (
    ConfigError,
    LocalModelConfig,
    ModelConfig,
    NamedModelConfig,
    OpenAIModelConfig,
    ScriptedModelConfig,
    load_executor_config,
)
from operators.backends.usage import UsageLog

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
    if isinstance(config, OpenAIModelConfig):
        return _build_openai(config, env, usage_log)
    if isinstance(config, LocalModelConfig):
        return _build_local(config)
    if isinstance(config, ScriptedModelConfig):
        return _build_scripted(config)
    raise ConfigError(f"unsupported backend configuration {type(config).__name__}")


def build_executor_backend(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    usage_log: UsageLog | None = None,
) -> ChatBackend:
    """The executor backend from the config file (or `$FLOWSTEER_CONFIG`, or the default) plus overrides."""
    return build_backend(load_executor_config(path, env=env), env=env, usage_log=usage_log)


def _build_openai(config: OpenAIModelConfig, env: Mapping[str, str] | None, usage_log: UsageLog | None) -> ChatBackend:
    from operators.backends.openai_compat import OpenAICompatBackend, RetryPolicy

    return OpenAICompatBackend(
        base_url=config.base_url,
        base_urls=config.base_urls,
        model=config.model,
        api_key=config.resolve_api_key(env),
        sampling=config.sampling,
        max_concurrency=config.max_concurrency,
        timeout_s=config.timeout_s,
        retry=RetryPolicy(
            max_retries=config.max_retries,
            backoff_base_s=config.backoff_base_s,
            backoff_max_s=config.backoff_max_s,
        ),
        max_tokens_field=config.max_tokens_field,
        send_seed=config.send_seed,
        usage_log=usage_log,
    )


def _build_local(config: LocalModelConfig) -> ChatBackend:
    from operators.backends.local import LocalBackend  # torch is imported on first generation, not here
    from operators.models.catalog import UnknownModelError
    from operators.models.errors import ModelPrepareError

    try:
        return LocalBackend(
            config.path,
            dtype=config.dtype,
            num_threads=config.num_threads,
            defaults=config.sampling,
            max_batch_size=config.max_batch_size,
        )
    except (ModelPrepareError, UnknownModelError) as exc:
        raise ConfigError(f"local model {config.path!r}: {exc.args[0] if exc.args else exc}") from exc


def _build_scripted(config: ScriptedModelConfig) -> ChatBackend:
    from operators.backends.scripted import ScriptedBackend, load_recordings

    try:
        recordings = load_recordings(config.recording) if config.recording is not None else []
    except (OSError, ValueError) as exc:
        raise ConfigError(f"scripted recording {config.recording}: {exc}") from exc
    model = config.model or (recordings[0].response.model if recordings else "scripted")
    return ScriptedBackend(config.replies, recordings=recordings, default=config.default_reply, model=model)
