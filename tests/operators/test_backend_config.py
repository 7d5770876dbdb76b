"""Backend configuration: TOML/YAML files, environment overrides, secret handling, the factory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import tomli_w
from pydantic import SecretStr

from operators.backends.base import ChatMessage, ChatRequest
from operators.backends.config import (
    BackendsConfig,
    ConfigError,
    LocalModelConfig,
    NamedModelConfig,
    OpenAIModelConfig,
    ScriptedModelConfig,
    default_config,
    load_config,
    load_executor_config,
    parse_config,
    resolve_executor,
)
from operators.backends.factory import build_backend, build_executor_backend
from operators.backends.openai_compat import OpenAICompatBackend
from tests.support.openai_stub import OpenAIStub

REPO_ROOT = Path(__file__).resolve().parents[2]

EXAMPLE_TOML = """
[executor]
model = "qwen-coder"

[models.qwen-coder]
backend = "local"
path = "qwen2.5-coder-0.5b-instruct"

[models.gpt]
backend = "openai"
base_url = "http://127.0.0.1:8000/v1"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"
max_concurrency = 8
timeout_s = 60
max_retries = 4

[models.gpt.sampling]
temperature = 0.0
max_tokens = 1024
"""

EXAMPLE_YAML = """
executor:
  model: qwen-coder
models:
  qwen-coder:
    backend: local
    path: qwen2.5-coder-0.5b-instruct
  gpt:
    backend: openai
    base_url: http://127.0.0.1:8000/v1
    model: gpt-4o-mini
    api_key_env: OPENAI_API_KEY
    max_concurrency: 8
    timeout_s: 60
    max_retries: 4
    sampling:
      temperature: 0.0
      max_tokens: 1024
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_toml_and_yaml_give_the_same_config(tmp_path: Path) -> None:
    from_toml = load_config(write(tmp_path, "c.toml", EXAMPLE_TOML), env={})
    from_yaml = load_config(write(tmp_path, "c.yaml", EXAMPLE_YAML), env={})
    assert from_toml == from_yaml
    assert from_toml.executor.model == "qwen-coder"
    gpt = from_toml.models["gpt"]
    assert isinstance(gpt, OpenAIModelConfig)
    assert (gpt.base_url, gpt.model, gpt.api_key_env) == ("http://127.0.0.1:8000/v1", "gpt-4o-mini", "OPENAI_API_KEY")
    assert (gpt.max_concurrency, gpt.timeout_s, gpt.max_retries) == (8, 60.0, 4)
    assert (gpt.sampling.temperature, gpt.sampling.max_tokens) == (0.0, 1024)
    local = from_toml.models["qwen-coder"]
    assert isinstance(local, LocalModelConfig) and local.path == "qwen2.5-coder-0.5b-instruct"


def test_config_file_is_found_through_flowsteer_config(tmp_path: Path) -> None:
    path = write(tmp_path, "c.yml", EXAMPLE_YAML)
    assert load_config(env={"FLOWSTEER_CONFIG": str(path)}).models.keys() == {"qwen-coder", "gpt"}


def test_without_a_file_the_default_selects_the_local_coder_model() -> None:
    chosen = load_executor_config(env={})
    assert chosen.name == "qwen-coder"
    assert isinstance(chosen.config, LocalModelConfig)
    assert chosen.config.path == "qwen2.5-coder-0.5b-instruct"
    assert load_config(env={}) == default_config()


@pytest.mark.parametrize(
    ("where", "key"),
    [
        (("models", "gpt"), "models.gpt.temprature"),
        (("models", "gpt", "sampling"), "models.gpt.sampling.temprature"),
        (("models", "qwen-coder"), "models.qwen-coder.temprature"),
        (("executor",), "executor.temprature"),
        ((), "temprature"),
    ],
)
def test_unknown_keys_are_errors_that_name_the_key(tmp_path: Path, where: tuple[str, ...], key: str) -> None:
    data = tomllib.loads(EXAMPLE_TOML)
    table = data
    for part in where:
        table = table[part]
    table["temprature"] = 0.1
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert f"unknown key '{key}'" in str(caught.value)
    assert str(path) in str(caught.value)


def test_missing_keys_and_bad_values_are_named() -> None:
    with pytest.raises(ConfigError, match=r"'models\.gpt': .*set base_url \(one endpoint\) or base_urls"):
        parse_config({"executor": {"model": "gpt"}, "models": {"gpt": {"backend": "openai", "model": "m"}}})
    with pytest.raises(ConfigError, match=r"'models\.gpt': 'backend' must be one of openai, local, scripted"):
        parse_config({"executor": {"model": "gpt"}, "models": {"gpt": {"backend": "vllm"}}})
    with pytest.raises(ConfigError, match=r"'models\.gpt\.max_concurrency'"):
        parse_config(
            {
                "executor": {"model": "gpt"},
                "models": {"gpt": {"backend": "openai", "base_url": "http://h/v1", "model": "m", "max_concurrency": 0}},
            }
        )
    with pytest.raises(ConfigError, match=r"executor\.model 'nope' is not defined"):
        parse_config({"executor": {"model": "nope"}, "models": {}})
    with pytest.raises(ConfigError, match="top level"):
        parse_config(["not", "a", "mapping"])


