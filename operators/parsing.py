"""Structured replies from the executor LLM: declared fields, lenient extraction, strict coercion.

Why: small executor models rarely follow a format perfectly. They mix XML-ish tags with prose, wrap JSON in
code fences, or think aloud before answering. We therefore *extract* leniently (tags anywhere, or the first
JSON object, fenced or not), but *coerce* strictly: a verdict is read only from a whole word such as
"pass" or "false", an index only from a bare number, and never from a stray letter in the prose. A reply
that does not yield every required field raises `ReplyParseError` with a message written to be quoted back
to the model in a re-ask.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from operators.errors import OperatorsError

__all__ = [
    "ReplyError",
    "ReplyField",
    "ReplyParseError",
    "ReplySchema",
    "UnclosedThinkError",
    "coerce_bool",
    "coerce_confidence",
    "coerce_index",
    "coerce_list",
    "coerce_number",
    "defines_name",
    "extract_code",
    "find_json_object",
    "parse_reply",
    "strip_think",
]

FieldKind = Literal["text", "bool", "number", "index", "list", "confidence"]


class ReplyError(OperatorsError, ValueError):
    """A reply that cannot be used. The message is written for the model: it is quoted in the re-ask."""


class ReplyParseError(ReplyError):
    """The reply does not contain the required fields in a usable form."""


@dataclass(frozen=True)
class ReplyField:
    """One field of a structured reply.

    `hint` describes the expected content in the format instructions shown to the model.
    """

    name: str
    kind: FieldKind = "text"
    required: bool = True
    hint: str = ""


@dataclass(frozen=True)
class ReplySchema:
    """The fields an operator expects back.

    `style` selects how the format is *requested* (both styles are accepted when parsing). `bare_field`
    names the field that receives the whole reply when the model used neither tags nor JSON; it is only
    set for free-text fields where that reading cannot be a guess (e.g. Format's answer span).
    """

    fields: tuple[ReplyField, ...]
    style: Literal["tags", "json"] = "tags"
    bare_field: str | None = None

    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]


_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


class UnclosedThinkError(ReplyParseError):
    """The text ended inside a `<think>` block: what should follow the reasoning was never written."""


def strip_think(text: str) -> str:
    """The text without its reasoning, by the one rule every reader of model output shares.

    - each `<think>...</think>` block is removed (a block ends at the first `</think>` after its opening);
    - a `</think>` before any `<think>` closes reasoning whose opening was in the prompt (chat templates that
      start the assistant turn with `<think>`): everything up to it is removed;
    - an unclosed `<think>` raises `UnclosedThinkError`: the turn ended while still thinking, so nothing after
      it is an answer and nothing before it is final (docs/design/evaluation.md, "Directors": an invalid turn);
    - a stray `</think>` left after that is dropped.
    One forward scan, so linear in the text however many tags it holds.
    """
    first_open = _THINK_OPEN.search(text)
    first_close = _THINK_CLOSE.search(text)
    pos = 0
    if first_close is not None and (first_open is None or first_close.start() < first_open.start()):
        pos = first_close.end()
    kept: list[str] = []
    while (opening := _THINK_OPEN.search(text, pos)) is not None:
        closing = _THINK_CLOSE.search(text, opening.end())
        if closing is None:
            raise UnclosedThinkError(
                "the reply ended inside an unclosed <think> block; close it with </think>, then write the reply"
            )
        kept.append(text[pos : opening.start()])
        pos = closing.end()
    kept.append(text[pos:])
    return _THINK_CLOSE.sub("", "".join(kept)).strip()


def _tag_values(text: str, name: str) -> list[str]:
    pattern = re.compile(rf"<{re.escape(name)}\s*>(.*?)</{re.escape(name)}\s*>", re.IGNORECASE | re.DOTALL)
    return [m.group(1).strip() for m in pattern.finditer(text)]


def _unclosed_tag_value(text: str, name: str, names: list[str]) -> str | None:
    """Text after the last `<name>` that was never closed, up to the next field tag (or the end).

    Small models often forget a closing tag or stop right after the answer; the content is still theirs.
    """
    opening = list(re.finditer(rf"<{re.escape(name)}\s*>", text, re.IGNORECASE))
    if not opening:
        return None
    rest = text[opening[-1].end() :]
    if re.search(rf"</{re.escape(name)}\s*>", rest, re.IGNORECASE):
        return None  # closed after all: handled (or deliberately left empty) by the closed-tag reading
    boundary = re.compile("|".join(rf"</?{re.escape(n)}\s*>" for n in names), re.IGNORECASE)
    end = boundary.search(rest)
    value = rest[: end.start()] if end else rest
    return value.strip() or None


def _has_field_tag(text: str, schema: ReplySchema) -> bool:
    """Whether the reply opens any of the schema's tags (then an empty field is missing, not bare text)."""
    return any(re.search(rf"<{re.escape(f.name)}\s*>", text, re.IGNORECASE) for f in schema.fields)


def find_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` (inside a code fence or bare), or None."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _raw_fields(text: str, schema: ReplySchema) -> dict[str, Any]:
    """Collect raw field values from tags and from the first JSON object; the requested style wins."""
    from_tags: dict[str, Any] = {}
    names = schema.field_names()
    for f in schema.fields:
        values = [v for v in _tag_values(text, f.name) if v]
        if values:
            # The last occurrence wins: models sometimes echo the format template before answering.
            from_tags[f.name] = values[-1]
        elif (unclosed := _unclosed_tag_value(text, f.name, names)) is not None:
            from_tags[f.name] = unclosed
    from_json: dict[str, Any] = {}
    obj = find_json_object(text)
    if obj is not None:
        by_lower = {str(k).lower(): v for k, v in obj.items()}
        for f in schema.fields:
            if f.name.lower() in by_lower:
                from_json[f.name] = by_lower[f.name.lower()]
    if schema.style == "json":
        return {**from_tags, **from_json}
    return {**from_json, **from_tags}


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and len(value) == 0)


def parse_reply(text: str, schema: ReplySchema) -> dict[str, Any]:
    """Parse `text` into typed field values (None for absent optional fields).

    Raises ReplyParseError naming every missing or malformed field.
    """
    cleaned = strip_think(text)
    raw = _raw_fields(cleaned, schema)
    if not raw and schema.bare_field is not None and cleaned and not _has_field_tag(cleaned, schema):
        raw = {schema.bare_field: cleaned}
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in schema.fields:
        value = raw.get(f.name)
        if _is_empty(value):
            values[f.name] = None
            if f.required:
                problems.append(f"the required field <{f.name}> is missing or empty")
            continue
        try:
            coerced = _coerce(value, f.kind)
        except ReplyParseError as exc:
            problems.append(f"<{f.name}>: {exc}")
            continue
        if _is_empty(coerced) and f.required:
            problems.append(f"the required field <{f.name}> is missing or empty")
        values[f.name] = coerced
    if problems:
        if not raw:
            problems.insert(0, "no tagged fields or JSON object were found in the reply")
        raise ReplyParseError("; ".join(problems))
    return values


def _coerce(value: Any, kind: FieldKind) -> Any:
    if kind == "bool":
        return coerce_bool(value)
    if kind == "number":
        return coerce_number(value)
    if kind == "index":
        return coerce_index(value)
    if kind == "list":
        return coerce_list(value)
    if kind == "confidence":
        return coerce_confidence(value)
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


_TRUE_WORDS = frozenset(
    {"true", "yes", "pass", "passed", "correct", "valid", "approve", "approved", "accept", "accepted"}
)
_FALSE_WORDS = frozenset(
    {"false", "no", "fail", "failed", "incorrect", "invalid", "wrong", "reject", "rejected", "not correct"}
)
_DECORATION = " \t\r\n*`'\".!:;"


def coerce_bool(value: Any) -> bool:
    """A verdict from a JSON boolean or one whole word (pass/fail, true/false, yes/no, correct/incorrect)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = " ".join(value.strip(_DECORATION).lower().split())
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise ReplyParseError(f"expected one word, pass or fail (true/false, yes/no); got {_preview(value)}")


_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?$")


def coerce_number(value: Any) -> float:
    """A number from a JSON number or a string such as "1,234.5" (thousands separators allowed)."""
    if isinstance(value, bool):
        raise ReplyParseError(f"expected a number; got {_preview(value)}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip(_DECORATION.replace(".", ""))
        if text and any(c.isdigit() for c in text) and _NUMBER.match(text):
            try:
                return float(Decimal(text.replace(",", "")))
            except InvalidOperation:
                pass
    raise ReplyParseError(f"expected a number; got {_preview(value)}")


_INDEX = re.compile(r"^(?:candidate|option|answer|no\.?|number)?\s*#?\s*(\d+)$", re.IGNORECASE)


def coerce_index(value: Any) -> int:
    """A 1-based choice from a JSON integer or a bare number ("2", "#2", "Candidate 2"); never a letter."""
    if isinstance(value, bool):
        raise ReplyParseError(f"expected a candidate number; got {_preview(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        match = _INDEX.match(value.strip(_DECORATION))
        if match:
            return int(match.group(1))
    raise ReplyParseError(f"expected a candidate number such as 2; got {_preview(value)}")


_CONFIDENCE_WORDS = {"high": 0.9, "medium": 0.6, "moderate": 0.6, "low": 0.3}


def coerce_confidence(value: Any) -> float:
    """Confidence in [0, 1] from high/medium/low, a fraction, or a percentage ("85%" or 85)."""
    if isinstance(value, str):
        word = value.strip(_DECORATION).lower()
        if word in _CONFIDENCE_WORDS:
            return _CONFIDENCE_WORDS[word]
        if word.endswith("%"):
            value = word[:-1]
    number = coerce_number(value) if not isinstance(value, float) else value
    if 0.0 <= number <= 1.0:
        return number
    if 1.0 < number <= 100.0:
        return number / 100.0
    raise ReplyParseError(f"expected high, medium, low or a number between 0 and 1; got {_preview(value)}")


_LIST_MARKER = re.compile(r"^\s*(?:(?:step\s*)?\d+\s*[.):]|[-*•])\s+(.*)$", re.IGNORECASE)


def coerce_list(value: Any) -> list[str]:
    """Items from a JSON list, or from a text list whose items start a line ("1.", "2)", "-", "Step 3:").

    Numbers inside an item never split it: only a marker at the start of a line begins a new item, and
    unmarked lines continue the previous item.
    """
    if isinstance(value, list):
        return [str(item).strip() for item in value if str(item).strip()]
    if not isinstance(value, str):
        raise ReplyParseError(f"expected a list; got {_preview(value)}")
    stripped = value.strip()
    if stripped.startswith("["):
        try:
            decoded = json.loads(stripped)
        except json.JSONDecodeError:
            decoded = None
        if isinstance(decoded, list):
            return coerce_list(decoded)
    lines = [line for line in stripped.splitlines() if line.strip()]
    if not any(_LIST_MARKER.match(line) for line in lines):
        return [line.strip() for line in lines]
    items: list[str] = []
    for line in lines:
        match = _LIST_MARKER.match(line)
        if match:
            items.append(match.group(1).strip())
        elif items:
            items[-1] = f"{items[-1]} {line.strip()}"
        else:
            items.append(line.strip())
    return [item for item in items if item]


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|$)", re.DOTALL)
_PYTHON_LANGS = frozenset({"", "python", "py", "python3"})


def _parses(code: str) -> SyntaxError | None:
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return exc
    return None


def _defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def _looks_like_program(code: str) -> bool:
    """True when parsed text contains more than bare names/constants (a lone word parses as Python)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(
        not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Name | ast.Constant)) for node in tree.body
    )


