"""What CWRPO updates do to a policy's decisions, where they are told something and where they are not.

Why: cpu-warmstart runs 4a-5 shrank their workflows although the outcomes favoured more operators. This
experiment asks whether the update itself points the right way. The policy samples its turns after the
warm start's held-out code observations with one operator on the canvas. Turns that `add` get reward 1 and the
others 0, centred per observation (a group). The trainer's own `policy_update` then runs with the config's
optimiser and loss. Before and after every update, the decision probe reads P(finish) and the other decisions
in the trained contexts (one operator) and in a context the batch says nothing about (the empty canvas).

    .venv/bin/python scripts/one_update_probe.py --config configs/cpu-warmstart.yaml \
        --set policy.model=runs/sft-warmstart/merged --updates 1
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from training.rollout.samples import TurnSample
from training.train.batching import collate
from training.train.config import load_train_config
from training.train.loop import resolve_policy_model
from training.train.optim import build_optimizer
from training.train.policy import PolicyModel
from training.train.probe import (
    Decision,
    ProbeObservation,
    decision_of,
    decision_token_ids,
    default_decisions,
    observations_from_examples,
    probe_examples,
    probe_policy,
)
from training.train.update import policy_update


def mean_decisions(
    policy: PolicyModel, observations: Sequence[ProbeObservation], decisions: list[Decision], openings: list[list[int]]
) -> dict[str, float]:
    """The decision probabilities averaged over all `observations`, whatever their contexts."""
    pooled = [ProbeObservation("pooled", observation.prompt_ids) for observation in observations]
    (context,) = probe_policy("policy", policy.model, pooled, decisions, openings).contexts
    return context.probabilities


def show(label: str, decisions: dict[str, float]) -> None:
    top = sorted(decisions.items(), key=lambda item: -item[1])[:5]
    print(f"{label:<28}" + "  ".join(f"{name}={p:.3f}" for name, p in top), flush=True)


def sampled_turn(policy: PolicyModel, tokenizer: object, observation: ProbeObservation, tag: str) -> TurnSample:
    """One turn at temperature 1 with its behaviour log-probs from the learner itself (on-policy: ratio 1)."""
    prompt = torch.tensor([observation.prompt_ids])
    eos = tokenizer.eos_token_id  # type: ignore[attr-defined]
    with torch.no_grad():
        out = policy.model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=96,
            eos_token_id=eos,
            pad_token_id=eos,
        )
    completion = out[0, len(observation.prompt_ids) :].tolist()
    turn = TurnSample(
        episode_id=tag,
        group_id=tag.split("-")[0],
        turn_index=1,
        prompt_ids=observation.prompt_ids,
        completion_ids=completion,
        completion_mask=[1] * len(completion),
        behaviour_logprobs=[0.0] * len(completion),
    )
    with torch.no_grad():
        batch = collate([(turn, 0.0)], policy.pad_id)
        logp, _ = policy.logprobs(batch, with_entropy=False)
    behaviour = logp[0, batch.tail - len(completion) :].float().clamp(max=0.0).tolist()
    return turn.model_copy(update={"behaviour_logprobs": behaviour})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--updates", type=int, default=1)
    parser.add_argument("--rollouts", type=int, default=4, help="sampled turns per observation")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    config = load_train_config(args.config, args.overrides)
    model_dir = resolve_policy_model(config.policy.model)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    decisions = default_decisions()
    observations = observations_from_examples(probe_examples(config, tokenizer), tokenizer, decisions, task_type="code")
    trained = [o for o in observations if "," not in o.context and not o.context.endswith("(empty)")]
    untouched = [o for o in observations if o.context.endswith("(empty)")]
    print(f"trained contexts: {len(trained)} observations; untouched (empty canvas): {len(untouched)}")

    policy = PolicyModel.for_config(model_dir, config)
    openings = decision_token_ids(tokenizer, decisions)
    optimizer, scheduler = build_optimizer(policy.trainable_parameters(), config.optim, config.run.steps)
    generator = torch.Generator().manual_seed(args.seed)
    show("before, one operator:", mean_decisions(policy, trained, decisions, openings))
    show("before, empty canvas:", mean_decisions(policy, untouched, decisions, openings))
    for update in range(1, args.updates + 1):
        policy.eval()
        sequences: list[tuple[TurnSample, float]] = []
        for index, observation in enumerate(trained):
            turns = [sampled_turn(policy, tokenizer, observation, f"{index}-{r}") for r in range(args.rollouts)]
            taken = [
                decision_of(str(tokenizer.decode(t.completion_ids, skip_special_tokens=True)), decisions) for t in turns
            ]
            rewards = [1.0 if (d or "").startswith("add ") else 0.0 for d in taken]
            mean = sum(rewards) / len(rewards)
            sequences += [(turn, reward - mean) for turn, reward in zip(turns, rewards, strict=True)]
            print(f"  update {update}, observation {index}: " + ", ".join(f"{d}" for d in taken))
        metrics = policy_update(policy, optimizer, sequences, config.optim, config.loss, generator)
        scheduler.step()
        print(
            f"  update {update}: {metrics['optim/sequences']:.0f} sequences, grad norm {metrics['optim/grad_norm']:.3f}"
        )
        show(f"after {update}, one operator:", mean_decisions(policy, trained, decisions, openings))
        show(f"after {update}, empty canvas:", mean_decisions(policy, untouched, decisions, openings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
