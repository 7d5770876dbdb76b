"""One training step's policy update: `ppo_epochs` x `minibatches` optimizer updates over the batch's sequences.

Each minibatch is processed in micro-batches with gradient accumulation; every micro-batch's loss is weighted
by its share of the minibatch's policy tokens (token-mean) or sequences (sequence-mean), so the accumulated
gradient is exactly the gradient of the minibatch-wide loss whatever the micro-batch size. Reference
log-probs (adapter disabled) are computed once per step, before any update.

On N ranks (`training.train.distributed`) every rank holds the whole batch and draws the same minibatches; each
minibatch is sharded over the ranks by tokens, every rank weights its micro-batches by the *global* minibatch
counts, and the gradients are summed over the ranks before clipping: the update is the one-process update.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from training.loss import LossMetrics, cwrpo_loss
from training.rollout.samples import TurnSample
from training.train.batching import micro_batches, split_minibatches
from training.train.config import LossSettings, OptimSettings
from training.train.distributed import (
    SINGLE,
    Topology,
    all_reduce_gradients,
    all_reduce_max,
    all_reduce_sums,
    shard_by_tokens,
    to_float,
)
from training.train.policy import PolicyModel
from training.train.shared_prefix import PrefixGroup, group_by_prefix

_WEIGHTED = ("loss", "surrogate", "kl", "entropy", "ratio_mean", "clip_fraction", "approx_kl_behaviour")


def _reference_tails(
    policy: PolicyModel,
    sequences: Sequence[tuple[TurnSample, float]],
    groups: Sequence[PrefixGroup],
    lengths: list[int],
    size: int,
    at_least: int = 0,
) -> list[Tensor]:
    """Per sequence, the reference policy's log-probs of its completion tokens (tail-aligned, no grad); only for
    the `groups`' members (the others are left empty). `at_least` forwards are run, the extra ones on the first
    sequence and discarded (FSDP: every rank gathers the parameters as often as the others)."""
    tails: list[Tensor | None] = [None] * len(sequences)
    chunks = 0
    for group in groups:
        prefix = policy.reference_prefix(group.prefix_ids(sequences)) if group.length else None
        for chunk in micro_batches(group.members, [n - group.length for n in lengths], size):
            batch = policy.batch([sequences[i] for i in chunk], prefix)
            reference = policy.reference_logprobs(batch, prefix)
            chunks += 1
            for row, index in enumerate(chunk):
                n = len(sequences[index][0].completion_ids)
                tails[index] = reference[row, batch.tail - n :].clone()
    for _ in range(at_least - chunks):
        policy.reference_logprobs(policy.batch([sequences[0]]))
    return [t if t is not None else torch.zeros(0, device=policy.device) for t in tails]


def _most_chunks(
    plan: list[list[list[int]]], tokens: Sequence[int], lengths: Sequence[int], size: int, world: int
) -> int:
    """The most reference micro-batches any rank runs: each rank's are those of its shards' union."""
    owned: list[set[int]] = [set() for _ in range(world)]
    for epoch in plan:
        for minibatch in epoch:
            for rank, shard in enumerate(shard_by_tokens(minibatch, tokens, world)):
                owned[rank].update(shard)
    return max(len(micro_batches(sorted(indices), lengths, size)) for indices in owned)


def _stack_tails(tails: Sequence[Tensor], width: int, device: torch.device) -> Tensor:
    out = torch.zeros((len(tails), width), dtype=torch.float32, device=device)
    for row, tail in enumerate(tails):
        if tail.numel():
            out[row, width - tail.numel() :] = tail
    return out


@dataclass
class _Plan:
    """The step's sequences as the update walks them: every epoch's minibatches (drawn up front: the generator's
    draws are those of a loop drawing them one by one) and this rank's shard of each."""

    lengths: list[int]
    tokens: list[int]
    minibatches: list[list[list[int]]]
    shards: list[list[list[int]]]
    sharded: bool  # FSDP over several ranks: every rank runs as many forwards and backwards as the others
    share_prefixes: bool  # a group's common prompt prefix runs once (`shared_prefix`)

    @classmethod
    def draw(
        cls,
        policy: PolicyModel,
        sequences: Sequence[tuple[TurnSample, float]],
        optim: OptimSettings,
        generator: torch.Generator,
        topology: Topology,
    ) -> _Plan:
        tokens = [s.n_policy_tokens for s, _ in sequences]
        plan = [split_minibatches(len(sequences), optim.minibatches, generator) for _ in range(optim.ppo_epochs)]
        shards = [[shard_by_tokens(mb, tokens, topology.world)[topology.rank] for mb in epoch] for epoch in plan]
        sharded = policy.sharded and topology.distributed
        return cls(
            lengths=[len(s.prompt_ids) + len(s.completion_ids) for s, _ in sequences],
            tokens=tokens,
            minibatches=plan,
            shards=shards,
            sharded=sharded,
            # FSDP's ranks must run equal numbers of forwards, which the plain micro-batches guarantee
            share_prefixes=optim.share_prefixes and policy.can_share_prefixes and not sharded,
        )

    def groups(self, sequences: Sequence[tuple[TurnSample, float]], indices: list[int]) -> list[PrefixGroup]:
        return group_by_prefix(sequences, indices, share=self.share_prefixes)

    @property
    def needed(self) -> list[int]:
        """The sequences this rank's shards cover: its reference log-probs are computed for exactly these."""
        return sorted({i for epoch in self.shards for shard in epoch for i in shard})


