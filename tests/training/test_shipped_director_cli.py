"""`flowsteer solve|eval --director policy` without --policy-url play the shipped director (here: a test folder).

The solve test serves a real, randomly initialised (UNTRAINED) LoRA adapter on smollm2-135m-instruct through the
local path; the eval test swaps the server for an OpenAI stub so that it checks the wiring and what is recorded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from flowsteer_mcp.director.card import ADAPTER_SERVED_NAME, DIRECTOR_DIR_ENV, ShippedDirector
from flowsteer_mcp.director.served import ServedDirector, ServeMode
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.shipped_director import (
    SMALL_MODEL,
    fake_director,
    random_lora_director,
    requires_small_model,
    write_card,
)
from training import serve_director
from training.cli import main

pytestmark = pytest.mark.usefixtures("no_cli_logging_setup")

SCRIPTED_CONFIG = """
[executor]
model = "script"

[models.script]
backend = "scripted"
default_reply = "Final answer: 42"
"""


@pytest.fixture
def executor_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for variable in ("FLOWSTEER_CONFIG", "FLOWSTEER_EXECUTOR_MODEL", "FLOWSTEER_EXECUTOR_BACKEND"):
        monkeypatch.delenv(variable, raising=False)
    config = tmp_path / "executor.toml"
    config.write_text(SCRIPTED_CONFIG, encoding="utf-8")
    return config


def test_solve_and_eval_explain_that_no_director_ships(
    tmp_path: Path, executor_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(tmp_path / "none"))
    assert main(["solve", "What is 6*7?", "--director", "policy", "--config", str(executor_config)]) == 2
    assert "no Flow-Director ships with this install" in capsys.readouterr().err
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "t/1", "source": "gsm8k", "problem": "1+1?", "ground_truth": "2"}) + "\n")
    args = ["eval", "--data", str(data), "--director", "policy", "--config", str(executor_config), "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    assert "no Flow-Director ships with this install" in capsys.readouterr().err


def test_solve_refuses_policy_serve_with_an_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["solve", "x", "--director", "policy", "--policy-url", "http://127.0.0.1:1/v1", "--policy-model", "m"]
    assert main([*argv, "--policy-serve", "local"]) == 2
    assert "cannot be combined with --policy-url" in capsys.readouterr().err
    assert main(["solve", "x", "--director", "policy", "--policy-url", "http://127.0.0.1:1/v1"]) == 2
    assert "go together" in capsys.readouterr().err


@pytest.mark.slow
@requires_small_model
def test_solve_plays_the_shipped_director_served_locally(
    tmp_path: Path, executor_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = random_lora_director(tmp_path / "director")
    # the card's game: one round of short turns (an untrained adapter writes until its budget runs out)
    write_card(folder, play={"canvas": {"max_rounds": 1}, "sampling": {"max_action_tokens": 48}})
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(folder))
    served: list[ServedDirector] = []
    serve = serve_director.serve_shipped_director

    @asynccontextmanager
    async def one_thread(
        shipped: ShippedDirector, mode: ServeMode, *, executor_url: str | None = None
    ) -> AsyncIterator[ServedDirector]:
        async with serve(shipped, mode, dtype="float32", num_threads=1) as endpoint:  # a busy 2-core machine
            served.append(endpoint)
            yield endpoint

    monkeypatch.setattr(serve_director, "serve_shipped_director", one_thread)
    argv = ["solve", "What is 6*7?", "--task-type", "math", "--director", "policy", "--policy-serve", "local"]
    code = main([*argv, "--config", str(executor_config), "--max-rounds", "5"])  # the card's 1 round wins
    out, err = capsys.readouterr()
    assert code in (0, 1), err  # 1: the untrained adapter built nothing that answers
    assert "policy: the shipped director 'test-director' (LoRA on smollm2-135m-instruct)" in err
    assert f"policy: shipped director served by local at {served[0].url} as '{ADAPTER_SERVED_NAME}'" in err
    assert "director: policy" in out and "turns: 1" in out  # one real turn of the served adapter


def _policy_reply(body: dict[str, Any]) -> StubReply:
    messages = body["messages"]
    if messages[0]["role"] != "system":
        return StubReply(content="Answer with the final number only.")
    if "Custom" in messages[-1]["content"].split("Current workflow")[-1]:
        return StubReply(content="<action>finish</action>")
    return StubReply(content="<action>add</action><operator>Custom</operator>")


def test_eval_serves_the_shipped_director_and_records_its_identity(
    tmp_path: Path, executor_config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped_folder = fake_director(tmp_path / "director")
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(shipped_folder))
    served_modes: list[str] = []

    with OpenAIStub(responder=_policy_reply, served_models=[ADAPTER_SERVED_NAME]) as stub:

        @asynccontextmanager
        async def stub_serving(
            shipped: ShippedDirector, mode: ServeMode, *, executor_url: str | None = None
        ) -> AsyncIterator[ServedDirector]:
            served_modes.append(mode)
            assert executor_url is None  # only --policy-serve executor passes the executor's server
            yield ServedDirector(url=stub.base_url, model=ADAPTER_SERVED_NAME, via="local")

        monkeypatch.setattr(serve_director, "serve_shipped_director", stub_serving)
        data = tmp_path / "data.jsonl"
        data.write_text(json.dumps({"id": "t/1", "source": "gsm8k", "problem": "6*7?", "ground_truth": "42"}) + "\n")
        out = tmp_path / "out"
        args = ["eval", "--data", str(data), "--director", "policy", "--config", str(executor_config)]
        code = main([*args, "--policy-serve", "local", "--no-progress", "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        assert stub.chat_requests
    assert served_modes == ["local"]
    config = json.loads((out / "report.json").read_text(encoding="utf-8"))["config"]
    assert config["policy_url"] == "shipped:test-director"  # not the loopback url, which changes every run
    assert config["policy_model"] == ADAPTER_SERVED_NAME
    assert config["policy_weights"].startswith(f"{SMALL_MODEL} + test-director@sha256:")


def test_solve_plays_the_shipped_director_on_the_executors_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--policy-serve executor`: the serving gets the executor's one server from --config, and the director
    and the executor are then asked at that one url (an OpenAI stub standing in for the vLLM server; the real
    loading is tests/training/test_director_on_executor.py)."""
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(fake_director(tmp_path / "director")))
    asked: list[str] = []

    def one_server(body: dict[str, Any]) -> StubReply:
        asked.append(body["model"])
        return _policy_reply(body) if body["model"] == ADAPTER_SERVED_NAME else StubReply(content="42")

    with OpenAIStub(responder=one_server, served_models=["executor-model", ADAPTER_SERVED_NAME]) as stub:
        url = stub.base_url
        config = tmp_path / "executor.toml"
        config.write_text(
            f'[executor]\nmodel = "m"\n[models.m]\nbackend = "openai"\nbase_url = "{url}"\nmodel = "executor-model"\n',
            encoding="utf-8",
        )
        given: list[str | None] = []

        @asynccontextmanager
        async def on_executor(
            shipped: ShippedDirector, mode: ServeMode, *, executor_url: str | None = None
        ) -> AsyncIterator[ServedDirector]:
            given.append(executor_url)
            assert mode == "executor" and executor_url is not None
            yield ServedDirector(
                url=executor_url, model=ADAPTER_SERVED_NAME, base_model="executor-model", via="executor"
            )

        monkeypatch.setattr(serve_director, "serve_shipped_director", on_executor)
        argv = ["solve", "What is 6*7?", "--task-type", "math", "--director", "policy", "--policy-serve", "executor"]
        code = main([*argv, "--config", str(config)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert given == [url]
    assert f"served by executor at {url}" in err
    assert {ADAPTER_SERVED_NAME, "executor-model"} <= set(asked)  # one server answered both roles
    assert out.rstrip().endswith("42")


def test_solve_on_the_executors_server_needs_an_openai_executor(
    executor_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(fake_director(tmp_path / "director")))
    argv = ["solve", "x", "--director", "policy", "--policy-serve", "executor", "--config", str(executor_config)]
    assert main(argv) == 1
    assert "shares the executor's vLLM server: the executor must be an `openai` backend" in capsys.readouterr().err


def test_solve_refuses_a_bad_config_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[executor]\nmodel = "x"\n[models.x]\nbackend = "nope"\n', encoding="utf-8")
    assert main(["solve", "x", "--director", "direct", "--config", str(config)]) == 2
    assert "'backend' must be one of" in capsys.readouterr().err


def test_serve_on_the_executors_server_needs_an_openai_executor(
    executor_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(fake_director(tmp_path / "director")))
    assert main(["serve", "--serve-director", "executor", "--config", str(executor_config)]) == 2
    assert "--config must name an `openai` executor with one base_url" in capsys.readouterr().err
