"""The decisions a policy would take on fixed observations, read off its probabilities instead of its samples.

Why: a CWRPO step shows what 16 sampled rollouts did, and that is noisy. Runs 4a-5 shrank their workflows
while the outcomes favoured more operators (docs/runs/cpu-warmstart, sections 12-13), and the rollouts alone
cannot tell a drift of the policy from the luck of the draws. Here every policy (the warm start, then saved
adapters) is scored on the same observations: for each, the probability that its next turn opens with each
decision (`finish`, `add Custom`, `add parallel`, `modify` ...), by teacher-forcing the decision's opening
tokens after the observation. A difference between two checkpoints is then a change of the policy itself.

A decision's opening stops at the last word of the decision (`<action>add</action><operator>Custom`), before
the closing tag: the tokenizer may merge a closing `>` with the next tag's `<`, so a text cut after `>` need
not be a token prefix of the turns the policy writes. `decision_token_ids` checks the cut for every decision.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import torch
from pydantic import BaseModel

from training.errors import TrainingError
from training.sft.dataset import SftDataset, SftExample, load_transcripts
from training.train.config import SftSettings, TrainConfig

log = structlog.get_logger(__name__)

ACTION_VERBS = ("modify", "delete", "set_prompt", "cancel")  # the verbs other than add and finish
EMPTY_CANVAS = "(empty)"


class ProbeError(TrainingError, ValueError):
    """The probe cannot measure what it was asked to (no observations, a decision the tokenizer splits)."""


@dataclass(frozen=True)
class Decision:
    name: str  # as reports show it: "finish", "add Custom", "add parallel", "modify"
    opening: str  # the turn's text up to the decision's last word


def dialect_decisions(operator_names: Iterable[str], structure_names: Iterable[str]) -> list[Decision]:
    """Every decision a turn can open with, in the released tag dialect. The openings are mutually exclusive
    (no name is a prefix of another), so their probabilities add up to at most 1."""
    decisions = [Decision("finish", "<action>finish")]
    decisions += [Decision(f"add {name}", f"<action>add</action><operator>{name}") for name in operator_names]
    decisions += [Decision(f"add {name}", f"<action>add</action><structure>{name}") for name in structure_names]
    decisions += [Decision(verb, f"<action>{verb}") for verb in ACTION_VERBS]
    openings = [d.opening for d in decisions]
    for opening in openings:
        clash = [other for other in openings if other != opening and other.startswith(opening)]
        if clash:
            raise ProbeError(f"decision {opening!r} is a prefix of {clash[0]!r}: their probabilities would overlap")
    return decisions


def default_decisions() -> list[Decision]:
    """The decisions of the registered operators (plug-ins included) and the canvas's structures."""
    from flowsteer_mcp.api import STRUCTURES
    from operators.registry import default_registry

    return dialect_decisions(default_registry().names(), [kind.name for kind in STRUCTURES])


def decision_of(text: str, decisions: Sequence[Decision]) -> str | None:
    """The decision a written turn took, or None when it opens with none of them."""
    stripped = text.strip()
    for decision in decisions:
        rest = stripped[len(decision.opening) :]
        if stripped.startswith(decision.opening) and (not rest or not (rest[0].isalnum() or rest[0] == "_")):
            return decision.name
    return None


def decision_token_ids(tokenizer: Any, decisions: Sequence[Decision]) -> list[list[int]]:
    """Each decision's opening as token ids, checked to be a token prefix of the opening followed by its
    closing tag (how every written turn continues)."""
    out = []
    for decision in decisions:
        ids = list(tokenizer(decision.opening, add_special_tokens=False)["input_ids"])
        closed = list(tokenizer(decision.opening + "</", add_special_tokens=False)["input_ids"])
        if not ids or closed[: len(ids)] != ids:
            raise ProbeError(
                f"the tokenizer merges the end of {decision.opening!r} with its closing tag; its probability "
                "cannot be read off a token prefix"
            )
        out.append(ids)
    return out


@dataclass(frozen=True)
class ProbeObservation:
    context: str  # "code | add Custom": the task type, then the decisions its episode took before this turn
    prompt_ids: list[int]


def observation_context(task_type: str, earlier: Sequence[str | None]) -> str:
    taken = [name or "?" for name in earlier]
    return f"{task_type} | {', '.join(taken) if taken else EMPTY_CANVAS}"


@torch.no_grad()
def decision_logprobs(model: Any, prompt_ids: Sequence[int], openings: Sequence[Sequence[int]]) -> list[float]:
    """log P(next turn opens with each opening | prompt): one forward pass over the prompt, then each opening
    on its cache, which is cut back to the prompt after every opening."""
    from transformers import DynamicCache

    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long)
    cache = DynamicCache()
    out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
    first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
    results = []
    for ids in openings:
        total = float(first[ids[0]])
        if len(ids) > 1:
            step = model(
                input_ids=torch.tensor([list(ids[:-1])], dtype=torch.long), past_key_values=cache, use_cache=True
            )
            logp = torch.log_softmax(step.logits[0].float(), dim=-1)
            total += float(logp.gather(-1, torch.tensor(list(ids[1:])).unsqueeze(-1)).sum())
            cache.crop(-(len(ids) - 1))  # back to the prompt alone
        results.append(total)
    return results


class ContextDecisions(BaseModel):
    """Mean probability of each decision over the observations of one context."""

    context: str
    observations: int
    probabilities: dict[str, float]  # decision name -> mean probability; "other" is the rest


class PolicyDecisions(BaseModel):
    policy: str
    contexts: list[ContextDecisions]


class ProbeReport(BaseModel):
    decisions: list[str]
    policies: list[PolicyDecisions]


