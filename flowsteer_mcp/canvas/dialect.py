"""The Flow-Director text dialect: what a policy model writes, parsed into typed canvas actions.

Compatible with the released FlowSteer-8b policy: tags are `<tag>v</tag>` or `[tag]v[/tag]`, case-insensitive,
first occurrence wins; complete `<think>` blocks and code fences are ignored. Operator names are validated here,
at parse time, so a bad name is reported at once instead of after a prompt turn.

Conditional tags keep the dialect's historical names: `<condition>` is the checker, `<true>` is the branch run
when the check FAILS (on_fail), `<false>` the branch run when it passes (an operator or `done`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flowsteer_mcp.canvas.actions import AddStage, CanvasAction, DeleteNode, Finish, ModifyNode, SetPrompt
from flowsteer_mcp.canvas.blueprint import (
    ConditionalBlueprint,
    LoopBlueprint,
    OperatorBlueprint,
    ParallelBlueprint,
)
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.validate import CanvasRules

DEFAULT_LOOP_COUNT = 3
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
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


def _tag(text: str, name: str) -> str | None:
    """Value of the first `<name>..</name>` or `[name]..[/name]`, whichever comes first; None if absent."""
    pattern = re.compile(rf"<{name}>(.*?)</{name}>|\[{name}\](.*?)\[/{name}\]", re.IGNORECASE | re.DOTALL)
    match = pattern.search(text)
    if match is None:
        return None
    value = match.group(1) if match.group(1) is not None else match.group(2)
    return value.strip()


def strip_thinking(text: str) -> str:
    """Remove complete think blocks; an unclosed `<think>` makes the turn invalid (the action was never written)."""
    stripped = _THINK_BLOCK.sub("", text)
    if _THINK_OPEN.search(stripped):
        raise CanvasError(
            ErrorCode.PARSE_ERROR,
            "Unclosed <think> block: the turn ended while still thinking. Close </think> and then write one action.",
        )
    return _THINK_CLOSE.sub("", stripped)


def _required(text: str, name: str, why: str) -> str:
    value = _tag(text, name)
    if not value:
        raise CanvasError(ErrorCode.PARSE_ERROR, f"Missing <{name}> tag: {why}.")
    return value


def _operator_list(raw: str, rules: CanvasRules) -> list[str]:
    names = [n for n in _LIST_SPLIT.split(raw.strip().strip("[]()")) if n]
    return [rules.operator(n) for n in names]


def _int(raw: str, name: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise CanvasError(ErrorCode.PARSE_ERROR, f"<{name}> must be an integer, got {raw.strip()!r}.") from None


def _parse_add(text: str, rules: CanvasRules) -> AddStage:
    position_raw = _tag(text, "position")
    position = _int(position_raw, "position") if position_raw else None
    structure = _tag(text, "structure")
    if structure is None:
        operator = rules.operator(
            _required(text, "operator", "an add needs <operator>NAME</operator> or a <structure>")
        )
        prompt = _tag(text, "prompt") or None
        return AddStage(stage=OperatorBlueprint(operator=operator, prompt=prompt), position=position)
    kind = structure.lower()
    if kind == "parallel":
        ops = _operator_list(_required(text, "operators", "a parallel structure lists its branches"), rules)
        return AddStage(stage=ParallelBlueprint(operators=ops), position=position)
    if kind == "conditional":
        check = rules.operator(_required(text, "condition", "a conditional needs the checker in <condition>"))
        on_fail = rules.operator(
            _required(text, "true", "a conditional needs <true>, the branch run when the check fails")
        )
        false_raw = _tag(text, "false")
        on_pass = None if not false_raw or false_raw.lower() == "done" else rules.operator(false_raw)
        return AddStage(stage=ConditionalBlueprint(check=check, on_fail=on_fail, on_pass=on_pass), position=position)
    if kind == "loop":
        ops = _operator_list(_required(text, "operators", "a loop lists its body operators"), rules)
        count_raw = _tag(text, "count")
        count = _int(count_raw, "count") if count_raw else DEFAULT_LOOP_COUNT
        return AddStage(stage=LoopBlueprint(operators=ops, count=count), position=position)
    raise CanvasError(ErrorCode.PARSE_ERROR, f"Unknown structure {structure!r}; use parallel, conditional or loop.")


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
    body = _FENCE.sub("", strip_thinking(text))
    verb_raw = _tag(body, "action")
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
        return ActionTurn(_parse_add(body, rules))
    if verb == "delete":
        return ActionTurn(DeleteNode(node_id=_required(body, "target", "say which node to delete")))
    if verb == "modify":
        target = _required(body, "target", "say which node to modify")
        operator = rules.operator(_required(body, "operator", "say the new operator"))
        return ActionTurn(ModifyNode(node_id=target, operator=operator, prompt=_tag(body, "prompt") or None))
    if verb in ("set_prompt", "setprompt"):
        target = _required(body, "target", "say which node gets the prompt")
        return ActionTurn(SetPrompt(node_id=target, prompt=_required(body, "prompt", "write the new prompt text")))
    if verb == "finish":
        return ActionTurn(Finish(answer=_tag(body, "answer") or None))
    if verb == "cancel":
        return CancelTurn()
    raise CanvasError(
        ErrorCode.PARSE_ERROR, f"Unknown action {verb_raw.strip()!r}; use one of: {', '.join(_ACTION_VERBS)}."
    )


def parse_prompt_turn(text: str) -> ParsedTurn:
    """Parse a prompt turn: the text itself is the prompt, unless it cancels or wrongly writes an action."""
    body = strip_thinking(text)
    verb = _tag(body, "action")
    if verb is not None:
        if verb.strip().lower() == "cancel":
            return CancelTurn()
        raise CanvasError(
            ErrorCode.WRONG_STATE,
            f"A prompt is expected now, but an <action>{verb.strip()}</action> was written. Write the prompt text "
            "itself, or <action>cancel</action> to abandon the pending edit.",
        )
    inline = _tag(body, "prompt")
    return PromptTurn(text=(inline if inline is not None else body).strip())