@dataclass
class _Totals:
    """What the step's updates add up to, for its metrics."""

    sums: dict[str, float] = field(default_factory=dict)
    grad_norms: list[float] = field(default_factory=list)
    ratio_max: float = 0.0
    updates: int = 0


def policy_update(
    policy: PolicyModel,
    optimizer: torch.optim.Optimizer,
    sequences: Sequence[tuple[TurnSample, float]],
    optim: OptimSettings,
    loss_settings: LossSettings,
    generator: torch.Generator,
    topology: Topology = SINGLE,
) -> dict[str, float]:
    """Run the step's optimizer updates; returns step metrics (means over updates, `loss/ratio_max` the max).

    On several ranks every rank must call it with the same `sequences` and generator state (see the module
    docstring); the metrics returned are the global ones, on every rank."""
    started = time.monotonic()
    if not sequences:
        return {"optim/updates": 0.0, "optim/sequences": 0.0, "optim/policy_tokens": 0.0, "time/update_s": 0.0}
    plan = _Plan.draw(policy, sequences, optim, generator, topology)
    policy.eval()  # reference log-probs without dropout
    references: list[Tensor] = []
    if loss_settings.kl_beta > 0:
        at_least = _most_chunks(plan.minibatches, plan.tokens, plan.lengths, optim.micro_batch_size, topology.world)
        references = _reference_tails(
            policy,
            sequences,
            plan.groups(sequences, plan.needed),
            plan.lengths,
            optim.micro_batch_size,
            at_least if plan.sharded else 0,
        )
    policy.train()
    totals = _Totals()
    for epoch, epoch_shards in zip(plan.minibatches, plan.shards, strict=True):
        for minibatch, shard in zip(epoch, epoch_shards, strict=True):
            _minibatch_update(
                policy, optimizer, sequences, minibatch, shard, plan, references, optim, loss_settings, topology, totals
            )
    optimizer.zero_grad(set_to_none=True)
    policy.eval()
    if topology.distributed:
        totals.ratio_max = all_reduce_max(totals.ratio_max)
    return _step_metrics(totals, sequences, topology, time.monotonic() - started)