def probe_policy(
    name: str,
    model: Any,
    observations: Sequence[ProbeObservation],
    decisions: Sequence[Decision],
    openings: Sequence[Sequence[int]],
) -> PolicyDecisions:
    """Score one policy on every observation and average the decision probabilities per context."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    model.eval()
    for observation in observations:
        probabilities = [math.exp(lp) for lp in decision_logprobs(model, observation.prompt_ids, openings)]
        row = sums[observation.context]
        for decision, p in zip(decisions, probabilities, strict=True):
            row[decision.name] += p
        row["other"] += max(0.0, 1.0 - sum(probabilities))
        counts[observation.context] += 1
    contexts = [
        ContextDecisions(
            context=context,
            observations=counts[context],
            probabilities={key: value / counts[context] for key, value in sums[context].items()},
        )
        for context in sorted(sums)
    ]
    return PolicyDecisions(policy=name, contexts=contexts)


def report_markdown(report: ProbeReport, *, min_probability: float = 0.02) -> str:
    """One table per context: a row per policy, a column per decision that some policy takes with at least
    `min_probability` there."""
    by_context: dict[str, list[tuple[str, ContextDecisions]]] = defaultdict(list)
    for scored in report.policies:
        for decided in scored.contexts:
            by_context[decided.context].append((scored.policy, decided))
    lines = []
    for context, rows in sorted(by_context.items()):
        columns = [
            name
            for name in [*report.decisions, "other"]
            if any(row.probabilities.get(name, 0.0) >= min_probability for _, row in rows)
        ]
        lines += [f"**{context}** ({rows[0][1].observations} observations)", ""]
        lines.append("| policy | " + " | ".join(columns) + " |")
        lines.append("|---|" + "---:|" * len(columns))
        for policy, row in rows:
            cells = " | ".join(f"{row.probabilities.get(name, 0.0):.2f}" for name in columns)
            lines.append(f"| {policy} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def observations_from_examples(
    examples: Sequence[SftExample], tokenizer: Any, decisions: Sequence[Decision], *, task_type: str | None = None
) -> list[ProbeObservation]:
    """The action turns of transcript examples as probe observations, each under its context: the task type
    (the family's first part, `code/greedy` -> `code`) and the decisions its episode took before it."""
    by_episode: dict[int, list[SftExample]] = defaultdict(list)
    for example in examples:
        by_episode[example.episode].append(example)
    out = []
    for episode in sorted(by_episode):
        earlier: list[str | None] = []
        for example in sorted(by_episode[episode], key=lambda ex: ex.turn):
            if example.kind != "action":
                continue
            task = example.family.split("/", 1)[0] if "/" in example.family else "?"
            if task_type is None or task == task_type:
                out.append(ProbeObservation(observation_context(task, earlier), example.prompt_ids))
            written = tokenizer.decode(example.completion_ids, skip_special_tokens=True)
            earlier.append(decision_of(written, decisions))
    return out


def probe_examples(config: TrainConfig, tokenizer: Any, transcripts: Sequence[str | Path] = ()) -> list[SftExample]:
    """The turns to probe: every turn of `transcripts` when given, else the warm start's held-out turns (the
    config's `sft:` data, split exactly as `flowsteer train sft` split it)."""
    sft = config.sft
    if transcripts:
        paths, held_out_fraction = list(transcripts), 0.0
    elif sft is not None:
        paths, held_out_fraction = list(sft.data), sft.held_out_fraction
    else:
        raise ProbeError("the config has no `sft:` section, so there are no held-out turns: pass --transcripts")
    dataset = SftDataset(
        load_transcripts(paths),
        tokenizer,
        mix="natural",
        held_out_fraction=held_out_fraction,
        max_seq_len=sft.max_seq_len if sft is not None else SftSettings.model_fields["max_seq_len"].default,
        seed=config.run.seed,
        enable_thinking=config.rollout.sampling.enable_thinking,
    )
    return dataset.train if transcripts else dataset.held_out


def adapter_folder(path: Path) -> tuple[str, Path]:
    """(name, adapter folder) for `NAME=DIR` or `DIR`; DIR may be a checkpoint holding `adapter/`."""
    raw = str(path)
    name, sep, rest = raw.partition("=")
    folder = Path(rest) if sep else Path(raw)
    if (folder / "adapter" / "adapter_config.json").is_file():
        folder = folder / "adapter"
    if not (folder / "adapter_config.json").is_file():
        raise ProbeError(f"{folder} holds no LoRA adapter (adapter_config.json); pass an adapter or checkpoint folder")
    if not sep:
        name = folder.parent.name if folder.name == "adapter" else folder.name
    return name, folder


def run_probe(
    model_dir: Path,
    observations: Sequence[ProbeObservation],
    decisions: Sequence[Decision],
    tokenizer: Any,
    adapters: Sequence[tuple[str, Path]],
    *,
    dtype: torch.dtype = torch.float32,
    base_name: str = "base",
) -> ProbeReport:
    """Score the base model, then each adapter on it, on the same observations."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if not observations:
        raise ProbeError("no observations to probe (check --task and the transcripts)")
    openings = decision_token_ids(tokenizer, decisions)
    base = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=dtype)
    policies = [probe_policy(base_name, base, observations, decisions, openings)]
    log.info("probe.policy", policy=base_name, observations=len(observations))
    for name, folder in adapters:
        model = PeftModel.from_pretrained(base, str(folder))
        policies.append(probe_policy(name, model, observations, decisions, openings))
        log.info("probe.policy", policy=name, adapter=str(folder))
        base = model.unload()  # the LoRA layers out again, unmerged: the next adapter starts from the base
    return ProbeReport(decisions=[d.name for d in decisions], policies=policies)