def extract_code(text: str, *, entry_point: str | None = None, require_entry_point: bool = False) -> str:
    """The Python program in a reply: a fenced block, a JSON {"code": ...} object, or the bare reply.

    Among several fenced blocks the one that parses and defines `entry_point` wins (else the longest that
    parses). With `require_entry_point`, code that does not define it is rejected. Imports are never
    removed: the sandbox, not text surgery, is what keeps code contained.
    """
    code = _find_code(text, entry_point)
    if require_entry_point and entry_point and not _defines(code, entry_point):
        raise ReplyParseError(f"the code must define `{entry_point}` at module level")
    return code


def _find_code(text: str, entry_point: str | None) -> str:
    cleaned = strip_think(text)
    blocks = [m.group(2).strip() for m in _FENCE.finditer(cleaned) if m.group(1).lower() in _PYTHON_LANGS]
    blocks = [b for b in blocks if b]
    if not blocks:
        obj = find_json_object(cleaned)
        if obj is not None and isinstance(obj.get("code"), str) and obj["code"].strip():
            blocks = [obj["code"].strip()]
    if blocks:
        parsing = [b for b in blocks if _parses(b) is None]
        if not parsing:
            error = _parses(blocks[-1])
            assert error is not None
            raise ReplyParseError(f"the Python code does not parse: {error.msg} (line {error.lineno})")
        if entry_point:
            defining = [b for b in parsing if _defines(b, entry_point)]
            parsing = defining or parsing
        return max(parsing, key=len)
    if cleaned and _looks_like_program(cleaned):
        return cleaned
    raise ReplyParseError("no Python code was found; put the complete program in one ```python code block")


def defines_name(code: str, name: str) -> bool:
    """Whether `code` defines `name` at module level (function, class or assignment)."""
    return _defines(code, name)


def _preview(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
