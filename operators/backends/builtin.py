"""The built-in executor backends: openai, local and scripted, as registry specs.

Each builder imports its backend's module only when called, so an `openai` executor never imports
torch/transformers (the `local` backend does) and the scripted test double stays out of production paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.backends.base import ChatBackend
from operators.backends.config import ConfigError, LocalModelConfig, OpenAIModelConfig, ScriptedModelConfig
from operators.backends.registry import BackendSpec
from operators.backends.usage import UsageLog

__all__ = ["BUILTIN_BACKENDS"]


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


def _build_local(config: LocalModelConfig, env: Mapping[str, str] | None, usage_log: UsageLog | None) -> ChatBackend:
    """A transformers model in process; it keeps its own usage log (torch is imported on first generation)."""
    from operators.backends.local import LocalBackend
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


def _build_scripted(
    config: ScriptedModelConfig, env: Mapping[str, str] | None, usage_log: UsageLog | None
) -> ChatBackend:
    """The named test double: canned replies or a replayed recording; it keeps its own usage log."""
    from operators.backends.scripted import ScriptedBackend, load_recordings

    try:
        recordings = load_recordings(config.recording) if config.recording is not None else []
    except (OSError, ValueError) as exc:
        raise ConfigError(f"scripted recording {config.recording}: {exc}") from exc
    model = config.model or (recordings[0].response.model if recordings else "scripted")
    return ScriptedBackend(config.replies, recordings=recordings, default=config.default_reply, model=model)


BUILTIN_BACKENDS: tuple[BackendSpec[Any], ...] = (
    BackendSpec("openai", OpenAIModelConfig, _build_openai, model_id_field="model"),
    BackendSpec("local", LocalModelConfig, _build_local, model_id_field="path"),
    BackendSpec("scripted", ScriptedModelConfig, _build_scripted, model_id_field="model"),
)
