"""Serving the shipped director: mode choice, and the local path end to end with a real (random, untrained) LoRA.

The vLLM path starts one vLLM server of the base model with the adapter as a LoRA module; it is marked `vllm`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from flowsteer_mcp.director.card import ADAPTER_SERVED_NAME, ShippedDirector, shipped_director
from flowsteer_mcp.director.served import ServedDirector
from tests.support.shipped_director import SMALL_MODEL, fake_director, requires_small_model
from tests.support.vllm import vllm_interpreter
from training import serve_director
from training.serve_director import (
    DirectorServingError,
    VLLMProfile,
    local_server_command,
    resolve_mode,
    serve_shipped_director,
)
from training.vllm.server import VLLMServer, VLLMServerError, vllm_lora_rank


def test_local_is_used_when_asked_or_when_no_vllm_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_director, "vllm_available", lambda python=None: False)
    assert resolve_mode("local") == "local"
    assert resolve_mode("auto") == "local"
    with pytest.raises(DirectorServingError, match="make vllm-env"):
        resolve_mode("vllm")
    monkeypatch.setattr(serve_director, "vllm_available", lambda python=None: True)
    assert resolve_mode("auto") == "vllm" and resolve_mode("local") == "local"


def test_vllm_gets_a_lora_rank_it_accepts() -> None:
    assert [vllm_lora_rank(r) for r in (1, 8, 9, 64, 65)] == [8, 8, 16, 64, 128]
    with pytest.raises(VLLMServerError, match="above what vLLM serves"):
        vllm_lora_rank(4096)


def test_the_local_server_serves_the_adapter_under_the_director_name(tmp_path: Path) -> None:
    command = local_server_command(
        tmp_path / "m", tmp_path / "a", host="127.0.0.1", port=5, dtype="auto", num_threads=1
    )
    assert command[1:4] == ["-m", "operators.models.serve", str(tmp_path / "m")]
    assert ["--adapter", str(tmp_path / "a"), "--served-name", ADAPTER_SERVED_NAME] == command[4:8]
    assert command[-2:] == ["--num-threads", "1"]


async def test_an_unknown_base_model_fails_before_anything_starts(tmp_path: Path) -> None:
    shipped = shipped_director(fake_director(tmp_path))
    broken = ShippedDirector(card=shipped.card.model_copy(update={"base_model": "nope"}), folder=tmp_path)
    with pytest.raises(DirectorServingError, match="needs the base model 'nope'"):
        async with serve_shipped_director(broken, "local"):
            pass


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[VLLMServer]:
    """Every server the serving code launches, to check afterwards that it was stopped."""
    servers: list[VLLMServer] = []
    launch = VLLMServer.launch

    def spy(*args: Any, **kwargs: Any) -> VLLMServer:
        servers.append(launch(*args, **kwargs))
        return servers[-1]

    monkeypatch.setattr(serve_director.VLLMServer, "launch", spy)
    return servers


@pytest.mark.slow
@requires_small_model
async def test_the_local_path_serves_a_real_lora_and_stops_it(
    random_director: ShippedDirector, launched: list[VLLMServer]
) -> None:
    async with serve_shipped_director(random_director, "local", dtype="float32", num_threads=1) as served:
        assert served.via == "local" and served.model == ADAPTER_SERVED_NAME and served.base_model is None
        (server,) = launched
        process = server.process
        assert process is not None and process.poll() is None
        async with httpx.AsyncClient(base_url=served.url, timeout=120) as http:
            models = (await http.get("/models")).json()["data"]
            reply = await http.post(
                "/chat/completions",
                json={"model": served.model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8},
            )
    assert models == [
        {
            "id": ADAPTER_SERVED_NAME,
            "object": "model",
            "owned_by": "local",
            "root": str(random_director.adapter),
            "parent": SMALL_MODEL,
        }
    ]
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert isinstance(body["choices"][0]["message"]["content"], str)
    assert body["usage"]["completion_tokens"] >= 1
    assert server.process is None and process.returncode is not None  # stopped and reaped
    async with httpx.AsyncClient(timeout=2) as http:
        with pytest.raises(httpx.HTTPError):
            await http.get(f"{served.url}/models")


@pytest.mark.slow
@pytest.mark.vllm
@requires_small_model
async def test_the_vllm_path_serves_the_adapter_and_the_base_model(
    random_director: ShippedDirector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWSTEER_VLLM_PYTHON", vllm_interpreter())
    async with serve_shipped_director(random_director, "vllm") as served:
        assert served.via == "vllm" and served.base_model == SMALL_MODEL
        async with httpx.AsyncClient(base_url=served.url, timeout=300) as http:
            names = {card["id"] for card in (await http.get("/models")).json()["data"]}
            for model in (served.model, served.base_model):
                reply = await http.post(
                    "/chat/completions",
                    json={"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8},
                )
                assert reply.status_code == 200, reply.text
    assert {ADAPTER_SERVED_NAME, SMALL_MODEL} <= names
    async with httpx.AsyncClient(timeout=2) as http:
        with pytest.raises(httpx.HTTPError):
            await http.get(f"{served.url}/models")


@requires_small_model
def test_a_folder_without_an_adapter_config_is_refused_before_loading(tmp_path: Path) -> None:
    from operators.backends.base import BackendError
    from operators.backends.local import LocalBackend

    with pytest.raises(BackendError, match="not a PEFT adapter folder"):
        LocalBackend(SMALL_MODEL, adapter=tmp_path)


def test_the_vllm_profile_fits_a_cpu_machine_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_director.shutil, "which", lambda name: None)
    cpu = VLLMProfile.for_this_machine()
    assert cpu.enforce_eager and cpu.max_model_len == 4096 and dict(cpu.env) == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    # bf16 only where the CPU computes it natively; emulated bf16 is several times slower than fp32
    monkeypatch.setattr(serve_director, "cpu_has_native_bf16", lambda: False)
    assert VLLMProfile.for_this_machine().dtype == "float32"
    monkeypatch.setattr(serve_director, "cpu_has_native_bf16", lambda: True)
    assert VLLMProfile.for_this_machine().dtype == "bfloat16"
    monkeypatch.setattr(serve_director.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert VLLMProfile.for_this_machine() == VLLMProfile()


class _FakeVLLM:
    """Stands in for a started vLLM server: ready at once, serving what `--lora-modules` and the base name say."""

    def __init__(self, names: list[str]) -> None:
        self.names, self.stopped, self.pid = names, False, 1
        self.openai_base_url = "http://127.0.0.1:9/v1"

    async def wait_ready_async(self) -> _FakeVLLM:
        return self

    def models(self) -> list[str]:
        return self.names

    def log_tail(self) -> str:
        return "(log)"

    def stop(self) -> None:
        self.stopped = True


async def test_the_vllm_path_starts_one_server_with_the_adapter_as_a_lora_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = shipped_director(fake_director(tmp_path))
    started: list[dict[str, Any]] = []
    fake = _FakeVLLM([SMALL_MODEL, ADAPTER_SERVED_NAME])

    def start(model_dir: Path, **kwargs: Any) -> _FakeVLLM:
        started.append({"model_dir": model_dir, **kwargs})
        return fake

    monkeypatch.setattr(serve_director, "vllm_available", lambda python=None: True)
    monkeypatch.setattr(serve_director, "prepare", lambda name, home=None: tmp_path / name)
    monkeypatch.setattr(serve_director.VLLMServer, "start", start)
    async with serve_shipped_director(shipped, "auto") as served:
        assert served == ServedDirector(
            url=fake.openai_base_url, model=ADAPTER_SERVED_NAME, base_model=SMALL_MODEL, via="vllm"
        )
        assert not fake.stopped
    assert fake.stopped
    (call,) = started
    assert call["model_dir"] == tmp_path / SMALL_MODEL and call["served_name"] == SMALL_MODEL
    assert call["extra_args"] == ["--lora-modules", f"{ADAPTER_SERVED_NAME}={shipped.adapter}"]
    assert call["max_lora_rank"] == 8 and call["max_loras"] == 1

    fake.names, fake.stopped = [SMALL_MODEL], False  # the adapter did not load: refused, and the server stopped
    with pytest.raises(DirectorServingError, match="not the adapter 'flow-director'"):
        async with serve_shipped_director(shipped, "vllm"):
            pass
    assert fake.stopped
