"""Group-relative advantages (docs/design/training.md, "Groups").

True GRPO: each problem's G rollouts form a group and A_i = (R_i - mean_group) / (std_group + eps). The group
id is whatever the caller passes, so the reference's cross-problem baseline (`grouping: source`) needs no
special code here: pass each trajectory's *source* (dataset) name as its group id instead of its problem id.

A group whose rewards are all equal carries no learning signal: its advantages are exactly 0. Such groups
are counted (the share is a key health metric) and can be dropped via the returned `keep` mask.
The standard deviation is the population one (ddof 0), as in the z-score over a fixed group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

AdvantageScale = Literal["std", "none"]
# How a turn the canvas refused shares its trajectory's advantage (docs/design/training.md, "Groups").
RefusedTurns = Literal["share", "never_reinforce"]


def turn_advantage(advantage: float, *, refused: bool, rule: RefusedTurns) -> float:
    """The advantage one turn trains with. A refused action changed nothing on the canvas, so a trajectory's good
    outcome is not its doing and `never_reinforce` gives it at most 0; a bad outcome may be (it spent a round of
    the budget), so a negative advantage stays."""
    return min(advantage, 0.0) if refused and rule == "never_reinforce" else advantage


# Rewards closer than this are treated as equal: such a spread is float noise, not signal, and dividing it
# by a tiny std would blow it up to |A| ~ 1 (the reference's std floor of 0.01 does exactly that).
ZERO_VARIANCE_SPREAD = 1e-9


class AdvantageStats(BaseModel):
    """What happened to one batch of rewards, for logging and for filtering samples."""

    model_config = ConfigDict(frozen=True)

    n_samples: int
    n_groups: int
    n_zero_variance_groups: int
    zero_variance_share: float  # fraction of groups with no reward spread
    keep: list[bool]  # per sample; False only for zero-variance groups when dropping was requested
    n_dropped: int
    reward_mean: float
    reward_std: float
    mean_group_std: float


def group_advantages(
    rewards: Sequence[float],
    group_ids: Sequence[str],
    eps: float = 1e-6,
    scale: AdvantageScale = "std",
    *,
    drop_zero_variance: bool = False,
) -> tuple[list[float], AdvantageStats]:
    """Advantages of each sample relative to its group.

    scale="std" divides the centred reward by (group std + eps); scale="none" only centres it (no
    per-group rescaling, which keeps easy and hard groups on the reward's own scale).
    Raises `ValueError` on mismatched lengths, an empty batch, non-finite rewards or a negative eps.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"got {len(rewards)} rewards but {len(group_ids)} group ids")
    if not rewards:
        raise ValueError("no rewards: a batch needs at least one trajectory")
    if not all(math.isfinite(r) for r in rewards):
        raise ValueError("rewards must be finite numbers")
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")

    members: dict[str, list[int]] = {}
    for index, group in enumerate(group_ids):
        members.setdefault(group, []).append(index)

    advantages = [0.0] * len(rewards)
    keep = [True] * len(rewards)
    zero_variance = 0
    group_stds: list[float] = []
    for indices in members.values():
        values = [float(rewards[i]) for i in indices]
        mean, std = _mean_std(values)
        group_stds.append(std)
        if max(values) - min(values) <= ZERO_VARIANCE_SPREAD:
            zero_variance += 1
            if drop_zero_variance:
                for i in indices:
                    keep[i] = False
            continue  # advantages stay exactly 0
        denominator = std + eps if scale == "std" else 1.0  # std > 0 here, so never zero
        for i, value in zip(indices, values, strict=True):
            advantages[i] = (value - mean) / denominator

    batch_mean, batch_std = _mean_std([float(r) for r in rewards])
    stats = AdvantageStats(
        n_samples=len(rewards),
        n_groups=len(members),
        n_zero_variance_groups=zero_variance,
        zero_variance_share=zero_variance / len(members),
        keep=keep,
        n_dropped=keep.count(False),
        reward_mean=batch_mean,
        reward_std=batch_std,
        mean_group_std=math.fsum(group_stds) / len(group_stds),
    )
    return advantages, stats


def _mean_std(values: list[float]) -> tuple[float, float]:
    mean = math.fsum(values) / len(values)
    variance = math.fsum((v - mean) ** 2 for v in values) / len(values)
    return mean, math.sqrt(variance)
