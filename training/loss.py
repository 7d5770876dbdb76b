"""The CWRPO objective (docs/design/training.md, "Objective"): a clipped, KL- and entropy-regularised GRPO loss over the
policy-sampled tokens only.

Per token t of sequence i with canvas mask M (1 exactly on tokens the policy sampled):

    r     = exp(logp_new - logp_behaviour)                      behaviour = the vLLM sampler's log-probs
    surr  = min(r * A_i, clip(r, 1 - eps, 1 + eps) * A_i)
    KL_k3 = exp(logp_ref - logp_new) - (logp_ref - logp_new) - 1    ref = base model (adapter disabled)
    L     = -mean_M(surr) + beta * mean_M(KL_k3) - c_H * mean_M(H)

mean_M is either the mean over every masked token of the batch (`token`) or the mean over sequences of each
sequence's masked-token mean (`sequence`, the reference code's per-trajectory normalisation).

Gradients flow through `logp_new` (and `entropy`, which is the current policy's) only: behaviour and reference
log-probs and advantages are treated as constants. Unmasked positions are replaced by zeros *before* any
arithmetic, so whatever they hold (padding, -inf, NaN) changes neither the loss nor any gradient.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict
from torch import Tensor

Normalisation = Literal["token", "sequence"]


class LossMetrics(BaseModel):
    """Diagnostics of one loss evaluation (plain floats, ready for logging). Means use the loss's
    normalisation, so loss == -surrogate + kl_beta * kl - entropy_coef * entropy."""

    model_config = ConfigDict(frozen=True)

    loss: float
    surrogate: float
    kl: float  # k3 estimate of KL(pi_theta || pi_ref)
    entropy: float | None  # None when no entropy was given (the entropy term is then absent)
    ratio_mean: float
    ratio_max: float
    clip_fraction: float  # share of tokens whose clipped branch is active (zero gradient)
    approx_kl_behaviour: float  # k3 estimate of KL(pi_behaviour || pi_theta): the off-policy drift
    n_tokens: int
    n_sequences: int  # sequences with at least one masked token


def masked_mean(values: Tensor, mask: Tensor, normalisation: Normalisation = "token") -> Tensor:
    """Mean of `values` [B, T] over positions where `mask` is true; 0 when nothing is masked.

    `values` must already be zero wherever the mask is false (see `cwrpo_loss`).
    """
    weights = mask.to(values.dtype)
    if normalisation == "token":
        return (values * weights).sum() / weights.sum().clamp(min=1.0)
    if normalisation == "sequence":
        per_sequence = (values * weights).sum(-1) / weights.sum(-1).clamp(min=1.0)
        has_tokens = (weights.sum(-1) > 0).to(values.dtype)
        return (per_sequence * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    raise ValueError(f"normalisation must be 'token' or 'sequence', got {normalisation!r}")


def cwrpo_loss(
    logp_new: Tensor,
    logp_behaviour: Tensor,
    logp_ref: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_eps: float = 0.2,
    kl_beta: float = 0.005,
    entropy_coef: float = 0.005,
    entropy: Tensor | None = None,
    normalisation: Normalisation = "token",
) -> tuple[Tensor, LossMetrics]:
    """The CWRPO loss for a batch of sequences.

    Shapes: log-probs, mask and entropy [B, T] aligned with each other; advantages [B] (one per sequence) or
    [B, T]. `logp_ref` may be None only when `kl_beta` is 0. The entropy term applies only when `entropy`
    is given. Raises `ValueError` on inconsistent shapes, a non-binary mask, bad coefficients, or non-finite
    behaviour/reference log-probs or advantages at masked positions.
    """
    _check_arguments(logp_new, logp_behaviour, logp_ref, advantages, mask, entropy, clip_eps, kl_beta, entropy_coef)
    if normalisation not in ("token", "sequence"):
        raise ValueError(f"normalisation must be 'token' or 'sequence', got {normalisation!r}")
    keep = mask.bool()
    dtype = torch.promote_types(logp_new.dtype, torch.float32)
    adv = advantages.detach().to(dtype)
    adv = adv.unsqueeze(-1).expand_as(logp_new) if adv.dim() == 1 else adv

    def masked(values: Tensor) -> Tensor:
        return torch.where(keep, values.to(dtype), torch.zeros((), dtype=dtype, device=values.device))

    new = masked(logp_new)
    behaviour = masked(logp_behaviour.detach())
    adv = masked(adv)
    _require_finite(behaviour, "logp_behaviour")
    _require_finite(adv, "advantages")

    log_ratio = new - behaviour
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = torch.minimum(ratio * adv, clipped_ratio * adv)

    def mean(values: Tensor) -> Tensor:
        return masked_mean(values, keep, normalisation)

    surrogate_mean = mean(surrogate)
    loss = -surrogate_mean
    kl_mean = torch.zeros((), dtype=dtype, device=new.device)
    if logp_ref is not None:
        reference = masked(logp_ref.detach())
        _require_finite(reference, "logp_ref")
        delta = reference - new
        kl_mean = mean(torch.exp(delta) - delta - 1.0)
        loss = loss + kl_beta * kl_mean
    entropy_mean: Tensor | None = None
    if entropy is not None:
        entropy_mean = mean(masked(entropy))
        loss = loss - entropy_coef * entropy_mean

    with torch.no_grad():
        high = (ratio > 1.0 + clip_eps) & (adv > 0)
        low = (ratio < 1.0 - clip_eps) & (adv < 0)
        clip_active = ((high | low) & keep).to(dtype)
        drift = (ratio - 1.0) - log_ratio
        n_tokens = int(keep.sum())
        metrics = LossMetrics(
            loss=float(loss.detach()),
            surrogate=float(surrogate_mean.detach()),
            kl=float(kl_mean.detach()),
            entropy=None if entropy_mean is None else float(entropy_mean.detach()),
            ratio_mean=float(mean(masked(ratio))),
            ratio_max=float(ratio[keep].max()) if n_tokens else 0.0,
            clip_fraction=float(mean(clip_active)),
            approx_kl_behaviour=float(mean(masked(drift))),
            n_tokens=n_tokens,
            n_sequences=int(keep.any(dim=-1).sum()),
        )
    return loss, metrics


def _check_arguments(
    logp_new: Tensor,
    logp_behaviour: Tensor,
    logp_ref: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    entropy: Tensor | None,
    clip_eps: float,
    kl_beta: float,
    entropy_coef: float,
) -> None:
    if logp_new.dim() != 2:
        raise ValueError(f"logp_new must be [B, T], got shape {tuple(logp_new.shape)}")
    shape = tuple(logp_new.shape)
    named = {"logp_behaviour": logp_behaviour, "mask": mask, "logp_ref": logp_ref, "entropy": entropy}
    for name, tensor in named.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {shape} like logp_new")
    if tuple(advantages.shape) not in (shape[:1], shape):
        raise ValueError(f"advantages must be [B] or [B, T] = {shape}, got {tuple(advantages.shape)}")
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must be boolean or contain only 0 and 1")
    if not 0.0 < clip_eps < 1.0:
        raise ValueError(f"clip_eps must be in (0, 1), got {clip_eps}")
    if kl_beta < 0.0 or entropy_coef < 0.0:
        raise ValueError(f"kl_beta and entropy_coef must be >= 0, got {kl_beta} and {entropy_coef}")
    if logp_ref is None and kl_beta > 0.0:
        raise ValueError("logp_ref is required when kl_beta > 0 (compute it with the LoRA adapter disabled)")


def _require_finite(values: Tensor, name: str) -> None:
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{name} has non-finite values at masked (policy) positions")
