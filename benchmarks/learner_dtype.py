"""The CWRPO learner's update in float32 vs bfloat16 weights, side by side in one run.

    .venv/bin/python benchmarks/learner_dtype.py [--model smollm2-135m-instruct] [--sequences 16]
        [--prompt-tokens 480] [--completion-tokens 40] [--micro-batch 4]

Why: on this project's CPU run one policy update of 24 sequences took about 300 s in float32, which bounds
how many steps a CPU run can afford; CPUs with AMX or AVX-512 BF16 compute bfloat16 matrix products natively.
A cheaper learner only helps if its log-probs still agree with the sampler's, so besides the time of one
`policy_update` (reference pass, forward, backward, optimizer step) per dtype, the report gives how far the
bfloat16 learner's log-probs of the sampled tokens are from float32's, and the importance ratios the bfloat16
learner would see against float32 behaviour log-probs (a float32 vLLM policy server). Sequences are real text
in the policy's chat template: the compact director prompt padded with a problem to `--prompt-tokens`, and
one-line actions as completions. Each dtype loads its own model with a fresh LoRA adapter (the policy equals
the base model, as at step 1). Needs a prepared model (`flowsteer models prepare`).
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import structlog
import torch
from _guard import BenchmarkReport

from operators.errors import OperatorsError
from operators.models.prepare import resolve_model
from training.rollout.samples import TurnSample
from training.train.batching import collate, micro_batches
from training.train.config import LoraSettings, LossSettings, OptimSettings
from training.train.policy import PolicyModel
from training.train.update import policy_update

TEMPLATE = Path(__file__).resolve().parent.parent / "configs" / "templates" / "director_compact.txt"
PROBLEM = (
    "Write a function that returns the second largest distinct value of a list of integers, or None when "
    "there is none. The canvas is empty; round 1 of 6. "
)
ACTIONS = (
    "<action>add</action><operator>Programmer</operator>",
    "<action>add</action><structure>parallel</structure><operators>Programmer, Programmer</operators>",
    "<action>add</action><operator>ScEnsemble</operator>",
    "<action>add</action><structure>conditional</structure><condition>Test</condition><true>Revise</true>",
    "<action>finish</action>",
)


@dataclass(frozen=True)
class Measurement:
    dtype: str
    update_s: float
    logprobs: list[torch.Tensor]  # per sequence, the learner's log-probs of the completion tokens (no grad)
    metrics: dict[str, float]

    def line(self, sequences: int, tokens: int) -> str:
        return (
            f"{self.dtype:<9} update={self.update_s:7.1f} s  sequences/s={sequences / self.update_s:6.2f}  "
            f"tokens/s={tokens / self.update_s:7.1f}"
        )


def build_sequences(model: Path, count: int, prompt_tokens: int, completion_tokens: int) -> list[TurnSample]:
    """`count` chat-templated (prompt, action) pairs of the requested lengths, behaviour log-probs still 0."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    system = TEMPLATE.read_text(encoding="utf-8")
    sequences = []
    for index in range(count):
        user = PROBLEM * 40
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        text = str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        prompt: list[int] = tokenizer.encode(text, add_special_tokens=False)
        # Keep the chat header and the generation prompt, cut the middle to the requested length.
        prompt = prompt[: prompt_tokens - 8] + prompt[-8:] if len(prompt) > prompt_tokens else prompt
        action = tokenizer.encode(ACTIONS[index % len(ACTIONS)] + "\n", add_special_tokens=False)
        completion = (action * (1 + completion_tokens // max(len(action), 1)))[:completion_tokens]
        sequences.append(
            TurnSample(
                episode_id=f"bench-{index}",
                group_id=f"group-{index // 4}",
                turn_index=0,
                prompt_ids=prompt,
                completion_ids=completion,
                completion_mask=[1] * len(completion),
                behaviour_logprobs=[0.0] * len(completion),
            )
        )
    return sequences


@torch.no_grad()
def completion_logprobs(policy: PolicyModel, sequences: list[TurnSample], micro_batch: int) -> list[torch.Tensor]:
    """The policy's float32 log-probs of each sequence's completion tokens."""
    pairs = [(s, 0.0) for s in sequences]
    lengths = [len(s.input_ids) for s in sequences]
    out: list[torch.Tensor] = [torch.zeros(0)] * len(sequences)
    policy.eval()
    for chunk in micro_batches(range(len(sequences)), lengths, micro_batch):
        batch = collate([pairs[i] for i in chunk], policy.pad_id)
        logp, _ = policy.logprobs(batch, with_entropy=False)
        for row, index in enumerate(chunk):
            n = len(sequences[index].completion_ids)
            out[index] = logp[row, batch.tail - n :].float().clone()
    return out


def measure(
    model: Path,
    dtype: str,
    sequences: list[TurnSample],
    advantages: list[float],
    micro_batch: int,
    behaviour: list[torch.Tensor] | None,
) -> Measurement:
    """Load the policy in `dtype`, take its log-probs, then time one update against `behaviour` (its own
    log-probs when None: exactly on-policy)."""
    policy = PolicyModel.load(model, LoraSettings(r=16, alpha=32), dtype=dtype)
    completion_logprobs(policy, sequences[:micro_batch], micro_batch)  # warm-up: first-call allocations
    logprobs = completion_logprobs(policy, sequences, micro_batch)
    sequences = with_behaviour(sequences, behaviour if behaviour is not None else logprobs)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-4)
    started = time.perf_counter()
    metrics = policy_update(
        policy,
        optimizer,
        list(zip(sequences, advantages, strict=True)),
        OptimSettings(micro_batch_size=micro_batch),
        LossSettings(),
        torch.Generator().manual_seed(0),
    )
    return Measurement(dtype, time.perf_counter() - started, logprobs, metrics)


def with_behaviour(sequences: list[TurnSample], logprobs: list[torch.Tensor]) -> list[TurnSample]:
    """The sequences with `logprobs` as their behaviour log-probs (what a float32 sampler would have returned)."""
    return [
        s.model_copy(update={"behaviour_logprobs": [min(0.0, float(v)) for v in lp]})
        for s, lp in zip(sequences, logprobs, strict=True)
    ]


def main(model_name: str, count: int, prompt_tokens: int, completion_tokens: int, micro_batch: int) -> None:
    report = BenchmarkReport("learner_dtype")
    try:
        model = resolve_model(model_name)
    except OperatorsError as exc:
        report.fail(f"cannot use model {model_name!r}: {exc}")
        report.publish()
        return
    torch.manual_seed(0)
    sequences = build_sequences(model, count, prompt_tokens, completion_tokens)
    advantages = [(-1.0) ** i for i in range(count)]
    # float32 first: its log-probs are the behaviour log-probs of both updates (a float32 sampler's).
    full = measure(model, "float32", sequences, advantages, micro_batch, None)
    half = measure(model, "bfloat16", sequences, advantages, micro_batch, full.logprobs)
    tokens = sum(len(s.input_ids) for s in sequences)
    for measurement in (full, half):
        report.require(
            measurement.metrics.get("optim/updates", 0.0) >= 1.0, f"{measurement.dtype}: no optimizer update ran"
        )
    gaps = torch.cat([(h - f).abs() for h, f in zip(half.logprobs, full.logprobs, strict=True)])
    report.line(
        f"model: {model}  sequences={count}  tokens={tokens} ({prompt_tokens} prompt + {completion_tokens} "
        f"completion each)  micro_batch={micro_batch}  torch threads={torch.get_num_threads()}"
    )
    report.line(full.line(count, tokens))
    report.line(half.line(count, tokens))
    report.line(f"speed ratio bfloat16 / float32: {full.update_s / half.update_s:.2f}x")
    report.line(
        f"bfloat16 vs float32 log-probs of the completion tokens: mean |diff| {float(gaps.mean()):.4f}, "
        f"max {float(gaps.max()):.4f}"
    )
    report.line(
        "importance ratios against float32 behaviour log-probs: "
        f"float32 mean {full.metrics['loss/ratio_mean']:.4f} clipped {full.metrics['loss/clip_fraction']:.3f}; "
        f"bfloat16 mean {half.metrics['loss/ratio_mean']:.4f} clipped {half.metrics['loss/clip_fraction']:.3f} "
        f"(max {half.metrics['loss/ratio_max']:.3f})"
    )
    report.publish()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="catalog name or model folder")
    parser.add_argument("--sequences", type=int, default=16, help="sequences in the update")
    parser.add_argument("--prompt-tokens", type=int, default=480, help="prompt tokens per sequence")
    parser.add_argument("--completion-tokens", type=int, default=40, help="completion tokens per sequence")
    parser.add_argument("--micro-batch", type=int, default=4, help="sequences per forward/backward")
    args = parser.parse_args()
    if min(args.sequences, args.prompt_tokens, args.completion_tokens, args.micro_batch) < 1:
        parser.error("every count must be at least 1")
    if args.prompt_tokens < 16:
        parser.error("--prompt-tokens must be at least 16 (the chat header and generation prompt)")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    main(args.model, args.sequences, args.prompt_tokens, args.completion_tokens, args.micro_batch)
