"""Hostile input at the canvas boundary: huge numbers, invalid Unicode, oversized fields and echo bombs get a
clear CanvasError before any change (never a crash), and what the canvas stores stays small."""

from __future__ import annotations

import json

import pytest

from flowsteer_mcp.canvas.actions import AddStage, SetPrompt
from flowsteer_mcp.canvas.blueprint import LoopBlueprint, OperatorBlueprint
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.export import export_json, import_dsl, import_json
from flowsteer_mcp.canvas.numbers import MAX_NUMBER
from flowsteer_mcp.canvas.options import CanvasLimits, CanvasOptions, FinishPolicy, TaskSpec
from flowsteer_mcp.canvas.session import Canvas, CanvasState
from flowsteer_mcp.canvas.validate import CanvasRules, validate_options, validate_task
from operators.registry import default_registry

REGISTRY = default_registry()
RULES = CanvasRules(REGISTRY, CanvasOptions())
NINES = "9" * 5000
NEARLY_TOO_MANY_DIGITS = "9" * 4300  # int() still parses it; printing or adding to it is what breaks later
SURROGATE = "\ud800"
MESSAGE_BOUND = 600  # any step message about one bad value stays well under this


def new_canvas(**options: object) -> Canvas:
    state = CanvasState(task=TaskSpec(problem="What is 6*7?"), options=CanvasOptions(**options))
    return Canvas(state, REGISTRY)


def rejected(call: object, code: ErrorCode, *fragments: str) -> CanvasError:
    assert isinstance(call, CanvasError), f"expected a CanvasError, got {call!r}"
    assert call.code == code, call.message
    for fragment in fragments:
        assert fragment in call.message, call.message
    assert len(call.message) < MESSAGE_BOUND, call.message[:300]
    return call


def import_error(text: str, *, json_format: bool = False) -> CanvasError:
    with pytest.raises(CanvasError) as caught:
        (import_json if json_format else import_dsl)(text, RULES)
    return caught.value


# ----- numbers -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("digits", [NINES, NEARLY_TOO_MANY_DIGITS, "1234567"])
def test_a_dsl_loop_count_with_too_many_digits_is_an_import_error(digits: str) -> None:
    error = import_error("(Plan) * " + digits)
    rejected(error, ErrorCode.INVALID_IMPORT, "loop count", "digits")


def json_export(**changes: object) -> dict[str, object]:
    graph = import_dsl("Plan -> (Custom -> Verify) * 3", RULES)
    document: dict[str, object] = json.loads(export_json(graph))
    document["graph"].update(changes)  # type: ignore[attr-defined]
    return document


@pytest.mark.parametrize("index", [NINES, NEARLY_TOO_MANY_DIGITS, "1234567"])
def test_a_json_stage_id_with_a_huge_number_is_an_import_error(index: str) -> None:
    document = json_export()
    document["graph"]["stages"][0]["id"] = "node_" + index  # type: ignore[index]
    error = import_error(json.dumps(document), json_format=True)
    rejected(error, ErrorCode.INVALID_IMPORT, "Invalid")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (NINES, "number out of range"),  # refused by the JSON parser itself
        (NEARLY_TOO_MANY_DIGITS, "graph.next_index"),
        (str(MAX_NUMBER + 1), "graph.next_index"),
    ],
)
def test_a_json_next_index_beyond_the_bound_is_an_import_error(value: str, fragment: str) -> None:
    text = json.dumps(json_export()).replace('"next_index": 3', f'"next_index": {value}')
    assert value in text
    rejected(import_error(text, json_format=True), ErrorCode.INVALID_IMPORT, "Invalid workflow JSON", fragment)


@pytest.mark.parametrize(
    ("count", "code", "fragment"),
    [
        (NEARLY_TOO_MANY_DIGITS, ErrorCode.INVALID_IMPORT, "count"),
        (str(MAX_NUMBER + 1), ErrorCode.INVALID_IMPORT, "count"),
        ("11", ErrorCode.INVALID_STRUCTURE, "Loop count must be between 1 and 10; got 11"),
    ],
)
def test_a_json_loop_count_beyond_the_bound_is_an_import_error(count: str, code: ErrorCode, fragment: str) -> None:
    text = json.dumps(json_export()).replace('"count": 3', f'"count": {count}')
    assert count in text
    rejected(import_error(text, json_format=True), code, fragment)


