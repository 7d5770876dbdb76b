"""The warm start's headline number: the share of held-out observations answered with a turn the canvas parses.

The policy writes one turn per held-out observation, greedily and with no `action_prefix` priming (the point
of the warm start is that priming is no longer needed), and the canvas dialect's own parser judges it: an
action turn must parse to one action (strictly: the lenient fallbacks for weak models are off), a prompt turn
must not write an action instead. Generation runs in process with transformers: this is a metric over a few
hundred turns, not a serving path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import structlog
import torch
from pydantic import BaseModel

from flowsteer_mcp.api import ActionTurn, CanvasError, CanvasOptions, CanvasRules, parse_action_turn, parse_prompt_turn
from operators.registry import default_registry
from training.sft.dataset import SftExample

log = structlog.get_logger(__name__)

TurnKind = Literal["action", "prompt"]


class ValidShare(BaseModel):
    turns: int
    valid: int
    action_turns: int
    valid_actions: int
    # action turns whose parsed action is the transcript's own, prompts aside (operator, samples, structure,
    # target): a valid turn may still build another workflow than the one it imitates
    same_actions: int = 0

    @property
    def share(self) -> float:
        return self.valid / self.turns if self.turns else 0.0

    @property
    def action_share(self) -> float:
        return self.valid_actions / self.action_turns if self.action_turns else 0.0

    @property
    def same_action_share(self) -> float:
        return self.same_actions / self.action_turns if self.action_turns else 0.0

    def flat(self, prefix: str = "heldout") -> dict[str, float]:
        return {
            f"{prefix}/valid_share": self.share,
            f"{prefix}/valid_action_share": self.action_share,
            f"{prefix}/same_action_share": self.same_action_share,
            f"{prefix}/turns": float(self.turns),
        }


def default_rules() -> CanvasRules:
    """The rules a default workflow validates against (every registered operator allowed)."""
    return CanvasRules(default_registry(), CanvasOptions())


def is_valid_turn(text: str, kind: TurnKind, rules: CanvasRules) -> bool:
    try:
        if kind == "prompt":
            parse_prompt_turn(text)
        else:
            parse_action_turn(text, rules, lenient=False)
    except CanvasError:
        return False
    return True


def _without_prompts(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_prompts(item) for key, item in value.items() if key != "prompt"}
    if isinstance(value, list):
        return [_without_prompts(item) for item in value]
    return value


def action_shape(text: str, rules: CanvasRules) -> Any | None:
    """The action an action turn parses to, prompts left out; None when it does not parse to an action."""
    try:
        parsed = parse_action_turn(text, rules, lenient=False)
    except CanvasError:
        return None
    if not isinstance(parsed, ActionTurn):
        return None
    return _without_prompts(parsed.action.model_dump(mode="json"))


def is_same_action(written: str, expected: str, rules: CanvasRules) -> bool:
    shape = action_shape(written, rules)
    return shape is not None and shape == action_shape(expected, rules)


def count_valid(
    turns: Sequence[tuple[str, TurnKind]],
    rules: CanvasRules | None = None,
    *,
    expected: Sequence[str] | None = None,
) -> ValidShare:
    """Judge written turns `(text, kind)` with the canvas parser; with `expected` (the transcripts' own turns),
    also count the action turns that take the transcript's action."""
    rules = rules or default_rules()
    verdicts = [(kind, is_valid_turn(text, kind, rules)) for text, kind in turns]
    same = 0
    if expected is not None:
        pairs = zip(turns, expected, strict=True)
        same = sum(kind == "action" and is_same_action(text, want, rules) for (text, kind), want in pairs)
    return ValidShare(
        turns=len(verdicts),
        valid=sum(ok for _, ok in verdicts),
        action_turns=sum(kind == "action" for kind, _ in verdicts),
        valid_actions=sum(ok for kind, ok in verdicts if kind == "action"),
        same_actions=same,
    )


def expected_text(tokenizer: Any, example: SftExample) -> str:
    """The transcript's own turn, as the policy would have written it."""
    return str(tokenizer.decode(example.completion_ids, skip_special_tokens=True))


@torch.no_grad()
def generate_greedy(model: Any, tokenizer: Any, prompts: Sequence[list[int]], *, max_new_tokens: int) -> list[str]:
    """One greedy turn per prompt (token ids), stopped at end-of-turn, decoded without special tokens."""
    model.eval()
    texts = []
    for prompt in prompts:
        input_ids = torch.tensor([prompt], dtype=torch.long)
        output = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        )
        texts.append(tokenizer.decode(output[0, len(prompt) :], skip_special_tokens=True))
    return texts


def held_out_valid_share(
    model: Any, tokenizer: Any, examples: Sequence[SftExample], *, max_new_tokens: int, limit: int | None
) -> tuple[ValidShare, list[str]]:
    """Generate on (at most `limit` of) the held-out turns and count the valid ones; also returns the texts."""
    chosen = list(examples[:limit] if limit is not None else examples)
    texts = generate_greedy(model, tokenizer, [ex.prompt_ids for ex in chosen], max_new_tokens=max_new_tokens)
    expected = [expected_text(tokenizer, ex) for ex in chosen]
    share = count_valid([(text, ex.kind) for text, ex in zip(texts, chosen, strict=True)], expected=expected)
    log.info(
        "sft.valid_share",
        turns=share.turns,
        share=share.share,
        action_share=share.action_share,
        same_action_share=share.same_action_share,
    )
    return share, texts
