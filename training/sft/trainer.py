"""`flowsteer train sft`: LoRA supervised fine-tuning of the policy on transcripts, the warm start of CWRPO.

It reuses the CWRPO learner: the same `PolicyModel` (LoRA on the base model, dropout off), the same batching
(left-padded rows, only the completion tail scored, the canvas mask on the completion), the same chunked
log-probs, optimizer schedule and atomic checkpoints. The loss is the token-mean negative log-likelihood of
the action tokens of the batch. It is a verb of its own, not a phase of the CWRPO loop, because it needs
neither vLLM, nor an executor, nor the canvas, and its output is reused by many CWRPO runs: one warm start,
then `flowsteer train --set policy.model=<out_dir>/merged` (or the adapter, once the CWRPO loop can start from
one).

The run folder (`sft.out_dir`) holds `metrics.jsonl` (loss per step), `checkpoints/` (`--resume`), the final
`adapter/` (peft format, what vLLM loads), `merged/` when `export_merged` is set, `valid_share.json` and
`heldout.jsonl` (every held-out turn with what the policy wrote and whether the canvas parser accepted it).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import structlog
import torch
from pydantic import BaseModel
from torch import Tensor

from training.rollout.samples import TurnSample
from training.sft.dataset import SftDataset, SftExample, load_transcripts
from training.sft.valid_share import (
    default_rules,
    expected_text,
    held_out_valid_share,
    is_same_action,
    is_valid_turn,
)
from training.train.batching import micro_batches
from training.train.checkpoint import (
    CheckpointError,
    CheckpointState,
    load_latest,
    now_iso,
    prepare_run_folder,
    save_checkpoint,
)
from training.train.config import OptimSettings, SftSettings, TrainConfig, TrainConfigError
from training.train.distributed import SINGLE, learner_device
from training.train.metrics import MetricsLog
from training.train.optim import build_optimizer
from training.train.policy import PolicyModel
from training.train.stream import StreamCursor

log = structlog.get_logger(__name__)

ADAPTER_DIR = "adapter"
MERGED_DIR = "merged"


class SftSummary(BaseModel):
    out_dir: str
    first_step: int
    last_step: int
    final_loss: float | None
    heldout_loss: float | None
    valid_share: float | None
    valid_action_share: float | None
    same_action_share: float | None = None  # held-out action turns that take the transcript's own action
    adapter: str
    merged: str | None
    wall_s: float


def sft_settings(config: TrainConfig) -> SftSettings:
    if config.sft is None:
        raise TrainConfigError("the config has no `sft:` section (sft.data: the transcript files to fine-tune on)")
    return config.sft


def sft_fingerprint(config: TrainConfig) -> str:
    """What shapes a warm start: the policy, the seed and the sft section. Like `run.steps` for CWRPO, the length
    (`steps`, `epochs`) may grow between a run and its resume; the output folder and checkpointing may change."""
    data = {
        "policy": config.policy.model_dump(mode="json", exclude={"device"}),  # hardware, not the run
        "seed": config.run.seed,
        "sft": sft_settings(config).model_dump(
            mode="json", exclude={"out_dir", "steps", "epochs", "checkpoint_every", "keep_checkpoints"}
        ),
        "chunk": config.optim.logprob_chunk,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def total_steps(settings: SftSettings, n_train: int) -> int:
    return settings.steps or max(1, math.ceil(settings.epochs * n_train / settings.batch_size))


def next_batch(dataset: SftDataset, cursor: StreamCursor, *, seed: int, size: int) -> tuple[list[int], StreamCursor]:
    """The next `size` draws of the weighted order; a (pass, position) cursor is the whole state."""
    epoch, position = cursor.epoch, cursor.position
    order = dataset.order(seed, epoch)
    batch: list[int] = []
    while len(batch) < size:
        if position >= len(order):
            epoch, position = epoch + 1, 0
            order = dataset.order(seed, epoch)
        batch.append(order[position])
        position += 1
    return batch, StreamCursor(epoch=epoch, position=position)


def _micro_batch_nll(policy: PolicyModel, samples: Sequence[TurnSample], size: int) -> Iterator[tuple[Tensor, int]]:
    """Per micro-batch (rows of similar length): the summed NLL of its completion tokens and their count."""
    for chunk in micro_batches(range(len(samples)), [len(s.input_ids) for s in samples], size):
        batch = policy.batch([(samples[i], 0.0) for i in chunk])
        logp, _ = policy.logprobs(batch, with_entropy=False)
        yield -(logp * batch.target_mask).sum(), batch.n_policy_tokens


def nll_backward(policy: PolicyModel, examples: Sequence[SftExample], micro_batch_size: int) -> tuple[float, int]:
    """Accumulate the gradient of the batch's token-mean NLL over the completion tokens; returns (loss, tokens).

    Each micro-batch's summed NLL is divided by the whole batch's token count, so the accumulated gradient is
    the batch-wide token mean's gradient however the batch is split."""
    samples = [ex.turn_sample() for ex in examples]
    n_tokens = max(sum(s.n_policy_tokens for s in samples), 1)
    total = 0.0
    for summed, _ in _micro_batch_nll(policy, samples, micro_batch_size):
        (summed / n_tokens).backward()
        total += float(summed.detach())
    return total / n_tokens, n_tokens


