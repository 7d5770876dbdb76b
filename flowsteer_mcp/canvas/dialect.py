"""The Flow-Director text dialect: what a policy model writes, parsed into typed canvas actions.

Compatible with the released FlowSteer-8b policy: tags are `<tag>v</tag>` or `[tag]v[/tag]`, case-insensitive,
first occurrence wins; complete `<think>` blocks and code fences are ignored. Operator names are validated here,
at parse time, so a bad name is reported at once instead of after a prompt turn.

Parsing is linear in the text (tags are found in one scan, see `tags.py`), numbers are digit-capped, and
error messages quote the text only as a short excerpt.

`<samples>k</samples>` (optional, 1..16) on an add of an operator or on a modify gives the node k draws whose
answers become candidates for the next stage; a turn without it is exactly the released dialect. With it,
`<until>tests</until>` or `<until>vote</until>` on an add stops the draws early (operators/stopping.py).

Each structure kind reads its own tags (`canvas/kinds/`); `<structure>fallback</structure>` with
`<operators>A, B</operators>` runs B only when A failed or gave no answer. Conditional tags keep the dialect's historical
names: `<condition>` is the checker, `<true>` is the branch run when the check FAILS (on_fail), `<false>` the
branch run when it passes (an operator or `done`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flowsteer_mcp.canvas.actions import AddStage, CanvasAction, DeleteNode, Finish, ModifyNode, SetPrompt
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds import structure_kinds
from flowsteer_mcp.canvas.numbers import MAX_DIGITS, parse_bounded_int
from flowsteer_mcp.canvas.tags import Tags
from flowsteer_mcp.canvas.text import excerpt
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.parsing import UnclosedThinkError, strip_think
from operators.stopping import STOP_RULES, StopRuleName

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_LIST_SPLIT = re.compile(r"[,;\s]+")
_FINISH_PHRASES = re.compile(
    r"\b(let'?s finish|finish the workflow|workflow is complete|ready to finish|i am done building)\b", re.IGNORECASE
)
_ACTION_VERBS = ("add", "delete", "modify", "set_prompt", "finish", "cancel")


@dataclass(frozen=True)
class ActionTurn:
    action: CanvasAction
    lenient: bool = False  # produced by a lenient fallback, reported as such in the feedback


@dataclass(frozen=True)
class CancelTurn:
    pass


@dataclass(frozen=True)
class PromptTurn:
    text: str


ParsedTurn = ActionTurn | CancelTurn | PromptTurn


def _turn_without_thinking(text: str) -> str:
    """The turn without its reasoning (the one rule: `operators.parsing.strip_think`); an unclosed `<think>`
    makes the turn invalid, because the action was never written."""
    try:
        return strip_think(text)
    except UnclosedThinkError as error:
        raise CanvasError(
            ErrorCode.PARSE_ERROR,
            "Unclosed <think> block: the turn ended while still thinking. Close </think> and then write one action.",
        ) from error


def _required(tags: Tags, name: str, why: str) -> str:
    value = tags.get(name)
    if not value:
        raise CanvasError(ErrorCode.PARSE_ERROR, f"Missing <{name}> tag: {why}.")
    return value


def _operator_list(raw: str, rules: CanvasRules) -> list[str]:
    names = [n for n in _LIST_SPLIT.split(raw.strip().strip("[]()")) if n]
    return [rules.operator(n) for n in names]


def _int(raw: str, name: str) -> int:
    value = parse_bounded_int(raw)
    if value is None:
        raise CanvasError(
            ErrorCode.PARSE_ERROR,
            f"<{name}> must be an integer of at most {MAX_DIGITS} digits, got {excerpt(raw.strip())}.",
        )
    return value


def _until(tags: Tags) -> StopRuleName | None:
    raw = (tags.get("until") or "").strip().lower()
    if not raw:
        return None
    if raw not in STOP_RULES:
        raise CanvasError(ErrorCode.PARSE_ERROR, f"Unknown <until> rule {excerpt(raw)}; use {', '.join(STOP_RULES)}.")
    return STOP_RULES[raw].name


def _samples(tags: Tags, rules: CanvasRules) -> int | None:
    raw = tags.get("samples")
    return rules.samples(_int(raw, "samples")) if raw else None


def _one_of(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


class _KindTags:
    """The `TagReader` a structure kind reads its tags with: names come back canonical, numbers bounded."""

    def __init__(self, tags: Tags, rules: CanvasRules) -> None:
        self._tags = tags
        self._rules = rules

    def get(self, name: str) -> str | None:
        return self._tags.get(name)

    def required(self, name: str, why: str) -> str:
        return _required(self._tags, name, why)

    def operator(self, raw: str) -> str:
        return self._rules.operator(raw)

    def operators(self, name: str, why: str) -> list[str]:
        return _operator_list(self.required(name, why), self._rules)

    def integer(self, name: str) -> int | None:
        raw = self._tags.get(name)
        return _int(raw, name) if raw else None


def _parse_add(tags: Tags, rules: CanvasRules) -> AddStage:
    position_raw = tags.get("position")
    position = _int(position_raw, "position") if position_raw else None
    structure = tags.get("structure")
    samples = _samples(tags, rules)
    if structure is None:
        operator = rules.operator(
            _required(tags, "operator", "an add needs <operator>NAME</operator> or a <structure>")
        )
        prompt = tags.get("prompt") or None
        until = _until(tags)
        rules.stop_rule(until, samples or 1)
        blueprint = OperatorBlueprint(operator=operator, prompt=prompt, samples=samples or 1, until=until)
        return AddStage(stage=blueprint, position=position)
    if samples is not None and samples > 1:
        raise CanvasError(
            ErrorCode.PARSE_ERROR,
            "<samples> applies to an add of a single operator (or a modify of a node); for samples in a parallel "
            "stage add it first, then modify a branch with <samples>.",
        )
    structures = {kind.name: kind for kind in structure_kinds()}  # read now: kinds may be registered at run time
    kind = structures.get(structure.lower())
    if kind is None:
        raise CanvasError(
            ErrorCode.PARSE_ERROR, f"Unknown structure {excerpt(structure)}; use {_one_of(list(structures))}."
        )
    return AddStage(stage=kind.from_tags(_KindTags(tags, rules)), position=position)


def _lenient(text: str, rules: CanvasRules) -> ParsedTurn | None:
    if _FINISH_PHRASES.search(text):
        return ActionTurn(Finish(), lenient=True)
    words = set(re.findall(r"[A-Za-z]+", text))
    found = sorted({name for name in rules.allowed_names() if name in words})
    if len(found) == 1:
        return ActionTurn(AddStage(stage=OperatorBlueprint(operator=found[0])), lenient=True)
    return None


def parse_action_turn(text: str, rules: CanvasRules, *, lenient: bool = False) -> ParsedTurn:
    """Parse a building-state turn into one action. Raises CanvasError with an actionable message."""
    body = _FENCE.sub("", _turn_without_thinking(text))
    tags = Tags(body)
    verb_raw = tags.get("action")
    if verb_raw is None:
        fallback = _lenient(body, rules) if lenient else None
        if fallback is not None:
            return fallback
        raise CanvasError(
            ErrorCode.PARSE_ERROR,
            "No <action> tag found. Write exactly one action, e.g. <action>add</action><operator>Custom</operator> "
            "or <action>finish</action>.",
        )
    verb = re.sub(r"[\s-]+", "_", verb_raw.strip().lower())
    if verb == "add":
        return ActionTurn(_parse_add(tags, rules))
    if verb == "delete":
        return ActionTurn(DeleteNode(node_id=_required(tags, "target", "say which node to delete")))
    if verb == "modify":
        target = _required(tags, "target", "say which node to modify")
        operator = rules.operator(_required(tags, "operator", "say the new operator"))
        prompt = tags.get("prompt") or None
        return ActionTurn(ModifyNode(node_id=target, operator=operator, prompt=prompt, samples=_samples(tags, rules)))
    if verb in ("set_prompt", "setprompt"):
        target = _required(tags, "target", "say which node gets the prompt")
        return ActionTurn(SetPrompt(node_id=target, prompt=_required(tags, "prompt", "write the new prompt text")))
    if verb == "finish":
        return ActionTurn(Finish(answer=tags.get("answer") or None))
    if verb == "cancel":
        return CancelTurn()
    raise CanvasError(
        ErrorCode.PARSE_ERROR, f"Unknown action {excerpt(verb_raw.strip())}; use one of: {', '.join(_ACTION_VERBS)}."
    )


def parse_prompt_turn(text: str) -> ParsedTurn:
    """Parse a prompt turn: the text itself is the prompt, unless it cancels or wrongly writes an action."""
    body = _turn_without_thinking(text)
    tags = Tags(body)
    verb = tags.get("action")
    if verb is not None:
        if verb.strip().lower() == "cancel":
            return CancelTurn()
        raise CanvasError(
            ErrorCode.WRONG_STATE,
            f"A prompt is expected now, but the action {excerpt(verb)} was written. Write the prompt text "
            "itself, or <action>cancel</action> to abandon the pending edit.",
        )
    inline = tags.get("prompt")
    return PromptTurn(text=(inline if inline is not None else body).strip())
