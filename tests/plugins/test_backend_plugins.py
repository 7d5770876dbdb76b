"""Executor backends plug in from outside the package: by `register_backend`, and by a real entry point in the
`flowsteer.backends` group. Either way a config file names the backend like a built-in one and
`build_executor_backend` builds it; unknown names and a plug-in's unknown keys are clear errors."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import pytest
from pydantic import ConfigDict

from operators.backends.base import ChatMessage, ChatRequest, ChatResponse
from operators.backends.config import BackendModelConfig, ConfigError, load_executor_config, parse_config
from operators.backends.factory import build_executor_backend
from operators.backends.registry import ENTRY_POINT_GROUP, BackendSpec, backend_registry, register_backend
from operators.backends.usage import UsageLog
from tests.support.distributions import install_distribution, module_name

TOY_MODULE = """
from typing import Literal

from operators.backends.base import ChatResponse
from operators.backends.config import BackendModelConfig
from operators.backends.registry import BackendSpec


class ReverseConfig(BackendModelConfig):
    backend: Literal["reverse"]
    model: str = "reverse-1"


class ReverseBackend:
    def __init__(self, config):
        self.config = config

    @property
    def model(self):
        return self.config.model

    def cache_key(self):
        return f"reverse:{self.config.model}"

    async def complete(self, request):
        return ChatResponse(text=request.messages[-1].content[::-1], model=self.config.model)

    async def aclose(self):
        pass


