"""AdamW over the LoRA parameters with linear warmup then cosine decay, stepped once per training step."""

from __future__ import annotations

import math

import torch

from training.train.config import OptimSettings


def lr_factor(step: int, *, total_steps: int, warmup_steps: int, min_ratio: float) -> float:
    """The multiplier of the base learning rate for training step `step` (0-based)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    parameters: list[torch.nn.Parameter], settings: OptimSettings, total_steps: int
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    optimizer = torch.optim.AdamW(
        parameters, lr=settings.lr, betas=settings.betas, eps=settings.adam_eps, weight_decay=settings.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(
            step, total_steps=total_steps, warmup_steps=settings.warmup_steps, min_ratio=settings.min_lr_ratio
        ),
    )
    return optimizer, scheduler