async def test_a_graph_at_the_id_bound_refuses_adds_with_a_clear_error() -> None:
    canvas = new_canvas()
    canvas.state.graph.next_index = MAX_NUMBER
    before = canvas.state.model_copy(deep=True)
    with pytest.raises(CanvasError) as caught:
        await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Plan")))
    rejected(caught.value, ErrorCode.LIMIT_EXCEEDED, "node ids")
    assert canvas.state == before


@pytest.mark.parametrize("tag", ["position", "count"])
@pytest.mark.parametrize("digits", [NINES, NEARLY_TOO_MANY_DIGITS])
async def test_huge_numbers_in_act_are_a_parse_error(tag: str, digits: str) -> None:
    canvas = new_canvas()
    text = f"<action>add</action><structure>loop</structure><operators>Custom</operators><{tag}>{digits}</{tag}>"
    result = await canvas.act(text)
    assert result.ok is False and result.error_code == "parse_error", result.message
    assert f"<{tag}>" in result.message and len(result.message) < MESSAGE_BOUND
    assert canvas.state.graph.is_empty and canvas.state.rounds_used == 1


async def test_huge_typed_numbers_get_a_readable_error() -> None:
    canvas = new_canvas()
    huge = int(NEARLY_TOO_MANY_DIGITS)
    with pytest.raises(CanvasError) as caught:
        await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Plan"), position=huge))
    rejected(caught.value, ErrorCode.INVALID_POSITION, "more than 6 digits")
    with pytest.raises(CanvasError) as caught:
        await canvas.edit(AddStage(stage=LoopBlueprint(operators=["Custom"], count=-huge)))
    rejected(caught.value, ErrorCode.INVALID_STRUCTURE, "Loop count")
    assert canvas.state.rounds_used == 0


# ----- invalid Unicode -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        f"<action>add</action><operator>Plan</operator><prompt>Use {SURROGATE} steps.</prompt>",
        f"<action>finish</action><answer>4{SURROGATE}2</answer>",
        f"<action>dance{SURROGATE}</action>",
    ],
)
async def test_act_rejects_an_unpaired_surrogate_before_any_change(text: str) -> None:
    canvas = new_canvas()
    before = canvas.state.model_copy(deep=True)
    with pytest.raises(CanvasError) as caught:
        await canvas.act(text)
    rejected(caught.value, ErrorCode.INVALID_TEXT, "unpaired surrogate", f"index {text.index(SURROGATE)}")
    assert canvas.state == before


async def test_a_prompt_turn_with_an_unpaired_surrogate_is_rejected_before_any_change() -> None:
    canvas = new_canvas()
    await canvas.act("<action>add</action><operator>Plan</operator>")
    before = canvas.state.model_copy(deep=True)
    with pytest.raises(CanvasError) as caught:
        await canvas.act(f"List the steps {SURROGATE}.")
    rejected(caught.value, ErrorCode.INVALID_TEXT, "index 15")
    assert canvas.state == before


async def test_typed_edits_and_finish_reject_unpaired_surrogates() -> None:
    canvas = new_canvas(finish="relaxed")
    await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Custom")))
    before = canvas.state.model_copy(deep=True)
    with pytest.raises(CanvasError) as caught:
        await canvas.edit(SetPrompt(node_id="node_1", prompt=f"Think {SURROGATE} hard."))
    rejected(caught.value, ErrorCode.INVALID_TEXT, "The prompt", "index 6")
    with pytest.raises(CanvasError) as caught:
        await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Plan", prompt=f"{SURROGATE} plan it")))
    rejected(caught.value, ErrorCode.INVALID_TEXT, "index 0")
    with pytest.raises(CanvasError) as caught:
        await canvas.finish(answer=f"42{SURROGATE}")
    rejected(caught.value, ErrorCode.INVALID_TEXT, "The answer", "index 2")
    assert canvas.state == before


