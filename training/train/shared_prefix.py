"""One forward for the tokens that a step's sequences of one group open with.

Why: every turn of every rollout on a problem starts with the same system prompt and task. On the Qwen director's
runs that is about five sixths of each sequence, so the learner spent most of its update recomputing it. Here the
group's common prefix runs once; each sequence's remaining tokens (its suffix) run on top of the prefix's keys
and values, and the loss reads only the suffixes' tails.

The gradient stays exact. The suffix forwards read *detached* copies of the prefix's keys and values (`leaves`),
so each suffix backward stops there and leaves the gradient with respect to them in `leaf.grad` (summed over
every suffix). `SharedPrefix.backward` then pushes those sums through the prefix forward once. By the chain rule
this is the gradient of running each sequence whole, and the tests compare the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from training.rollout.samples import TurnSample
from training.train.batching import TokenBatch, collate

# Sharing pays for its bookkeeping only when the common prefix is long: shorter ones run inside each sequence.
MIN_SHARED_TOKENS = 16


@dataclass(frozen=True)
class PrefixGroup:
    """Sequence indices whose prompts open with the same `length` tokens (0: nothing shared, run them whole)."""

    length: int
    members: list[int]

    def prefix_ids(self, sequences: Sequence[tuple[TurnSample, float]]) -> list[int]:
        return sequences[self.members[0]][0].prompt_ids[: self.length]


def _common_length(first: Sequence[int], second: Sequence[int]) -> int:
    n = min(len(first), len(second))
    for i in range(n):
        if first[i] != second[i]:
            return i
    return n


def group_by_prefix(
    sequences: Sequence[tuple[TurnSample, float]],
    indices: Sequence[int],
    min_length: int = MIN_SHARED_TOKENS,
    *,
    share: bool = True,
) -> list[PrefixGroup]:
    """`indices` grouped by their sequences' `group_id` (a problem's rollouts), each group with its prompts' common
    prefix. The prefix always leaves at least one prompt token to each sequence: that token's logits score the
    first completion token. Groups of one, or whose prefix is shorter than `min_length`, share nothing; without
    `share`, all `indices` form one group that shares nothing."""
    if not share:
        return [PrefixGroup(0, list(indices))]
    by_group: dict[str, list[int]] = {}
    for index in indices:
        by_group.setdefault(sequences[index][0].group_id, []).append(index)
    groups = []
    for members in by_group.values():
        prompts = [sequences[i][0].prompt_ids for i in members]
        length = min(len(p) for p in prompts) - 1
        for prompt in prompts[1:]:
            length = min(length, _common_length(prompts[0], prompt))
        shared = length if len(members) > 1 and length >= min_length else 0
        groups.append(PrefixGroup(shared, members))
    return groups


@dataclass
class SharedPrefix:
    """The prefix's per-layer keys and values, computed once, for the suffix forwards to attend to."""

    length: int
    roots: list[Tensor]  # the prefix forward's keys and values, in its autograd graph (empty without one)
    leaves: list[Tensor]  # what the suffixes read: detached copies that collect the suffixes' gradients

    @classmethod
    def run(cls, model: torch.nn.Module, prefix_ids: Sequence[int], device: torch.device) -> SharedPrefix:
        """Forward the prefix (with autograd when it is enabled) and keep its keys and values."""
        ids = torch.tensor([list(prefix_ids)], dtype=torch.long, device=device)
        cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
        roots = [tensor for layer in cache.layers for tensor in (layer.keys, layer.values)]
        if not torch.is_grad_enabled():
            return cls(len(prefix_ids), [], roots)
        leaves = [root.detach().requires_grad_(True) for root in roots]
        return cls(len(prefix_ids), roots, leaves)

    def cache(self, rows: int) -> object:
        """A fresh cache holding the prefix once per row (a view: the suffix forward appends to copies)."""
        from transformers import DynamicCache

        pairs = [
            (self.leaves[i].expand(rows, -1, -1, -1), self.leaves[i + 1].expand(rows, -1, -1, -1))
            for i in range(0, len(self.leaves), 2)
        ]
        return DynamicCache(ddp_cache_data=pairs)

    def batch(self, samples: Sequence[tuple[TurnSample, float]], pad_id: int) -> TokenBatch:
        """The samples' suffixes, left-padded as `collate` does, with the attention mask and positions that
        continue the prefix (the padding sits between prefix and suffix, masked out)."""
        suffixes = [
            (sample.model_copy(update={"prompt_ids": sample.prompt_ids[self.length :]}), a) for sample, a in samples
        ]
        batch = collate(suffixes, pad_id)
        prefix_mask = torch.ones((len(samples), self.length), dtype=batch.attention_mask.dtype)
        return replace(
            batch,
            attention_mask=torch.cat([prefix_mask, batch.attention_mask], dim=1),
            position_ids=batch.position_ids + self.length,
        )

    def backward(self) -> None:
        """Push the gradient the suffixes left on the leaves through the prefix forward, once."""
        pairs = [(root, leaf.grad) for root, leaf in zip(self.roots, self.leaves, strict=True) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([root for root, _ in pairs], grad_tensors=[grad for _, grad in pairs])
        self.roots, self.leaves = [], []