SPEC = BackendSpec("reverse", ReverseConfig, lambda config, env, usage_log: ReverseBackend(config))
NOT_A_SPEC = 42
"""


class ShoutConfig(BackendModelConfig):
    backend: Literal["shout"]
    model: str = "shout-1"
    suffix: str = "!"
    token_env: str | None = None


class ShoutBackend:
    """Test double: answers with the last message upper-cased (and the secret it was built with, to check `env`)."""

    def __init__(self, config: ShoutConfig, secret: str) -> None:
        self.config = config
        self.secret = secret

    @property
    def model(self) -> str:
        return self.config.model

    def cache_key(self) -> str:
        return f"shout:{self.config.model}"

    async def complete(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(text=request.messages[-1].content.upper() + self.config.suffix, model=self.config.model)

    async def aclose(self) -> None:
        pass


def build_shout(config: ShoutConfig, env: Mapping[str, str] | None, usage_log: UsageLog | None) -> ShoutBackend:
    secret = (env or {}).get(config.token_env, "") if config.token_env else ""
    return ShoutBackend(config, secret)


SHOUT = BackendSpec("shout", ShoutConfig, build_shout)
PRESET = Path(__file__).resolve().parents[2] / "configs" / "cpu-smoke.yaml"


def config_file(tmp_path: Path, backend: str, extra: str = "") -> Path:
    path = tmp_path / "executor.toml"
    text = f"""
        [executor]
        model = "toy"

        [models.toy]
        backend = "{backend}"
        {extra}
    """
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


async def ask(backend: object, text: str) -> str:
    reply = await backend.complete(ChatRequest(messages=[ChatMessage(role="user", content=text)]))  # type: ignore[attr-defined]
    return str(reply.text)


async def test_a_backend_registered_from_outside_is_named_in_a_config_file_and_answers(tmp_path: Path) -> None:
    assert register_backend(SHOUT) is SHOUT
    path = config_file(tmp_path, "shout", 'suffix = "?!"\ntoken_env = "SHOUT_TOKEN"\nsampling = {temperature = 0.2}')
    backend = build_executor_backend(path, env={"SHOUT_TOKEN": "t0k"})
    assert isinstance(backend, ShoutBackend)
    assert await ask(backend, "hello") == "HELLO?!"
    assert backend.secret == "t0k"  # the builder got the env it was given
    assert backend.config.sampling.temperature == 0.2  # every entry keeps the shared sampling defaults

    # The environment overrides work for it too: the model id goes to its `model_id_field` ("model").
    chosen = load_executor_config(path, env={"FLOWSTEER_EXECUTOR_MODEL": "shout-2"})
    assert isinstance(chosen.config, ShoutConfig) and chosen.config.model == "shout-2"
    assert chosen.config.suffix == "?!"
    from_env = load_executor_config(env={"FLOWSTEER_EXECUTOR_BACKEND": "shout", "FLOWSTEER_EXECUTOR_MODEL": "m"})
    assert from_env.name == "env" and isinstance(from_env.config, ShoutConfig) and from_env.config.model == "m"


def test_a_plug_in_config_rejects_unknown_keys_by_name(tmp_path: Path) -> None:
    register_backend(SHOUT)
    with pytest.raises(ConfigError, match=r"unknown key 'models\.toy\.sufix'"):
        build_executor_backend(config_file(tmp_path, "shout", 'sufix = "?"'), env={})


def test_an_unknown_backend_lists_the_registered_ones(tmp_path: Path) -> None:
    register_backend(SHOUT)
    path = config_file(tmp_path, "nope")
    with pytest.raises(ConfigError, match=r"'models\.toy': 'backend' must be one of openai, local, scripted, shout$"):
        build_executor_backend(path, env={})
    with pytest.raises(ConfigError, match=r"FLOWSTEER_EXECUTOR_BACKEND='nope' is not one of .*, shout"):
        load_executor_config(env={"FLOWSTEER_EXECUTOR_BACKEND": "nope"})


async def test_a_backend_published_as_an_entry_point_is_loaded_and_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = {"executor": {"model": "toy"}, "models": {"toy": {"backend": "reverse"}}}
    with pytest.raises(ConfigError, match=r"'backend' must be one of openai, local, scripted$"):
        parse_config(data)  # not installed yet
    backend_registry.cache_clear()  # a fresh process: the registry is built on first use

    module = module_name("fs_backend_plugin", tmp_path)
    install_distribution(
        tmp_path / "site", module, TOY_MODULE, ENTRY_POINT_GROUP, {"reverse": f"{module}:SPEC"}, monkeypatch
    )

    assert "reverse" in backend_registry()
    backend = build_executor_backend(config_file(tmp_path, "reverse", 'model = "r2"'), env={})
    assert await ask(backend, "stressed") == "desserts"
    assert backend.model == "r2"
    assert type(parse_config(data).models["toy"]).__name__ == "ReverseConfig"


def test_an_entry_point_that_is_not_a_backend_spec_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = module_name("fs_backend_bad", tmp_path)
    install_distribution(
        tmp_path / "site", module, TOY_MODULE, ENTRY_POINT_GROUP, {"bad": f"{module}:NOT_A_SPEC"}, monkeypatch
    )
    with pytest.raises(TypeError, match=r"'bad' in flowsteer\.backends is not a BackendSpec"):
        backend_registry()


def test_a_spec_must_name_its_config_tag_and_forbid_unknown_keys() -> None:
    class Untagged(BackendModelConfig):
        model: str = "m"

    with pytest.raises(TypeError, match=r"backend: Literal\['untagged'\]"):
        BackendSpec("untagged", Untagged, build_shout)  # type: ignore[arg-type]

    class Lenient(BackendModelConfig):
        model_config = ConfigDict(extra="allow")
        backend: Literal["lenient"]

    with pytest.raises(TypeError, match="forbid unknown keys"):
        BackendSpec("lenient", Lenient, build_shout)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'shout' is already registered"):
        register_backend(SHOUT)
        register_backend(BackendSpec("shout", ShoutConfig, build_shout))


async def test_a_plug_in_backend_can_be_the_training_executor(tmp_path: Path) -> None:
    from training.train.config import TrainConfigError, load_train_config
    from training.train.serving import PolicyService

    register_backend(SHOUT)
    preset = PRESET
    config = load_train_config(preset, ["executor={backend: shout, suffix: '.'}"])
    assert isinstance(config.executor, ShoutConfig) and config.executor.suffix == "."
    assert config.model_dump()["executor"]["suffix"] == "."  # dumped (and fingerprinted) as its own config model
    backend = PolicyService(config, tmp_path, tmp_path / "log").executor_backend()
    assert await ask(backend, "go") == "GO."
    with pytest.raises(TrainConfigError, match=r"executor\.sufix"):
        load_train_config(preset, ["executor={backend: shout, sufix: '.'}"])