@pytest.mark.parametrize("secret_key", ["api_key", "API_KEY", "token", "password"])
def test_a_key_literal_in_the_file_is_rejected_without_echoing_it(tmp_path: Path, secret_key: str) -> None:
    literal = "sk-live-THIS-MUST-NOT-APPEAR"
    text = EXAMPLE_TOML.replace('api_key_env = "OPENAI_API_KEY"', f'{secret_key} = "{literal}"')
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "c.toml", text), env={})
    message = str(caught.value)
    assert f"models.gpt.{secret_key}" in message and "api_key_env" in message
    assert literal not in message


def test_a_model_may_be_named_like_a_secret_key() -> None:
    config = parse_config({"executor": {"model": "token"}, "models": {"token": {"backend": "scripted"}}})
    assert isinstance(config.models["token"], ScriptedModelConfig)


def test_api_key_env_must_be_a_variable_name_not_the_key(tmp_path: Path) -> None:
    literal = "sk-proj-abc123/xyz=="
    text = EXAMPLE_TOML.replace('api_key_env = "OPENAI_API_KEY"', f'api_key_env = "{literal}"')
    with pytest.raises(ConfigError, match="name of an environment variable") as caught:
        load_config(write(tmp_path, "c.toml", text), env={})
    assert literal not in str(caught.value)


def test_invalid_yaml_is_reported_without_quoting_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "c.yaml", "models:\n  gpt: {backend: openai, note: 'sk-secret-1\n")
    with pytest.raises(ConfigError, match="invalid YAML") as caught:
        load_config(path, env={})
    assert "sk-secret-1" not in str(caught.value)


