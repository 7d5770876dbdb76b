"""`policy.start_adapter`: a CWRPO run that starts from a trained LoRA (a warm start) on the raw base model.

The learner holds the adapter's weights at step 0, and the KL reference is that adapter, not the base model,
however far the weights move; a config whose LoRA settings do not match the adapter is refused before anything
loads. The learner tests run on the tiny Qwen3 (real transformers + peft, a randomly initialised adapter).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from training.rollout.samples import TurnSample
from training.train.batching import TokenBatch, collate
from training.train.config import LoraSettings, TrainConfigError, parse_train_config
from training.train.policy import PolicyModel

LORA = LoraSettings(r=4, alpha=8, dropout=0.0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from operators.models import prepare

    return prepare("tiny-qwen3", home=tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def start_adapter(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved adapter that is not the identity (B != 0), as a warm start's is."""
    torch.manual_seed(0)
    policy = PolicyModel.load(model_dir, LORA)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    folder = tmp_path_factory.mktemp("warm") / "adapter"
    policy.model.save_pretrained(str(folder))
    return folder


def batch_of(policy: PolicyModel) -> TokenBatch:
    sequence = TurnSample(
        episode_id="e",
        group_id="g",
        turn_index=0,
        prompt_ids=[11, 12, 13, 14],
        completion_ids=[15, 16, 17],
        completion_mask=[1, 1, 1],
        behaviour_logprobs=[-3.0, -3.0, -3.0],
    )
    return collate([(sequence, 1.0)], policy.pad_id)


@pytest.mark.slow
def test_the_run_starts_at_the_adapter_and_the_kl_reference_stays_there(model_dir: Path, start_adapter: Path) -> None:
    policy = PolicyModel.load(model_dir, LORA, start_adapter=start_adapter)
    base = PolicyModel.load(model_dir, LORA)  # a fresh adapter: the base model
    batch = batch_of(policy)
    with torch.no_grad():
        at_start, _ = policy.logprobs(batch, with_entropy=False)
        reference = policy.reference_logprobs(batch)
        raw_base, _ = base.logprobs(batch, with_entropy=False)
    assert torch.allclose(at_start, reference, atol=1e-6), "step 0: the policy is its own reference (KL 0)"
    assert not torch.allclose(reference, raw_base, atol=1e-4), "the reference is the adapter, not the base model"

    with torch.no_grad():  # an update moves the trainable weights
        for parameter in policy.trainable_parameters():
            parameter.add_(0.01)
    moved = [p.detach().clone() for p in policy.trainable_parameters()]
    with torch.no_grad():
        after, _ = policy.logprobs(batch, with_entropy=False)
        still_reference = policy.reference_logprobs(batch)
    assert not torch.allclose(after, at_start, atol=1e-4)
    assert torch.allclose(still_reference, reference, atol=1e-6)
    assert all(torch.equal(p, m) for p, m in zip(policy.trainable_parameters(), moved, strict=True)), (
        "the current weights are back after the reference forward"
    )


@pytest.mark.slow
def test_a_checkpoint_resumes_its_own_weights_with_the_start_adapter_as_reference(
    model_dir: Path, start_adapter: Path, tmp_path: Path
) -> None:
    trained = PolicyModel.load(model_dir, LORA, start_adapter=start_adapter)
    with torch.no_grad():
        for parameter in trained.trainable_parameters():
            parameter.add_(0.01)
    trained.model.save_pretrained(str(tmp_path / "checkpoint"))
    resumed = PolicyModel.load(model_dir, LORA, adapter_dir=tmp_path / "checkpoint", start_adapter=start_adapter)
    batch = batch_of(resumed)
    with torch.no_grad():
        assert torch.allclose(
            resumed.logprobs(batch, with_entropy=False)[0], trained.logprobs(batch, with_entropy=False)[0], atol=1e-6
        )
        assert torch.allclose(resumed.reference_logprobs(batch), trained.reference_logprobs(batch), atol=1e-6)


@pytest.mark.slow
def test_saving_an_adapter_asks_no_model_hub(model_dir: Path, start_adapter: Path, tmp_path: Path) -> None:
    # A warm start records its base by name (e.g. "qwen2.5-coder-0.5b-instruct"), not by a local path; peft's
    # default then looked the name up on the hub at every checkpoint to see whether the vocabulary had grown.
    named = tmp_path / "named-start"
    named.mkdir()
    for file in start_adapter.iterdir():
        (named / file.name).write_bytes(file.read_bytes())
    config_file = named / "adapter_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config_file.write_text(json.dumps({**config, "base_model_name_or_path": "a-model-by-name"}), encoding="utf-8")
    policy = PolicyModel.load(model_dir, LORA, start_adapter=named)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        saved = policy.save_adapter(tmp_path / "checkpoint")
    assert [str(w.message) for w in caught if "remote" in str(w.message) or "config file" in str(w.message)] == []
    resumed = PolicyModel.load(model_dir, LORA, adapter_dir=saved, start_adapter=named)
    batch = batch_of(resumed)
    with torch.no_grad():
        assert torch.allclose(
            resumed.logprobs(batch, with_entropy=False)[0], policy.logprobs(batch, with_entropy=False)[0], atol=1e-6
        )