@torch.no_grad()
def mean_nll(policy: PolicyModel, examples: Sequence[SftExample], micro_batch_size: int) -> float | None:
    """Token-mean NLL of the completions, no gradient (the held-out loss)."""
    if not examples:
        return None
    parts = list(_micro_batch_nll(policy, [ex.turn_sample() for ex in examples], micro_batch_size))
    return sum(float(summed) for summed, _ in parts) / max(sum(tokens for _, tokens in parts), 1)


class SftRun:
    def __init__(self, config: TrainConfig, *, resume: bool = False) -> None:
        self.config = config
        self.settings = sft_settings(config)
        self.resume = resume
        self.out_dir = Path(self.settings.out_dir)
        self.checkpoints = self.out_dir / "checkpoints"

    def _prepare_out_dir(self) -> None:
        prepare_run_folder(
            self.out_dir,
            self.config.model_dump(mode="json"),
            resume=self.resume,
            refusal="already holds checkpoints of a warm start: pass --resume to continue it, or set sft.out_dir "
            "to a new folder",
            leftover_files=("metrics.jsonl",),
        )

    def run(self) -> SftSummary:
        from transformers import AutoTokenizer

        from training.train.loop import resolve_policy_model

        started = time.monotonic()
        config, settings = self.config, self.settings
        self._prepare_out_dir()
        random.seed(config.run.seed)
        torch.manual_seed(config.run.seed)
        model_dir = resolve_policy_model(config.policy.model)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        dataset = SftDataset(
            load_transcripts(settings.data),
            tokenizer,
            mix=settings.mix,
            held_out_fraction=settings.held_out_fraction,
            max_seq_len=settings.max_seq_len,
            seed=config.run.seed,
            enable_thinking=config.rollout.sampling.enable_thinking,
        )
        steps = total_steps(settings, len(dataset.train))
        restored = load_latest(self.checkpoints, fingerprint=sft_fingerprint(config)) if self.resume else None
        policy = PolicyModel.for_config(
            model_dir,
            config,
            adapter_dir=restored.adapter_dir if restored else None,
            device=learner_device(config.policy.device, SINGLE),
        )
        optim = OptimSettings(
            lr=settings.lr,
            warmup_steps=settings.warmup_steps if settings.warmup_steps < steps else 0,
            min_lr_ratio=settings.min_lr_ratio,
            grad_clip=settings.grad_clip,
        )
        optimizer, scheduler = build_optimizer(policy.trainable_parameters(), optim, steps)
        cursor, done = StreamCursor(), 0
        if restored is not None:
            optimizer.load_state_dict(restored.trainer["optimizer"])
            scheduler.load_state_dict(restored.trainer["scheduler"])
            cursor, done = restored.state.cursor, restored.state.step
        if done >= steps:
            raise CheckpointError(f"the warm start's checkpoint is at step {done}, its last; nothing to resume")

        policy.train()
        loss = None
        with MetricsLog(self.out_dir, tensorboard=config.logging.tensorboard) as metrics:
            if restored is not None:
                metrics.truncate_after(done)
            for step in range(done + 1, steps + 1):
                indices, cursor = next_batch(dataset, cursor, seed=config.run.seed, size=settings.batch_size)
                optimizer.zero_grad(set_to_none=True)
                loss, tokens = nll_backward(policy, [dataset.train[i] for i in indices], settings.micro_batch_size)
                grad_norm = torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), settings.grad_clip)
                lr = optimizer.param_groups[0]["lr"]
                optimizer.step()
                scheduler.step()
                shares = {f"mix/{family}": share for family, share in dataset.family_shares(indices).items()}
                metrics.write(
                    step,
                    {"sft/loss": loss, "sft/tokens": float(tokens), "optim/lr": lr, "optim/grad_norm": float(grad_norm)}
                    | shares,
                )
                log.info("sft.step", step=step, of=steps, loss=round(loss, 4))
                if step % settings.checkpoint_every == 0 or step == steps:
                    state = CheckpointState(
                        step=step, cursor=cursor, fingerprint=sft_fingerprint(config), run_name="sft", created=now_iso()
                    )
                    # No RNG state: the data order is a function of the cursor and nothing else is random.
                    trainer = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
                    save_checkpoint(
                        self.checkpoints,
                        state,
                        write_adapter=policy.save_adapter,
                        trainer=trainer,
                        keep=settings.keep_checkpoints,
                    )
        return self._finish(policy, tokenizer, dataset, first=done + 1, last=steps, loss=loss, started=started)

    def _finish(
        self,
        policy: PolicyModel,
        tokenizer: Any,
        dataset: SftDataset,
        *,
        first: int,
        last: int,
        loss: float | None,
        started: float,
    ) -> SftSummary:
        """Save the final adapter, measure the held-out loss and valid share, export the merged model."""
        adapter = policy.save_adapter(self.out_dir / ADAPTER_DIR)
        policy.eval()
        heldout_loss = mean_nll(policy, dataset.held_out, self.settings.micro_batch_size)
        share = None
        if dataset.held_out:
            share, texts = held_out_valid_share(
                policy.model,
                tokenizer,
                dataset.held_out,
                max_new_tokens=self.config.rollout.sampling.max_action_tokens,
                limit=self.settings.valid_share_limit,
            )
            _write_heldout(self.out_dir / "heldout.jsonl", dataset.held_out, texts, tokenizer)
        merged = self._export_merged(policy, tokenizer) if self.settings.export_merged else None
        summary = SftSummary(
            out_dir=str(self.out_dir),
            first_step=first,
            last_step=last,
            final_loss=loss,
            heldout_loss=heldout_loss,
            valid_share=share.share if share else None,
            valid_action_share=share.action_share if share else None,
            same_action_share=share.same_action_share if share else None,
            adapter=str(adapter),
            merged=str(merged) if merged else None,
            wall_s=time.monotonic() - started,
        )
        record = summary.model_dump() | ({"counts": share.model_dump()} if share else {})
        (self.out_dir / "valid_share.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
        return summary

    def _export_merged(self, policy: PolicyModel, tokenizer: Any) -> Path:
        """The adapter folded into the base weights: a plain model folder a CWRPO run can take as policy.model,
        so its KL reference (the base with the adapter disabled) is the warm-started policy, not the raw base."""
        folder = self.out_dir / MERGED_DIR
        merged = policy.model.merge_and_unload()
        merged.save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder))
        return folder


def _write_heldout(path: Path, examples: Sequence[SftExample], texts: Sequence[str], tokenizer: Any) -> None:
    rules = default_rules()
    with path.open("w", encoding="utf-8") as handle:
        for example, text in zip(examples, texts, strict=False):
            expected = expected_text(tokenizer, example)
            row = {
                "episode": example.episode,
                "turn": example.turn,
                "family": example.family,
                "kind": example.kind,
                "written": text,
                "expected": expected,
                "valid": is_valid_turn(text, example.kind, rules),
                "same_action": example.kind == "action" and is_same_action(text, expected, rules),
            }
            handle.write(json.dumps(row) + "\n")
