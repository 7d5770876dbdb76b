"""Memory-efficient per-token log-probabilities and entropies (docs/design/training.md, "Objective").

A full `log_softmax(logits.float())` materialises a [tokens, vocab] fp32 tensor (and autograd keeps it for
backward): for a 150k vocabulary that is ~600 kB per token. Here log p(y) = logit[y] - logsumexp(logits) is
computed chunk by chunk over the sequence, and a custom backward recomputes the softmax per chunk from the
saved logits (in their own dtype) and the saved per-token logsumexp. Peak extra memory is one fp32 chunk.

Inputs are logits [B, T, V] (or [T, V]) in any float dtype; outputs are fp32 [B, T] (or [T]), fp64 for fp64 input.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

DEFAULT_CHUNK_SIZE = 512


def token_logprobs(logits: Tensor, target_ids: Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Tensor:
    """log softmax(logits)[..., target] per position, in fp32, without a full fp32 log-softmax."""
    logits3, squeeze = _as_batched(logits)
    targets = target_ids.unsqueeze(0) if squeeze else target_ids
    if tuple(targets.shape) != tuple(logits3.shape[:-1]):
        raise ValueError(f"target_ids shape {tuple(target_ids.shape)} does not match logits {tuple(logits.shape)}")
    if targets.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"target_ids must be an integer tensor, got {targets.dtype}")
    vocab = logits3.shape[-1]
    if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab):
        raise ValueError(f"target_ids must lie in [0, {vocab})")
    out = _ChunkedTokenLogprob.apply(logits3, targets.long(), _check_chunk(chunk_size))
    return out.squeeze(0) if squeeze else out


def token_entropy(logits: Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Tensor:
    """Entropy (nats) of softmax(logits) per position, in fp32, computed chunk by chunk."""
    logits3, squeeze = _as_batched(logits)
    out = _ChunkedEntropy.apply(logits3, _check_chunk(chunk_size))
    return out.squeeze(0) if squeeze else out


def causal_token_logprobs(logits: Tensor, input_ids: Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Tensor:
    """Log-probs aligned with `input_ids`: out[:, t] = log p(input_ids[:, t] | input_ids[:, :t]); out[:, 0] = 0.

    Aligning with the token positions (not the logit positions) lets a canvas mask, which marks the
    policy-sampled *tokens*, be applied directly, avoiding the classic off-by-one. Position 0 has no
    prediction, so its mask must be 0. `logits` are the causal LM's outputs for `input_ids` ([B, T, V]).
    """
    next_ids = torch.roll(input_ids, shifts=-1, dims=-1)  # last column is a dummy target, discarded below
    predicted = token_logprobs(logits, next_ids, chunk_size)
    return torch.cat([torch.zeros_like(predicted[..., :1]), predicted[..., :-1]], dim=-1)


def causal_token_entropy(logits: Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Tensor:
    """Entropy aligned with token positions like `causal_token_logprobs`: out[:, t] is the entropy of the
    distribution that sampled token t; out[:, 0] = 0."""
    entropy = token_entropy(logits, chunk_size)
    return torch.cat([torch.zeros_like(entropy[..., :1]), entropy[..., :-1]], dim=-1)


def _as_batched(logits: Tensor) -> tuple[Tensor, bool]:
    if not logits.is_floating_point():
        raise ValueError(f"logits must be a floating-point tensor, got {logits.dtype}")
    if logits.dim() == 2:
        return logits.unsqueeze(0), True
    if logits.dim() == 3:
        return logits, False
    raise ValueError(f"logits must be [T, V] or [B, T, V], got shape {tuple(logits.shape)}")


def _compute_dtype(logits: Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _check_chunk(chunk_size: int) -> int:
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return chunk_size


def _chunks(logits: Tensor, chunk_size: int) -> list[tuple[int, slice]]:
    """(batch index, sequence slice) pairs; slicing a [B, T, V] tensor this way never copies it."""
    length = logits.shape[1]
    return [
        (b, slice(start, min(start + chunk_size, length)))
        for b in range(logits.shape[0])
        for start in range(0, length, chunk_size)
    ]


class _ChunkedTokenLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, targets: Tensor, chunk_size: int) -> Tensor:
        batch, length, _ = logits.shape
        dtype = _compute_dtype(logits)
        out = torch.empty(batch, length, dtype=dtype, device=logits.device)
        lse = torch.empty_like(out)
        for b, span in _chunks(logits, chunk_size):
            chunk = logits[b, span].to(dtype)
            chunk_lse = torch.logsumexp(chunk, dim=-1)
            picked = chunk.gather(-1, targets[b, span].unsqueeze(-1)).squeeze(-1)
            out[b, span] = picked - chunk_lse
            lse[b, span] = chunk_lse
        ctx.save_for_backward(logits, targets, lse)
        ctx.chunk_size = chunk_size
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, None, None]:
        logits, targets, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        dtype = _compute_dtype(logits)
        for b, span in _chunks(logits, ctx.chunk_size):
            upstream = grad_out[b, span].to(dtype).unsqueeze(-1)
            probs = torch.exp(logits[b, span].to(dtype) - lse[b, span].unsqueeze(-1))
            chunk_grad = -probs * upstream  # d log p(y) / d logit_j = 1[j == y] - p_j
            chunk_grad.scatter_add_(-1, targets[b, span].unsqueeze(-1), upstream)
            grad[b, span] = chunk_grad.to(grad.dtype)
        return grad, None, None


class _ChunkedEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, chunk_size: int) -> Tensor:
        batch, length, _ = logits.shape
        dtype = _compute_dtype(logits)
        entropy = torch.empty(batch, length, dtype=dtype, device=logits.device)
        lse = torch.empty_like(entropy)
        for b, span in _chunks(logits, chunk_size):
            chunk = logits[b, span].to(dtype)
            chunk_lse = torch.logsumexp(chunk, dim=-1)
            probs = torch.exp(chunk - chunk_lse.unsqueeze(-1))
            # -sum p log p with 0 log 0 = 0, so -inf logits (banned tokens) do not produce NaN.
            entropy[b, span] = -torch.special.xlogy(probs, probs).sum(-1)
            lse[b, span] = chunk_lse
        ctx.save_for_backward(logits, lse, entropy)
        ctx.chunk_size = chunk_size
        return entropy

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, None]:
        logits, lse, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        dtype = _compute_dtype(logits)
        for b, span in _chunks(logits, ctx.chunk_size):
            log_probs = logits[b, span].to(dtype) - lse[b, span].unsqueeze(-1)
            probs = torch.exp(log_probs)
            # dH / d logit_j = -p_j (log p_j + H); zero where p_j == 0.
            chunk_grad = -probs * (log_probs + entropy[b, span].unsqueeze(-1))
            chunk_grad = torch.where(probs > 0, chunk_grad, torch.zeros_like(chunk_grad))
            grad[b, span] = (chunk_grad * grad_out[b, span].to(dtype).unsqueeze(-1)).to(grad.dtype)
        return grad, None
