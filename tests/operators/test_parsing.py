"""Structured-reply parsing: lenient extraction, strict coercion, never a guess from stray letters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.parsing import (
    ReplyField,
    ReplyParseError,
    ReplySchema,
    UnclosedThinkError,
    coerce_bool,
    coerce_confidence,
    coerce_index,
    coerce_list,
    coerce_number,
    extract_code,
    find_json_object,
    parse_reply,
    strip_think,
)

VERDICT_SCHEMA = ReplySchema(
    fields=(
        ReplyField("feedback"),
        ReplyField("verdict", kind="bool"),
        ReplyField("note", required=False),
    )
)


def test_tags_are_parsed_and_coerced() -> None:
    reply = "Some preamble.\n<feedback>Step 2 is wrong.</feedback>\n<verdict>FAIL</verdict>"
    assert parse_reply(reply, VERDICT_SCHEMA) == {"feedback": "Step 2 is wrong.", "verdict": False, "note": None}


def test_fenced_json_object_is_accepted() -> None:
    reply = 'Here you go:\n```json\n{"feedback": "fine", "verdict": "pass"}\n```'
    assert parse_reply(reply, VERDICT_SCHEMA)["verdict"] is True


def test_json_keys_match_case_insensitively_and_booleans_stay_booleans() -> None:
    assert parse_reply('{"Feedback": "ok", "VERDICT": true}', VERDICT_SCHEMA)["verdict"] is True


def test_last_tag_occurrence_wins_over_an_echoed_template() -> None:
    reply = "<verdict>pass or fail</verdict> ... <feedback>x</feedback><verdict>pass</verdict>"
    assert parse_reply(reply, VERDICT_SCHEMA)["verdict"] is True


def test_unclosed_tags_are_read_up_to_the_next_field() -> None:
    reply = "<feedback>The sum is right\n<verdict>pass"
    assert parse_reply(reply, VERDICT_SCHEMA) == {"feedback": "The sum is right", "verdict": True, "note": None}


def test_think_blocks_are_ignored() -> None:
    reply = "<think><verdict>pass</verdict></think><feedback>no</feedback><verdict>fail</verdict>"
    assert parse_reply(reply, VERDICT_SCHEMA)["verdict"] is False
    assert strip_think("reasoning without opening tag</think>answer") == "answer"


@pytest.mark.parametrize(
    ("text", "visible"),
    [
        ("<think>plan it</think> <action>finish</action> ", "<action>finish</action>"),
        ("<THINK>a</Think>one <think>b</think>two", "one two"),
        ("<think>a <think>nested</think>after</think>end", "afterend"),
        (
            "reasoning begun in the prompt <action>add</action></think><action>finish</action>",
            "<action>finish</action>",
        ),
        ("no reasoning at all", "no reasoning at all"),
    ],
    ids=["closed", "several", "stray-close-after-a-block", "dangling-close", "none"],
)
def test_strip_think_removes_closed_blocks_and_reasoning_begun_in_the_prompt(text: str, visible: str) -> None:
    assert strip_think(text) == visible


@pytest.mark.parametrize(
    "text",
    [
        "<think>still thinking <action>finish</action>",
        "<action>finish</action><think>and one more thing",
        "<think>done</think><think>not done",
        "earlier reasoning</think><think>again",
    ],
)
def test_an_unclosed_think_makes_the_text_invalid_not_partly_read(text: str) -> None:
    with pytest.raises(UnclosedThinkError, match=r"unclosed <think>"):
        strip_think(text)


def test_an_unclosed_think_in_a_reply_is_a_parse_error_quoted_in_the_re_ask() -> None:
    with pytest.raises(ReplyParseError, match=r"close it with </think>"):
        parse_reply("<think>the verdict is <verdict>pass</verdict>", VERDICT_SCHEMA)


def test_missing_required_field_names_it() -> None:
    with pytest.raises(ReplyParseError, match=r"<verdict> is missing"):
        parse_reply("<feedback>looks fine</feedback>", VERDICT_SCHEMA)


def test_no_structure_at_all_is_reported() -> None:
    with pytest.raises(ReplyParseError, match="no tagged fields or JSON object"):
        parse_reply("I think it passes.", VERDICT_SCHEMA)


@pytest.mark.parametrize("word", ["A", "Y", "n", "the answer is a", "maybe", "passes?", ""])
def test_verdict_is_never_guessed_from_stray_letters(word: str) -> None:
    with pytest.raises(ReplyParseError):
        coerce_bool(word)


@pytest.mark.parametrize(
    ("word", "expected"),
    [("pass", True), ("**PASS**", True), ("Yes.", True), ("correct", True), ("fail", False), ("No", False)],
)
def test_verdict_words(word: str, expected: bool) -> None:
    assert coerce_bool(word) is expected


def test_bare_field_takes_an_untagged_reply() -> None:
    schema = ReplySchema(fields=(ReplyField("answer"),), bare_field="answer")
    assert parse_reply("  42  ", schema) == {"answer": "42"}
    assert parse_reply("<answer>7</answer>", schema) == {"answer": "7"}
    with pytest.raises(ReplyParseError, match="<answer> is missing"):
        parse_reply("<answer></answer>", schema)  # an empty tag is not a bare answer


def test_numbers_and_indices() -> None:
    assert coerce_number("1,234.5") == 1234.5
    assert coerce_number(3) == 3.0
    assert coerce_index("Candidate 2") == 2
    assert coerce_index("#3") == 3
    for bad in ["B", "second", "2 or 3", True]:
        with pytest.raises(ReplyParseError):
            coerce_index(bad)
    with pytest.raises(ReplyParseError):
        coerce_number("12 apples")


def test_confidence_scales() -> None:
    assert coerce_confidence("High") == 0.9
    assert coerce_confidence("85%") == 0.85
    assert coerce_confidence(0.4) == 0.4
    assert coerce_confidence("70") == 0.7
    with pytest.raises(ReplyParseError):
        coerce_confidence("very")


def test_list_items_split_only_at_line_markers() -> None:
    text = "1. Compute 3.5 times 2\n2) Add 4: the result\n   continues here\n- Report it"
    assert coerce_list(text) == ["Compute 3.5 times 2", "Add 4: the result continues here", "Report it"]
    assert coerce_list('["a", " b "]') == ["a", "b"]
    assert coerce_list("Step 1: read\nStep 2: write") == ["read", "write"]
    assert coerce_list("first line\nsecond line") == ["first line", "second line"]


def test_find_json_object_skips_non_objects() -> None:
    assert find_json_object('see [1, 2] and {"a": {"b": 1}} then {"c": 2}') == {"a": {"b": 1}}
    assert find_json_object("no json {here") is None


def test_extract_code_prefers_block_defining_entry_point() -> None:
    reply = (
        "Example:\n```python\nprint(add(1, 2))\n```\nSolution:\n"
        "```python\nimport os\n\ndef add(a, b):\n    return a + b\n```"
    )
    code = extract_code(reply, entry_point="add", require_entry_point=True)
    assert code.startswith("import os")  # imports are kept, never stripped
    assert "def add" in code


def test_extract_code_from_json_and_bare_text() -> None:
    assert extract_code('{"code": "def f():\\n    return 1"}') == "def f():\n    return 1"
    assert extract_code("def f():\n    return 1") == "def f():\n    return 1"


def test_extract_code_rejects_prose_and_bad_syntax() -> None:
    with pytest.raises(ReplyParseError, match="no Python code"):
        extract_code("The answer is simple")
    with pytest.raises(ReplyParseError, match="does not parse"):
        extract_code("```python\ndef f(:\n```")
    with pytest.raises(ReplyParseError, match="must define `g`"):
        extract_code("```python\ndef f():\n    pass\n```", entry_point="g", require_entry_point=True)


@given(st.text(max_size=300))
def test_parse_reply_never_crashes_on_arbitrary_text(text: str) -> None:
    try:
        values = parse_reply(text, VERDICT_SCHEMA)
    except ReplyParseError as exc:
        assert str(exc)
    else:
        assert isinstance(values["verdict"], bool)