def test_unsupported_or_missing_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"use \.toml or \.yaml"):
        load_config(write(tmp_path, "c.json", "{}"), env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.toml", env={})
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(write(tmp_path, "bad.toml", "[executor\n"), env={})


def test_env_model_selects_a_named_entry(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", EXAMPLE_TOML)
    chosen = load_executor_config(path, env={"FLOWSTEER_EXECUTOR_MODEL": "gpt"})
    assert chosen.name == "gpt"
    assert isinstance(chosen.config, OpenAIModelConfig) and chosen.config.model == "gpt-4o-mini"


def test_env_model_otherwise_overrides_the_model_id_of_the_selected_entry(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", EXAMPLE_TOML.replace('model = "qwen-coder"', 'model = "gpt"', 1))
    chosen = load_executor_config(path, env={"FLOWSTEER_EXECUTOR_MODEL": "gpt-4.1-nano"})
    assert chosen.name == "gpt"
    assert isinstance(chosen.config, OpenAIModelConfig)
    assert chosen.config.model == "gpt-4.1-nano"
    assert chosen.config.sampling.max_tokens == 1024  # the rest of the entry is kept

    local = load_executor_config(path, env={"FLOWSTEER_EXECUTOR_MODEL": "qwen-coder"})
    assert isinstance(local.config, LocalModelConfig)


def test_env_base_url_and_key_env_override_an_openai_entry(tmp_path: Path) -> None:
    path = write(tmp_path, "c.toml", EXAMPLE_TOML.replace('model = "qwen-coder"', 'model = "gpt"', 1))
    chosen = load_executor_config(
        path,
        env={"FLOWSTEER_EXECUTOR_BASE_URL": "http://10.0.0.2:9000/v1", "FLOWSTEER_EXECUTOR_API_KEY_ENV": "VLLM_KEY"},
    )
    assert isinstance(chosen.config, OpenAIModelConfig)
    assert (chosen.config.base_url, chosen.config.api_key_env) == ("http://10.0.0.2:9000/v1", "VLLM_KEY")
    assert chosen.config.max_concurrency == 8


def test_env_alone_can_configure_an_openai_executor() -> None:
    env = {
        "FLOWSTEER_EXECUTOR_BACKEND": "openai",
        "FLOWSTEER_EXECUTOR_BASE_URL": "http://127.0.0.1:8000/v1",
        "FLOWSTEER_EXECUTOR_MODEL": "Qwen/Qwen2.5-7B-Instruct",
    }
    chosen = load_executor_config(env=env)
    assert chosen.name == "env"
    assert isinstance(chosen.config, OpenAIModelConfig)
    assert chosen.config.model == "Qwen/Qwen2.5-7B-Instruct"
    assert chosen.config.api_key_env is None

    # A base URL alone implies the openai backend, but then the model id is required.
    with pytest.raises(
        ConfigError, match=r"FLOWSTEER_EXECUTOR_BASE_URL: missing required key 'model'.*needs FLOWSTEER_EXECUTOR_MODEL"
    ):
        load_executor_config(env={"FLOWSTEER_EXECUTOR_BASE_URL": "http://127.0.0.1:8000/v1"})


def test_env_overrides_that_cannot_apply_are_errors() -> None:
    with pytest.raises(ConfigError, match="FLOWSTEER_EXECUTOR_BACKEND='vllm' is not one of"):
        load_executor_config(env={"FLOWSTEER_EXECUTOR_BACKEND": "vllm"})
    with pytest.raises(ConfigError, match="FLOWSTEER_EXECUTOR_API_KEY_ENV applies only to the openai backend"):
        load_executor_config(env={"FLOWSTEER_EXECUTOR_API_KEY_ENV": "KEY"})
    with pytest.raises(ConfigError, match="name of an environment variable"):
        load_executor_config(
            env={
                "FLOWSTEER_EXECUTOR_BACKEND": "openai",
                "FLOWSTEER_EXECUTOR_BASE_URL": "http://127.0.0.1:8000/v1",
                "FLOWSTEER_EXECUTOR_MODEL": "m",
                "FLOWSTEER_EXECUTOR_API_KEY_ENV": "sk-oops",
            }
        )


def test_api_key_is_read_from_the_named_variable_as_a_secret() -> None:
    config = OpenAIModelConfig(backend="openai", base_url="http://h/v1", model="m", api_key_env="MY_KEY")
    key = config.resolve_api_key({"MY_KEY": "sk-abc"})
    assert isinstance(key, SecretStr) and key.get_secret_value() == "sk-abc"
    assert "sk-abc" not in repr(key) and "sk-abc" not in str(key)
    with pytest.raises(ConfigError, match=r"MY_KEY .* is not set"):
        config.resolve_api_key({})
    assert "MY_KEY" in repr(config)  # the variable's name is fine to show; there is no value to show


def test_factory_builds_an_openai_backend_with_the_configured_policy() -> None:
    config = OpenAIModelConfig(
        backend="openai",
        base_url="http://127.0.0.1:8000/v1",
        model="m",
        api_key_env="MY_KEY",
        max_concurrency=3,
        timeout_s=7,
        max_retries=1,
        sampling={"temperature": 0.3},
    )
    backend = build_backend(config, env={"MY_KEY": "sk-factory-key"})
    assert isinstance(backend, OpenAICompatBackend)
    assert backend.model == "m" and backend.max_concurrency == 3
    assert '"temperature":0.3' in backend.cache_key()
    assert "sk-factory-key" not in repr(backend) + backend.cache_key()
    with pytest.raises(ConfigError, match="MY_KEY"):
        build_backend(config, env={})


async def test_executor_from_a_config_file_talks_to_the_endpoint_with_its_key(tmp_path: Path) -> None:
    with OpenAIStub(api_key="sk-from-env") as stub:
        path = write(
            tmp_path,
            "c.yaml",
            f"""
            executor: {{model: remote}}
            models:
              remote:
                backend: openai
                base_url: {stub.base_url}
                model: stub-model
                api_key_env: STUB_KEY
                max_retries: 0
            """,
        )
        backend = build_executor_backend(path, env={"STUB_KEY": "sk-from-env"})
        try:
            reply = await backend.complete(ChatRequest(messages=[ChatMessage(role="user", content="hello")]))
        finally:
            await backend.aclose()
        assert reply.text == "echo: hello"
        assert stub.chat_requests[0].headers["authorization"] == "Bearer sk-from-env"


def test_factory_builds_a_local_backend_lazily_and_explains_unprepared_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWSTEER_HOME", str(tmp_path / "home"))
    with pytest.raises(ConfigError, match="flowsteer models prepare smollm2-135m-instruct"):
        build_backend(LocalModelConfig(backend="local", path="smollm2-135m-instruct"))
    with pytest.raises(ConfigError, match="neither a model folder nor a known model"):
        build_backend(LocalModelConfig(backend="local", path=str(tmp_path / "missing-folder")))

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    backend = build_backend(LocalModelConfig(backend="local", path=str(folder), dtype="float32"))
    assert type(backend).__name__ == "LocalBackend"  # built without loading weights
    assert backend.model == "my-model" and "float32" in backend.cache_key()


async def test_factory_builds_a_scripted_backend_that_answers_from_the_config() -> None:
    config = parse_config(
        {
            "executor": {"model": "fake"},
            "models": {"fake": {"backend": "scripted", "replies": ["first"], "default_reply": "later"}},
        }
    )
    backend = build_backend(load_executor_config_from(config))
    request = ChatRequest(messages=[ChatMessage(role="user", content="q")])
    assert [(await backend.complete(request)).text for _ in range(3)] == ["first", "later", "later"]
    assert backend.model == "scripted"


def load_executor_config_from(config: BackendsConfig) -> NamedModelConfig:
    return resolve_executor(config, env={})


def test_building_an_openai_backend_does_not_import_torch() -> None:
    script = (
        "import sys\n"
        "from operators.backends.config import OpenAIModelConfig\n"
        "from operators.backends.factory import build_backend\n"
        "build_backend(OpenAIModelConfig(backend='openai', base_url='http://127.0.0.1:1/v1', model='m'))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert 'transformers' not in sys.modules, 'transformers was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
