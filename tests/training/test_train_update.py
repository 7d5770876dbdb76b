"""The learner on the tiny Qwen3: left-padded tail log-probs, the canvas mask, exact gradient accumulation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.logprobs import causal_token_logprobs
from training.rollout.samples import TurnSample
from training.train.batching import collate, micro_batches, split_minibatches
from training.train.config import LoraSettings, LossSettings, OptimSettings
from training.train.policy import PolicyModel
from training.train.update import policy_update

pytestmark = pytest.mark.slow  # loads transformers + peft

NO_DROPOUT = LoraSettings(r=4, alpha=8, dropout=0.0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from operators.models import prepare

    return prepare("tiny-qwen3", home=tmp_path_factory.mktemp("models"))


def trained_policy(model_dir: Path, seed: int = 0) -> PolicyModel:
    """A policy whose adapter is not the identity (B != 0), so gradients reach A and B and KL is non-zero."""
    torch.manual_seed(seed)  # peft draws A from the global generator
    policy = PolicyModel.load(model_dir, NO_DROPOUT, chunk_size=7)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return policy


def sample(
    prompt: list[int], completion: list[int], mask: list[int] | None = None, behaviour: float = -3.0
) -> TurnSample:
    flags = mask or [1] * len(completion)
    return TurnSample(
        episode_id="e",
        group_id="g",
        turn_index=0,
        prompt_ids=prompt,
        completion_ids=completion,
        completion_mask=flags,
        behaviour_logprobs=[behaviour if f else 0.0 for f in flags],
    )


def batch_of_uneven_sequences() -> list[tuple[TurnSample, float]]:
    g = torch.Generator().manual_seed(1)

    def ids(n: int) -> list[int]:
        return torch.randint(5, 1000, (n,), generator=g).tolist()

    return [
        (sample(ids(9), ids(4)), 1.0),
        (sample(ids(3), ids(7), mask=[1, 1, 0, 0, 0, 1, 1]), -0.5),  # history-style: canvas tokens inside
        (sample(ids(14), ids(2)), 0.25),
        (sample(ids(5), ids(5)), -1.5),
    ]


def test_tail_logprobs_of_left_padded_rows_equal_unpadded_full_sequence_logprobs(model_dir: Path) -> None:
    policy = trained_policy(model_dir)
    policy.eval()
    sequences = batch_of_uneven_sequences()
    batch = collate(sequences, policy.pad_id)
    with torch.no_grad():
        tail, _ = policy.logprobs(batch, with_entropy=False)
        for row, (seq, _) in enumerate(sequences):
            ids = torch.tensor([seq.input_ids])
            full = causal_token_logprobs(policy.model(input_ids=ids).logits, ids)[0]
            n = len(seq.completion_ids)
            torch.testing.assert_close(tail[row, batch.tail - n :], full[-n:], rtol=0, atol=2e-5)


def test_learner_logprobs_are_dropout_free_in_training_mode_with_lora_dropout(model_dir: Path) -> None:
    """The ratio's log-probs come from the gradient's forward: with lora dropout 0.5 it must still be repeatable."""
    torch.manual_seed(0)
    policy = PolicyModel.load(model_dir, LoraSettings(r=4, alpha=8, dropout=0.5), chunk_size=7)
    with torch.no_grad():  # a fresh adapter has B = 0, which would hide any dropout on the LoRA path
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * 0.5)
    batch = collate(batch_of_uneven_sequences(), policy.pad_id)
    policy.train()
    first, _ = policy.logprobs(batch, with_entropy=False)
    second, _ = policy.logprobs(batch, with_entropy=False)
    policy.eval()
    evaluated, _ = policy.logprobs(batch, with_entropy=False)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    torch.testing.assert_close(first, evaluated, rtol=0, atol=0)


def test_mask_selects_exactly_the_policy_sampled_tokens(model_dir: Path) -> None:
    sequences = batch_of_uneven_sequences()
    batch = collate(sequences, pad_id=0)
    for row, (seq, _) in enumerate(sequences):
        chosen = batch.target_ids[row][batch.target_mask[row]].tolist()
        assert chosen == [t for t, f in zip(seq.completion_ids, seq.completion_mask, strict=True) if f]
        assert int(batch.target_mask[row].sum()) == seq.n_policy_tokens
        assert int(batch.attention_mask[row].sum()) == len(seq.input_ids)
        assert batch.position_ids[row, -1].item() == len(seq.input_ids) - 1
    assert batch.n_policy_tokens == sum(s.n_policy_tokens for s, _ in sequences)


def deltas_after_one_sgd_update(model_dir: Path, micro_batch_size: int, normalisation: str) -> dict[str, torch.Tensor]:
    policy = trained_policy(model_dir)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=1.0)
    policy_update(
        policy,
        optimizer,
        batch_of_uneven_sequences(),
        OptimSettings(micro_batch_size=micro_batch_size, grad_clip=1e9),
        LossSettings(normalisation=normalisation),  # type: ignore[arg-type]
        torch.Generator().manual_seed(0),
    )
    return {n: p.detach() - before[n] for n, p in policy.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_gradient_accumulation_is_exact_whatever_the_micro_batch_size(model_dir: Path, normalisation: str) -> None:
    whole = deltas_after_one_sgd_update(model_dir, 8, normalisation)
    one_by_one = deltas_after_one_sgd_update(model_dir, 1, normalisation)
    assert any(float(d.abs().max()) > 0 for d in whole.values())
    for name, delta in whole.items():
        torch.testing.assert_close(one_by_one[name], delta, rtol=1e-4, atol=1e-7, msg=name)


def test_on_policy_step_zero_has_ratio_one_and_zero_kl(model_dir: Path) -> None:
    policy = PolicyModel.load(model_dir, NO_DROPOUT, chunk_size=7)  # fresh adapter: B = 0, policy == base
    policy.eval()
    raw = batch_of_uneven_sequences()
    batch = collate(raw, policy.pad_id)
    with torch.no_grad():
        current, _ = policy.logprobs(batch, with_entropy=False)
    on_policy = []
    for row, (seq, advantage) in enumerate(raw):
        n = len(seq.completion_ids)
        values = current[row, batch.tail - n :].tolist()
        behaviour = [v if f else 0.0 for v, f in zip(values, seq.completion_mask, strict=True)]
        on_policy.append((seq.model_copy(update={"behaviour_logprobs": behaviour}), advantage))
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    metrics = policy_update(
        policy, optimizer, on_policy, OptimSettings(), LossSettings(), torch.Generator().manual_seed(0)
    )
    assert metrics["loss/kl"] == 0.0
    assert metrics["loss/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["loss/clip_fraction"] == 0.0
    assert metrics["optim/updates"] == 1.0
    assert metrics["optim/policy_tokens"] == sum(s.n_policy_tokens for s, _ in raw)


def test_empty_batch_makes_no_update(model_dir: Path) -> None:
    policy = PolicyModel.load(model_dir, NO_DROPOUT)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    metrics = policy_update(policy, optimizer, [], OptimSettings(), LossSettings(), torch.Generator())
    assert metrics["optim/updates"] == 0.0


def test_minibatches_partition_and_micro_batches_group_by_length() -> None:
    parts = split_minibatches(10, 3, torch.Generator().manual_seed(0))
    assert sorted(i for part in parts for i in part) == list(range(10))
    assert sorted(len(p) for p in parts) == [3, 3, 4]
    assert split_minibatches(2, 5, torch.Generator()) and len(split_minibatches(2, 5, torch.Generator())) == 2
    chunks = micro_batches([0, 1, 2, 3], lengths=[9, 1, 5, 3], size=2)
    assert chunks == [[1, 3], [2, 0]]


def completion_logprob(policy: PolicyModel, seq: TurnSample) -> float:
    policy.eval()
    batch = collate([(seq, 0.0)], policy.pad_id)
    with torch.no_grad():
        logp, _ = policy.logprobs(batch, with_entropy=False)
    return float(logp[0, batch.tail - len(seq.completion_ids) :].sum())


def on_policy(policy: PolicyModel, seq: TurnSample) -> TurnSample:
    policy.eval()
    batch = collate([(seq, 0.0)], policy.pad_id)
    with torch.no_grad():
        logp, _ = policy.logprobs(batch, with_entropy=False)
    return seq.model_copy(update={"behaviour_logprobs": logp[0, batch.tail - len(seq.completion_ids) :].tolist()})


def test_updates_raise_the_rewarded_completion_and_lower_the_punished_one(model_dir: Path) -> None:
    """The end-to-end sign: what the advantages reward becomes likelier, whatever the loss's internals."""
    policy = trained_policy(model_dir)
    prompt = list(range(20, 32))
    rewarded, punished = sample(prompt, [101, 102, 103]), sample(prompt, [201, 202, 203, 204, 205])
    before = (completion_logprob(policy, rewarded), completion_logprob(policy, punished))
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    for _ in range(3):
        fresh = [(on_policy(policy, rewarded), 0.75), (on_policy(policy, punished), -0.75)]
        policy_update(policy, optimizer, fresh, OptimSettings(), LossSettings(), torch.Generator().manual_seed(0))
    after = (completion_logprob(policy, rewarded), completion_logprob(policy, punished))
    assert after[0] > before[0] + 0.1 and after[1] < before[1] - 0.1
