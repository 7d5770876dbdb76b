"""Training sequences as tensors: left-padded so that every completion ends at the last column.

With the policy tokens at the right edge, the model only has to produce logits for the last
`max completion length + 1` positions (`logits_to_keep`), instead of a [B, T, vocab] tensor over long
system prompts that the loss never reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from training.rollout.samples import TurnSample


@dataclass(frozen=True)
class TokenBatch:
    """A left-padded batch. `target_*` tensors cover the scored tail: the last `tail` tokens of each row."""

    input_ids: Tensor  # [B, T]
    attention_mask: Tensor  # [B, T]
    position_ids: Tensor  # [B, T], 0 at each row's first real token
    tail: int  # tokens scored per row: logits_to_keep = tail + 1
    target_mask: Tensor  # [B, tail] bool: the canvas mask (1 exactly on policy-sampled tokens)
    behaviour_logprobs: Tensor  # [B, tail] float32
    advantages: Tensor  # [B] float32

    def to(self, device: torch.device) -> TokenBatch:
        """The same batch on `device` (itself when already there)."""
        if self.input_ids.device == device:
            return self
        return replace(
            self,
            **{name: getattr(self, name).to(device) for name in _TENSORS},
        )

    @property
    def target_ids(self) -> Tensor:
        return self.input_ids[:, -self.tail :]

    @property
    def n_policy_tokens(self) -> int:
        return int(self.target_mask.sum())


_TENSORS = ("input_ids", "attention_mask", "position_ids", "target_mask", "behaviour_logprobs", "advantages")


def collate(samples: Sequence[tuple[TurnSample, float]], pad_id: int) -> TokenBatch:
    """Left-pad (sequence, advantage) pairs into one batch."""
    if not samples:
        raise ValueError("cannot collate an empty batch")
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s, _ in samples)
    tail = max(max(len(s.completion_ids) for s, _ in samples), 1)
    rows = len(samples)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, tail), dtype=torch.bool)
    behaviour = torch.zeros((rows, tail), dtype=torch.float32)
    for row, (sample, _) in enumerate(samples):
        ids = sample.input_ids
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention[row, width - len(ids) :] = 1
        n = len(sample.completion_ids)
        if n:
            mask[row, tail - n :] = torch.tensor(sample.completion_mask, dtype=torch.bool)
            behaviour[row, tail - n :] = torch.tensor(sample.behaviour_logprobs, dtype=torch.float32)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    advantages = torch.tensor([advantage for _, advantage in samples], dtype=torch.float32)
    return TokenBatch(input_ids, attention, positions, tail, mask, behaviour, advantages)


def split_minibatches(n_items: int, n_minibatches: int, generator: torch.Generator) -> list[list[int]]:
    """A random partition of range(n_items) into `n_minibatches` near-equal parts (fewer if items are few)."""
    order = torch.randperm(n_items, generator=generator).tolist()
    parts = min(n_minibatches, n_items)
    return [order[i::parts] for i in range(parts)] if parts else []


def micro_batches(indices: Sequence[int], lengths: Sequence[int], size: int) -> list[list[int]]:
    """Chunks of at most `size` indices, grouped by length so that little padding is computed."""
    ordered = sorted(indices, key=lambda i: lengths[i])
    return [ordered[start : start + size] for start in range(0, len(ordered), size)]