def test_imports_reject_unpaired_surrogates() -> None:
    rejected(import_error(f"Plan -> Custom{SURROGATE}"), ErrorCode.INVALID_TEXT, "index 14")
    document = json_export()
    document["graph"]["stages"][0]["prompt"] = f"Plan {SURROGATE} it."  # type: ignore[index]
    text = json.dumps(document, ensure_ascii=False)  # the raw code point, as an in-process client sends it
    rejected(import_error(text, json_format=True), ErrorCode.INVALID_TEXT, "unpaired surrogate")
    escaped = json.dumps(document)  # an escaped lone surrogate inside the JSON reaches the prompt check
    error = import_error(escaped, json_format=True)
    assert error.code in (ErrorCode.INVALID_TEXT, ErrorCode.INVALID_IMPORT) and len(error.message) < MESSAGE_BOUND


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        (
            {"problem": f"What is 6*7?{SURROGATE}"},
            "The task contains an unpaired surrogate (invalid Unicode) at index 12",
        ),
        ({"public_tests": f"assert f() == 1{SURROGATE}"}, "public_tests contains an unpaired surrogate"),
        ({"entry_point": "solve me"}, "entry_point must be a Python identifier"),
        ({"entry_point": "import os; os.system('x')"}, "entry_point must be a Python identifier"),
        ({"entry_point": "def"}, "entry_point must be a Python identifier"),
        ({"entry_point": "f" * 101}, "entry_point is 101 characters; the limit is 100"),
        ({"public_tests": "assert True\n" * 10_000}, "public_tests is 120000 characters; the limit is 8000"),
    ],
)
def test_task_fields_are_validated(fields: dict[str, str], fragment: str) -> None:
    arguments = {"problem": "What is 6*7?", **fields}
    with pytest.raises(CanvasError) as caught:
        validate_task(CanvasLimits(), **arguments)
    assert fragment in caught.value.message and len(caught.value.message) < MESSAGE_BOUND


def test_a_valid_task_passes() -> None:
    validate_task(CanvasLimits(), problem="Implement solve.", entry_point="solve", public_tests="assert solve() == 1")


# ----- field bounds and echo bombs -----------------------------------------------------------------------
async def test_a_finish_answer_is_bounded() -> None:
    canvas = new_canvas(finish="relaxed")
    await canvas.edit(AddStage(stage=OperatorBlueprint(operator="Custom")))
    before = canvas.state.model_copy(deep=True)
    with pytest.raises(CanvasError) as caught:
        await canvas.finish(answer="4" * 10_001)
    rejected(caught.value, ErrorCode.LIMIT_EXCEEDED, "10001 characters; the limit is 10000")
    assert canvas.state == before
    result = await canvas.act("<action>finish</action><answer>" + "4" * 10_001 + "</answer>")
    assert result.ok is False and result.error_code == "limit_exceeded" and not result.done
    assert canvas.state.end is None


@pytest.mark.parametrize(
    "text",
    [
        "<action>add</action><operator>" + "X" * 31_000 + "</operator>",
        "<action>delete</action><target>" + "n" * 31_000 + "</target>",
        "<action>add</action><structure>" + "s" * 31_000 + "</structure>",
        "<action>" + "d" * 31_000 + "</action>",
        "<action>add</action><structure>loop</structure><operators>Custom</operators><count>"
        + "x" * 31_000
        + "</count>",
    ],
)
async def test_an_invalid_name_is_echoed_only_as_a_short_excerpt(text: str) -> None:
    canvas = new_canvas(max_rounds=50)
    for _ in range(20):
        result = await canvas.act(text)
        assert result.ok is False
        assert len(result.message) < MESSAGE_BOUND, result.message[:200]
        assert "…" in result.message and "31000 characters" in result.message
    state = canvas.state
    assert len(state.last_feedback) < 5_000
    assert all(len(entry.message) < MESSAGE_BOUND for entry in state.history)
    assert len(state.model_dump_json()) < 20 * 3_000  # each round stores at most a clipped input and message


def test_a_long_unknown_operator_in_an_import_is_echoed_only_as_an_excerpt() -> None:
    error = import_error("Plan -> " + "X" * 30_000)
    rejected(error, ErrorCode.UNKNOWN_OPERATOR, "Unknown operator", "30000 characters")
    document = json_export()
    document["graph"]["stages"][0]["operator"] = "Y" * 30_000  # type: ignore[index]
    error = import_error(json.dumps(document), json_format=True)
    rejected(error, ErrorCode.UNKNOWN_OPERATOR, "30000 characters")


