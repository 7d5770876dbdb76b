"""The shipped director on the executor's own vLLM server (`--policy-serve executor`): loaded for one command,
refused with the reason when the server cannot carry it, and nothing of the server's own touched.

The server is a real vLLM of smollm2-135m-instruct started as an executor would be, with run-time LoRA loading
on; the director is a real (random, untrained) LoRA adapter on that base (tests/support/shipped_director.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowsteer_mcp.director.card import ShippedDirector, shipped_director
from operators.models import resolve_model
from tests.support.shipped_director import (
    SMALL_MODEL,
    fake_director,
    requires_small_model,
    write_card,
)
from tests.support.vllm import vllm_interpreter
from training.director_on_executor import ExecutorServingError, base_of, director_on_executor
from training.serve_director import DirectorServingError, serve_shipped_director
from training.vllm.server import VLLMServer, free_port

# -- which card is the base model (pure) ---------------------------------------------------------------------------


def test_the_base_is_the_parentless_card_whose_weights_folder_is_the_catalog_name() -> None:
    cards: list[dict[str, Any]] = [
        {"id": "flow-director@3", "root": "/x/adapter", "parent": "qwen-coder"},
        {"id": "qwen-coder", "root": "/root/.cache/flowsteer/models/qwen2.5-coder-0.5b-instruct", "parent": None},
    ]
    assert base_of(cards, "qwen2.5-coder-0.5b-instruct") == "qwen-coder"
    assert base_of(cards, "smollm2-135m-instruct") is None
    assert base_of([{"id": "smollm2-135m-instruct", "root": "/elsewhere/weights"}], "smollm2-135m-instruct")
    # an adapter whose folder happens to carry the name is no base
    assert base_of([{"id": "a", "root": "/m/smollm2-135m-instruct", "parent": "b"}], "smollm2-135m-instruct") is None


async def test_without_an_http_executor_the_mode_says_what_it_needs(tmp_path: Path) -> None:
    director = shipped_director(fake_director(tmp_path))
    with pytest.raises(DirectorServingError, match="openai"):
        async with serve_shipped_director(director, "executor"):
            pass


# -- on real servers -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """A vLLM executor of the director's base model, started with run-time LoRA loading (VLLMServer.start's
    `--enable-lora` and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), serving the base as `executor-model`."""
    server = VLLMServer.start(
        resolve_model(SMALL_MODEL),
        served_name="executor-model",
        python=vllm_interpreter(),
        max_lora_rank=16,
        max_loras=1,
        max_model_len=2048,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        log_path=tmp_path_factory.mktemp("executor") / "vllm.log",
        ready_timeout_s=900,
    )
    try:
        yield server
    finally:
        server.stop()


async def _served(url: str) -> list[str]:
    async with httpx.AsyncClient(timeout=60) as http:
        return [card["id"] for card in (await http.get(f"{url}/v1/models")).json()["data"]]


async def _say_hi(url: str, model: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=300) as http:
        body = {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
        return await http.post(f"{url}/v1/chat/completions", json=body)


@pytest.mark.slow
@pytest.mark.vllm
@requires_small_model
async def test_the_director_joins_the_executors_server_and_leaves_it_as_it_was(
    random_director: ShippedDirector, executor: VLLMServer
) -> None:
    root = executor.base_url
    async with serve_shipped_director(random_director, "executor", executor_url=f"{root}/v1") as served:
        assert served.via == "executor" and served.base_model == "executor-model"
        assert served.url == f"{root}/v1" and served.model == "flow-director@0"
        assert set(await _served(root)) == {"executor-model", served.model}
        for model in (served.model, "executor-model"):  # the director and the executor, one server
            reply = await _say_hi(root, model)
            assert reply.status_code == 200, reply.text
        async with director_on_executor(random_director, f"{root}/v1") as again:  # a second command shares it
            assert again.model == served.model
        assert served.model in await _served(root)  # the sharer left it for its owner
    assert await _served(root) == ["executor-model"]


@pytest.mark.slow
@pytest.mark.vllm
@requires_small_model
async def test_a_director_of_another_base_model_is_refused_and_nothing_is_loaded(
    tmp_path: Path, random_director: ShippedDirector, executor: VLLMServer
) -> None:
    other = shipped_director(write_card(random_director.folder, base_model="qwen2.5-coder-0.5b-instruct"))
    with pytest.raises(ExecutorServingError, match=r"does not serve 'qwen2\.5-coder-0\.5b-instruct'"):
        async with director_on_executor(other, f"{executor.base_url}/v1"):
            pass
    assert await _served(executor.base_url) == ["executor-model"]
    write_card(random_director.folder)  # the module's director again


@pytest.mark.slow
@requires_small_model
async def test_a_server_that_cannot_load_adapters_is_refused_with_how_to_start_one(
    random_director: ShippedDirector, tmp_path: Path
) -> None:
    """The local transformers server serves the base model (under its catalog name) but loads no adapter at run
    time."""
    port = free_port("127.0.0.1")
    command = [sys.executable, "-m", "operators.models.serve", str(resolve_model(SMALL_MODEL)), "--port", str(port)]
    command += ["--served-name", SMALL_MODEL, "--dtype", "float32", "--num-threads", "1"]
    server = VLLMServer.launch(
        command, host="127.0.0.1", port=port, served_name=SMALL_MODEL, log_path=tmp_path / "local.log", label="local"
    )
    try:
        with pytest.raises(ExecutorServingError, match="--enable-lora") as refused:
            async with director_on_executor(random_director, f"{server.base_url}/v1"):
                pass
        assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in str(refused.value)
    finally:
        server.stop()
