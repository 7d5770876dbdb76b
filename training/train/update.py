"""One training step's policy update: `ppo_epochs` x `minibatches` optimizer updates over the batch's sequences.

Each minibatch is processed in micro-batches with gradient accumulation; every micro-batch's loss is weighted
by its share of the minibatch's policy tokens (token-mean) or sequences (sequence-mean), so the accumulated
gradient is exactly the gradient of the minibatch-wide loss whatever the micro-batch size. Reference
log-probs (adapter disabled) are computed once per step, before any update.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
from torch import Tensor

from training.loss import LossMetrics, cwrpo_loss
from training.rollout.samples import TurnSample
from training.train.batching import collate, micro_batches, split_minibatches
from training.train.config import LossSettings, OptimSettings
from training.train.policy import PolicyModel

_WEIGHTED = ("loss", "surrogate", "kl", "entropy", "ratio_mean", "clip_fraction", "approx_kl_behaviour")


def _reference_tails(
    policy: PolicyModel, sequences: Sequence[tuple[TurnSample, float]], lengths: list[int], size: int
) -> list[Tensor]:
    """Per sequence, the base model's log-probs of its completion tokens (tail-aligned, no grad)."""
    tails: list[Tensor | None] = [None] * len(sequences)
    for chunk in micro_batches(range(len(sequences)), lengths, size):
        batch = collate([sequences[i] for i in chunk], policy.pad_id)
        reference = policy.reference_logprobs(batch)
        for row, index in enumerate(chunk):
            n = len(sequences[index][0].completion_ids)
            tails[index] = reference[row, batch.tail - n :].clone()
    return [t if t is not None else torch.zeros(0) for t in tails]


def _stack_tails(tails: Sequence[Tensor], width: int) -> Tensor:
    out = torch.zeros((len(tails), width), dtype=torch.float32)
    for row, tail in enumerate(tails):
        if tail.numel():
            out[row, width - tail.numel() :] = tail
    return out


def policy_update(
    policy: PolicyModel,
    optimizer: torch.optim.Optimizer,
    sequences: Sequence[tuple[TurnSample, float]],
    optim: OptimSettings,
    loss_settings: LossSettings,
    generator: torch.Generator,
) -> dict[str, float]:
    """Run the step's optimizer updates; returns step metrics (means over updates, `loss/ratio_max` the max)."""
    started = time.monotonic()
    if not sequences:
        return {"optim/updates": 0.0, "optim/sequences": 0.0, "optim/policy_tokens": 0.0, "time/update_s": 0.0}
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s, _ in sequences]
    with_kl = loss_settings.kl_beta > 0
    with_entropy = loss_settings.entropy_coef > 0
    policy.eval()  # reference log-probs without dropout
    references = _reference_tails(policy, sequences, lengths, optim.micro_batch_size) if with_kl else []
    policy.train()
    params = policy.trainable_parameters()
    sums: dict[str, float] = {}
    grad_norms: list[float] = []
    ratio_max = 0.0
    updates = 0
    for _ in range(optim.ppo_epochs):
        for minibatch in split_minibatches(len(sequences), optim.minibatches, generator):
            chosen = [sequences[i] for i in minibatch]
            tokens_total = sum(s.n_policy_tokens for s, _ in chosen)
            sequences_total = sum(s.n_policy_tokens > 0 for s, _ in chosen)
            if tokens_total == 0:
                continue
            optimizer.zero_grad(set_to_none=True)
            update: dict[str, float] = {}
            for micro in micro_batches(minibatch, lengths, optim.micro_batch_size):
                batch = collate([sequences[i] for i in micro], policy.pad_id)
                logp, entropy = policy.logprobs(batch, with_entropy=with_entropy)
                reference = _stack_tails([references[i] for i in micro], batch.tail) if with_kl else None
                loss, metrics = cwrpo_loss(
                    logp,
                    batch.behaviour_logprobs,
                    reference,
                    batch.advantages,
                    batch.target_mask,
                    clip_eps=loss_settings.clip_eps,
                    kl_beta=loss_settings.kl_beta,
                    entropy_coef=loss_settings.entropy_coef,
                    entropy=entropy,
                    normalisation=loss_settings.normalisation,
                )
                if loss_settings.normalisation == "token":
                    weight = metrics.n_tokens / tokens_total
                else:
                    weight = metrics.n_sequences / sequences_total
                (loss * weight).backward()
                _accumulate(update, metrics, weight)
                ratio_max = max(ratio_max, metrics.ratio_max)
            norm = torch.nn.utils.clip_grad_norm_(params, optim.grad_clip)
            if not math.isfinite(float(norm)):
                raise FloatingPointError(f"gradient norm is {float(norm)}: the update would corrupt the adapter")
            optimizer.step()
            grad_norms.append(float(norm))
            updates += 1
            for name, value in update.items():
                sums[name] = sums.get(name, 0.0) + value
    optimizer.zero_grad(set_to_none=True)
    policy.eval()
    out = {f"loss/{name}": value / updates for name, value in sums.items()} if updates else {}
    out.update(
        {
            "loss/ratio_max": ratio_max,
            "optim/grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else 0.0,
            "optim/grad_norm_max": max(grad_norms, default=0.0),
            "optim/updates": float(updates),
            "optim/sequences": float(len(sequences)),
            "optim/policy_tokens": float(sum(s.n_policy_tokens for s, _ in sequences)),
            "time/update_s": time.monotonic() - started,
        }
    )
    return out


def _accumulate(into: dict[str, float], metrics: LossMetrics, weight: float) -> None:
    for name in _WEIGHTED:
        value = getattr(metrics, name)
        if value is not None:
            into[name] = into.get(name, 0.0) + weight * float(value)
