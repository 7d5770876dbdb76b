"""Parsing is linear: the DSL tokenizer never copies the rest of the text and stops at the first bad token; the
dialect finds its tags in one scan. Checked by counting work where possible; the dialect's scaling is compared
between two input sizes in the same run (a generous ratio, never an absolute time)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from flowsteer_mcp.canvas import dsl, tags
from flowsteer_mcp.canvas.dialect import parse_action_turn, parse_prompt_turn
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import default_registry

REGISTRY = default_registry()
RULES = CanvasRules(REGISTRY, CanvasOptions())


class SliceCountingStr(str):
    """A str that counts how many characters slicing copies out of it."""

    copied = 0

    def __getitem__(self, key: Any) -> str:
        piece = super().__getitem__(key)
        if isinstance(key, slice):
            SliceCountingStr.copied += len(piece)
        return piece


class CountingPattern:
    """Wraps a compiled pattern and counts the calls that scan text."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.pattern, name)
        if name in ("match", "search", "fullmatch", "finditer", "findall", "sub"):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                return attribute(*args, **kwargs)

            return counted
        return attribute


def test_the_dsl_tokenizer_copies_no_suffixes() -> None:
    text = SliceCountingStr("(" + "Plan -> " * 3000 + "Plan) * 3")
    SliceCountingStr.copied = 0
    [loop] = dsl.parse_dsl(text)
    assert len(loop.operators) == 3001  # type: ignore[union-attr]
    assert SliceCountingStr.copied <= len(text), f"copied {SliceCountingStr.copied} characters for {len(text)}"


@pytest.mark.parametrize(
    ("junk", "fragment"),
    [
        ("a " * 250_000, "expected end at position 2, found 'a'"),
        ("(" * 500_000, "expected name at position 1, found '('"),
        ("9" * 500_000, "expected name at position 0, found '99999"),
        ("Plan -> " * 62_500, "too many operators"),
        ("[" + "Plan, " * 83_333 + "Plan]", "too many operators"),
        ("Plan" + " " * 499_990 + "!", "unexpected character '!' at position 499994"),
    ],
)
def test_500k_characters_of_junk_fail_at_once_with_a_clear_error(
    junk: str, fragment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    grammar = dsl._grammar()
    counter = CountingPattern(grammar.token)
    monkeypatch.setattr(dsl, "_grammar", lambda: dataclasses.replace(grammar, token=counter))
    with pytest.raises(CanvasError) as caught:
        import_dsl(junk, RULES)
    assert caught.value.code == ErrorCode.INVALID_IMPORT
    assert fragment in caught.value.message and len(caught.value.message) < 300, caught.value.message[:300]
    assert counter.calls <= 2 * RULES.limits.max_operators + 4, f"{counter.calls} tokens read before failing"


def test_the_dialect_finds_all_tags_in_one_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingPattern(tags._TAG)
    monkeypatch.setattr(tags, "_TAG", counter)
    text = (
        "<think>a loop</think><action>add</action><structure>loop</structure>"
        "<operators>Custom, Verify</operators><count>3</count><position>0</position>"
    )
    turn = parse_action_turn(text, RULES)
    assert turn.action.stage.count == 3  # type: ignore[union-attr]
    assert counter.calls == 1
    parse_prompt_turn("<prompt>Solve it carefully.</prompt>")
    assert counter.calls == 2


def cpu_seconds(work: Callable[[], object], repeats: int) -> float:
    """The fastest of `repeats` runs, in process CPU time (least disturbed by other processes)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        with contextlib.suppress(CanvasError):
            work()
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("unit", ["<action>", "[action]", "<think>", "<action>add</action><operator>"])
def test_dialect_work_grows_linearly_with_unclosed_tags(unit: str) -> None:
    small, large = unit * 250, unit * 4000  # 16x the input: linear is ~16x the time, quadratic ~256x

    def parse(text: str) -> Callable[[], object]:
        return lambda: parse_action_turn(text, RULES)

    small_s = max(cpu_seconds(parse(small), repeats=7), 1e-5)
    large_s = cpu_seconds(parse(large), repeats=3)
    assert large_s / small_s < 64, (
        f"16x input took {large_s / small_s:.0f}x the time ({small_s:.5f}s -> {large_s:.5f}s)"
    )


async def test_act_with_thousands_of_unclosed_action_tags_is_a_normal_parse_error() -> None:
    canvas = Canvas(CanvasState(task=TaskSpec(problem="What is 6*7?")), REGISTRY)
    result = await canvas.act("<action>" * 3555)
    assert result.ok is False and result.error_code == "parse_error"
    assert "No <action> tag found" in result.message