def _minibatch_update(
    policy: PolicyModel,
    optimizer: torch.optim.Optimizer,
    sequences: Sequence[tuple[TurnSample, float]],
    minibatch: list[int],
    shard: list[int],
    plan: _Plan,
    references: list[Tensor],
    optim: OptimSettings,
    loss_settings: LossSettings,
    topology: Topology,
    totals: _Totals,
) -> None:
    """One optimizer update: this rank's shard of the minibatch in micro-batches, each loss a share of the whole
    minibatch's mean (the global counts), gradients summed over the ranks, clipped, stepped."""
    tokens_total = sum(plan.tokens[i] for i in minibatch)
    sequences_total = sum(plan.tokens[i] > 0 for i in minibatch)
    if tokens_total == 0:
        return
    optimizer.zero_grad(set_to_none=True)
    update: dict[str, float] = {}
    with_entropy = loss_settings.entropy_coef > 0
    if plan.sharded:  # zero-weight micro-batches so every rank runs the same number of forwards/backwards
        micros = micro_batches(shard, plan.lengths, optim.micro_batch_size)
        most = max(
            len(micro_batches(other, plan.lengths, optim.micro_batch_size))
            for other in shard_by_tokens(minibatch, plan.tokens, topology.world)
        )
        for _ in range(most - len(micros)):
            batch = policy.batch([sequences[minibatch[0]]])
            logp, entropy = policy.logprobs(batch, with_entropy=with_entropy)
            (logp.sum() * 0.0 + (entropy.sum() * 0.0 if entropy is not None else 0.0)).backward()
    for group in plan.groups(sequences, shard):
        prefix = policy.prefix(group.prefix_ids(sequences)) if group.length else None
        suffix_lengths = [n - group.length for n in plan.lengths]
        for micro in micro_batches(group.members, suffix_lengths, optim.micro_batch_size):
            batch = policy.batch([sequences[i] for i in micro], prefix)
            logp, entropy = policy.logprobs(batch, with_entropy=with_entropy, prefix=prefix)
            reference = _stack_tails([references[i] for i in micro], batch.tail, policy.device) if references else None
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
            # FSDP reduce-scatters the mean of the ranks' gradients: scaled by the ranks, it is their sum.
            (loss * (weight * topology.world if plan.sharded else weight)).backward()
            _accumulate(update, metrics, weight)
            totals.ratio_max = max(totals.ratio_max, metrics.ratio_max)
        if prefix is not None:
            prefix.backward()
    params = policy.trainable_parameters()
    if topology.distributed:
        if not plan.sharded:
            all_reduce_gradients(params)  # SUM: each rank's share is already weighted by the global counts
        update = all_reduce_sums(update, _WEIGHTED)
    norm = to_float(torch.nn.utils.clip_grad_norm_(params, optim.grad_clip))
    if not math.isfinite(norm):
        raise FloatingPointError(f"gradient norm is {norm}: the update would corrupt the adapter")
    optimizer.step()
    totals.grad_norms.append(norm)
    totals.updates += 1
    for name, value in update.items():
        totals.sums[name] = totals.sums.get(name, 0.0) + value


def _step_metrics(
    totals: _Totals, sequences: Sequence[tuple[TurnSample, float]], topology: Topology, wall_s: float
) -> dict[str, float]:
    out = {f"loss/{name}": value / totals.updates for name, value in totals.sums.items()} if totals.updates else {}
    out.update(
        {
            "loss/ratio_max": totals.ratio_max,
            "optim/grad_norm": sum(totals.grad_norms) / len(totals.grad_norms) if totals.grad_norms else 0.0,
            "optim/grad_norm_max": max(totals.grad_norms, default=0.0),
            "optim/updates": float(totals.updates),
            "optim/sequences": float(len(sequences)),
            "optim/policy_tokens": float(sum(s.n_policy_tokens for s, _ in sequences)),
            "time/update_s": wall_s,
        }
    )
    if topology.distributed:
        out["dist/ranks"] = float(topology.world)
    return out


def _accumulate(into: dict[str, float], metrics: LossMetrics, weight: float) -> None:
    for name in _WEIGHTED:
        value = getattr(metrics, name)
        if value is not None:
            into[name] = into.get(name, 0.0) + weight * float(value)
