"""The CWRPO learner's update with and without running each problem's common prompt prefix once, side by side.

    .venv/bin/python benchmarks/shared_prefix.py [--model smollm2-135m-instruct] [--problems 2] [--rollouts 8]
        [--turns 3] [--micro-batch 1] [--replay RUN/sequences/step-N.jsonl]

Why: a step's sequences are the turns of a few problems' rollouts, and every one of them opens with the
director's system prompt and its problem (`training/train/shared_prefix.py`). The sequences here have that
shape: per problem, `--rollouts` x `--turns` chat-templated prompts (the compact director template, the
problem, then one canvas line per earlier turn) with one-line actions as completions; or, with `--replay`, a
real step's sequences as a run journalled them (`logging.sequences: true`, on that run's model). Both updates
start from
the same fresh adapter on the same batch; the report gives their times, the ratio, and the largest difference
between the two adapters after the update (the gradient must not change). Needs a prepared model
(`flowsteer models prepare`).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import structlog
import torch
from _guard import BenchmarkReport

from operators.errors import OperatorsError
from operators.models.prepare import resolve_model
from training.rollout.samples import TurnSample
from training.train.config import LoraSettings, LossSettings, OptimSettings
from training.train.policy import PolicyModel
from training.train.update import policy_update

TEMPLATE = Path(__file__).resolve().parent.parent / "configs" / "templates" / "director_compact.txt"
PROBLEMS = (
    "Write a function to find the shared elements from the given two lists.\nassert set(similar_elements((3, 4, "
    "5, 6),(5, 7, 4, 10))) == set((4, 5))",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
    "clips did Natalia sell altogether in April and May?",
)
ACTIONS = ("add Programmer{8}", "add ScEnsemble", "finish", "add Custom{4}")
CANVAS = "[Canvas] round {turn}: {action} -> ran; 6/8 candidates agree, public tests 3/3"


def build_sequences(model: Path, problems: int, rollouts: int, turns: int) -> list[TurnSample]:
    """Per problem, `rollouts` x `turns` prompts that share the system prompt and problem, then differ."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    system = TEMPLATE.read_text(encoding="utf-8")
    sequences = []
    for problem in range(problems):
        for rollout in range(rollouts):
            for turn in range(turns):
                history = [CANVAS.format(turn=t + 1, action=ACTIONS[(rollout + t) % len(ACTIONS)]) for t in range(turn)]
                user = "\n".join([f"Task {problem}: {PROBLEMS[problem % len(PROBLEMS)]}", *history])
                messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
                text = str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
                prompt: list[int] = tokenizer.encode(text, add_special_tokens=False)
                action = tokenizer.encode(ACTIONS[(rollout + turn) % len(ACTIONS)] + "\n", add_special_tokens=False)
                sequences.append(
                    TurnSample(
                        episode_id=f"p{problem}#{rollout}",
                        group_id=f"p{problem}",
                        turn_index=turn,
                        prompt_ids=prompt,
                        completion_ids=action,
                        completion_mask=[1] * len(action),
                        behaviour_logprobs=[-1.0] * len(action),
                    )
                )
    return sequences


def replayed(path: Path) -> list[tuple[TurnSample, float]]:
    """A step's (sequence, advantage) pairs from a run's sequence journal."""
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [(TurnSample.model_validate(row["sample"]), float(row["advantage"])) for row in rows]


def timed_update(
    model: Path, batch: list[tuple[TurnSample, float]], micro_batch: int, share: bool
) -> tuple[float, dict[str, torch.Tensor], dict[str, float]]:
    """One update from a fresh adapter with the same seed: its time, the adapter after it, its metrics."""
    torch.manual_seed(0)
    policy = PolicyModel.load(model, LoraSettings(r=16, alpha=32))
    optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=1.0)
    started = time.perf_counter()
    metrics = policy_update(
        policy,
        optimizer,
        batch,
        OptimSettings(micro_batch_size=micro_batch, share_prefixes=share),
        LossSettings(kl_beta=0.05),
        torch.Generator().manual_seed(0),
    )
    elapsed = time.perf_counter() - started
    weights = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    return elapsed, weights, metrics


def main(model_name: str, problems: int, rollouts: int, turns: int, micro_batch: int, replay: Path | None) -> None:
    report = BenchmarkReport("shared_prefix")
    try:
        model = resolve_model(model_name)
    except OperatorsError as exc:
        report.fail(f"cannot use model {model_name!r}: {exc}")
        report.publish()
        return
    if replay is not None:
        batch = replayed(replay)
        shape = f"replayed from {replay}"
    else:
        sequences = build_sequences(model, problems, rollouts, turns)
        batch = [(s, (-1.0) ** (i // turns) * 0.5) for i, s in enumerate(sequences)]
        shape = f"{problems} problems x {rollouts} rollouts x {turns} turns"
    whole_s, whole, whole_metrics = timed_update(model, batch, micro_batch, share=False)
    shared_s, shared, shared_metrics = timed_update(model, batch, micro_batch, share=True)
    for label, metrics in (("whole", whole_metrics), ("shared", shared_metrics)):
        report.require(metrics.get("optim/updates", 0.0) >= 1.0, f"{label}: no optimizer update ran")
    gap = max(float((shared[n] - whole[n]).abs().max()) for n in whole)
    tokens = sum(len(s.input_ids) for s, _ in batch)
    report.line(
        f"model: {model}  sequences={len(batch)} ({shape})  "
        f"tokens={tokens}  micro_batch={micro_batch}  torch threads={torch.get_num_threads()}"
    )
    report.line(f"whole sequences : update={whole_s:7.1f} s")
    report.line(f"shared prefixes : update={shared_s:7.1f} s")
    report.line(f"speed ratio whole / shared: {whole_s / shared_s:.2f}x")
    report.line(f"largest adapter difference after the update: {gap:.2e}")
    report.publish()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="catalog name or model folder")
    parser.add_argument("--problems", type=int, default=2, help="problems (groups) in the step")
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per problem")
    parser.add_argument("--turns", type=int, default=3, help="turns per rollout")
    parser.add_argument("--micro-batch", type=int, default=1, help="sequences per forward/backward")
    parser.add_argument("--replay", type=Path, help="a run's sequences/step-N.jsonl instead of built sequences")
    args = parser.parse_args()
    if min(args.problems, args.rollouts, args.turns, args.micro_batch) < 1:
        parser.error("every count must be at least 1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.replay is not None and not args.replay.is_file():
        parser.error(f"--replay {args.replay}: no such file (a run writes them with logging.sequences: true)")
    main(args.model, args.problems, args.rollouts, args.turns, args.micro_batch, args.replay)