def config_with(start: Path, **policy: object) -> dict[str, object]:
    return {
        "run": {"steps": 3},
        "policy": {"model": "tiny-qwen3", "lora": {"r": 4, "alpha": 8}, "start_adapter": str(start), **policy},
        "executor": {"backend": "policy-server"},
        "data": {"paths": ["x.jsonl"]},
        "rollout": {"problems_per_step": 1, "rollouts_per_problem": 2},
    }


def saved_config(folder: Path, **fields: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], **fields}
    (folder / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def test_a_start_adapter_that_fits_is_accepted_and_shapes_the_fingerprint(tmp_path: Path) -> None:
    folder = saved_config(tmp_path / "adapter")
    config = parse_train_config(config_with(folder))
    assert config.policy.start_adapter == str(folder)
    without = config_with(folder)
    del without["policy"]["start_adapter"]  # type: ignore[attr-defined]
    assert parse_train_config(without).fingerprint() != config.fingerprint()


@pytest.mark.parametrize(
    ("fields", "policy", "message"),
    [
        ({"r": 16}, {}, "must match the start adapter's"),
        ({"target_modules": ["q_proj", "v_proj"]}, {}, "must match the start adapter's"),
        ({}, {"shard": "fsdp"}, "cannot be combined with policy.shard: fsdp"),
    ],
)
def test_a_start_adapter_that_does_not_fit_is_refused(
    tmp_path: Path, fields: dict[str, object], policy: dict[str, object], message: str
) -> None:
    folder = saved_config(tmp_path / "adapter", **fields)
    with pytest.raises(TrainConfigError, match=message):
        parse_train_config(config_with(folder, **policy))


def test_a_missing_start_adapter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TrainConfigError, match=r"holds no adapter_config\.json"):
        parse_train_config(config_with(tmp_path / "nowhere"))


@pytest.mark.slow
@pytest.mark.vllm
def test_flowsteer_train_starts_from_the_adapter_on_vllm(model_dir: Path, tmp_path: Path) -> None:
    """One step of the cpu-smoke preset from a saved adapter, as a user runs it: vLLM serves the start adapter
    for the first rollouts (the learner's log-probs match the sampler's: ratio 1), and the KL term measures
    the distance from it (0 before the first update moves the weights), not from the base model."""
    import subprocess
    import sys

    from safetensors.torch import load_file

    from tests.support.train_runs import jsonl, run_env
    from tests.support.vllm import REPO_ROOT, vllm_interpreter

    smoke = LoraSettings(r=8, alpha=16, dropout=0.0)  # configs/cpu-smoke.yaml's LoRA
    torch.manual_seed(0)
    warm = PolicyModel.load(model_dir, smoke)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():  # far enough from the base that serving or referencing the base would show
        for name, parameter in warm.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    adapter = tmp_path / "warm" / "adapter"
    warm.model.save_pretrained(str(adapter))
    out_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "training.cli", "train", "--config", "configs/cpu-smoke.yaml",
        "--set", f"policy.model={model_dir}", "--set", f"policy.start_adapter={adapter}",
        "--set", f"run.out_dir={out_dir}", "--set", "run.steps=1", "--set", "optim.warmup_steps=0",
        "--set", "logging.progress=false",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=run_env(vllm_interpreter()), capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    published = load_file(str(out_dir / "adapters" / "step-0" / "adapter_model.safetensors"))
    saved = load_file(str(adapter / "adapter_model.safetensors"))
    assert published.keys() == saved.keys() and all(torch.equal(published[k], saved[k]) for k in saved)
    (metrics,) = jsonl(out_dir / "metrics.jsonl")
    ratio, kl = float(metrics["loss/ratio_mean"]), float(metrics["loss/kl"])  # type: ignore[arg-type]
    assert abs(ratio - 1.0) < 0.05, f"vLLM sampled from the start adapter: ratio {ratio}"
    assert abs(kl) < 1e-4, f"the reference is the start adapter: KL {kl}"