async def test_a_pending_modify_stores_the_canonical_target() -> None:
    canvas = new_canvas()
    add = "<action>add</action><structure>conditional</structure><condition>Verify</condition><true>Revise</true>"
    await canvas.act(add)
    await canvas.act("Check the answer again.")
    await canvas.act("Fix what the check found.")
    result = await canvas.act("<action>modify</action><target>node_1_true</target><operator>Custom</operator>")
    assert result.ok is True and "node_1_fail" in result.message and "node_1_true" not in result.message
    pending = canvas.state.pending
    assert pending is not None and pending.node_ids == ["node_1_fail"]
    assert pending.action.node_id == "node_1_fail"  # type: ignore[union-attr]
    result = await canvas.act("Solve it again from scratch.")
    assert result.ok is True and result.state.dsl == "Verify ? Custom : done"


def test_a_huge_value_quoted_by_the_json_validator_is_clipped() -> None:
    """Found by hostile_load: pydantic quotes a wrong union tag whole (`Input tag 'node_999…' found using 'kind'`)."""
    document = json_export()
    document["graph"]["stages"][0]["kind"] = "node_" + "9" * 4400  # type: ignore[index]
    error = import_error(json.dumps(document), json_format=True)
    rejected(error, ErrorCode.INVALID_IMPORT, "Invalid workflow JSON at graph.stages.0", "Input tag")


def test_a_huge_unknown_json_key_is_echoed_only_as_an_excerpt() -> None:
    document = json_export()
    document["graph"]["stages"][0]["k" * 50_000] = 1  # type: ignore[index]
    error = import_error(json.dumps(document), json_format=True)
    rejected(error, ErrorCode.INVALID_IMPORT, "Extra inputs are not permitted")


# ----- options (issue #33): names the library knows, a gate some workflow can pass ---------------------------
def options_error(**options: object) -> CanvasError:
    with pytest.raises(CanvasError) as caught:
        validate_options(REGISTRY, CanvasOptions(**options))  # type: ignore[arg-type]
    return caught.value


@pytest.mark.parametrize("where", ["disabled_operators", "finish.solver_operators", "finish.checker_operators"])
def test_unknown_option_operators_are_named_as_short_excerpts(where: str) -> None:
    names = ["Plan", "W" * 1_000_000] + [f"Dance{k}" for k in range(30)]
    field = where.removeprefix("finish.")
    options = {field: names} if where == field else {"finish": FinishPolicy(**{field: names})}
    error = rejected(options_error(**options), ErrorCode.UNKNOWN_OPERATOR, f"Unknown operators in {where}: 'WWW")
    assert "(1000000 characters)" in error.message and "'Dance3'" in error.message and "and 26 more" in error.message
    assert "'Plan'" not in error.message and "Valid: Plan, Decompose" in error.message


def test_option_operators_are_stored_in_their_registered_spelling_once() -> None:
    policy = FinishPolicy(solver_operators=["programmer", "Programmer ", "Custom"], checker_operators=["TEST"])
    checked = validate_options(REGISTRY, CanvasOptions(finish=policy, disabled_operators=["review", "Review"]))
    assert checked.disabled_operators == ["Review"]
    finish = checked.finish_policy()
    assert (finish.solver_operators, finish.checker_operators) == (["Programmer", "Custom"], ["Test"])
    untouched = validate_options(REGISTRY, CanvasOptions(finish="paper"))
    assert untouched.finish == "paper" and untouched.finish_policy().solver_operators is None


@pytest.mark.parametrize(
    ("policy", "fragment"),
    [
        (FinishPolicy(min_operators=49), "finish.min_operators is 49, but a workflow holds at most 48 operators"),
        (FinishPolicy(min_operators=10**4300), "more than 6 digits"),
        (FinishPolicy(require_solver=True, solver_operators=[]), "finish.require_solver is true but"),
        (FinishPolicy(require_checker=True, checker_operators=[]), "finish.checker_operators is empty"),
        (FinishPolicy(preset=f"mine{SURROGATE}"), "finish.preset contains an unpaired surrogate"),
    ],
)
def test_a_finish_gate_no_workflow_could_pass_is_refused(policy: FinishPolicy, fragment: str) -> None:
    rejected(
        options_error(finish=policy),
        ErrorCode.INVALID_OPTIONS if "preset" not in fragment else ErrorCode.INVALID_TEXT,
        fragment,
    )
