"""Bounded and strict input at the MCP boundary (issue #33, point 5): every string and list an argument may carry
has a bound in the input schema, unknown argument keys and unpaired surrogates are refused before anything
changes, finish-policy operator names are checked against the library, and no error echoes more than a short
excerpt of what was sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.client.client import ConnectMode
from mcp.types import INVALID_PARAMS

from flowsteer_mcp.canvas.options import CanvasLimits
from flowsteer_mcp.server import ServerSettings
from flowsteer_mcp.server.app import FlowSteerServer
from flowsteer_mcp.server.screening import invalid_text
from tests.server.conftest import Connect
from tests.support.servers import ToolCaller

SURROGATE = "\ud800"
HUGE = 1_000_000
SHORT = 1_000  # the longest error message any refusal here may produce


async def workflow_ids(tools: ToolCaller) -> list[str]:
    return [w["workflow_id"] for w in (await tools.ok("list_workflows"))["workflows"]]


async def refused_creating_nothing(tools: ToolCaller, tool: str, **arguments: Any) -> str:
    """Call a creating tool that must fail: the error is short and no workflow appeared."""
    before = await workflow_ids(tools)
    message = await tools.error(tool, **arguments)
    assert len(message) < SHORT, message[:300]
    assert await workflow_ids(tools) == before
    return message


# ----- every argument is bounded in the schema ------------------------------------------------------------
def unbounded(schema: dict[str, Any], defs: dict[str, Any], where: str) -> Iterator[str]:
    """Paths of strings without maxLength (or an enum) and arrays without maxItems, following $refs."""
    if "$ref" in schema:
        yield from unbounded(defs[schema["$ref"].rsplit("/", 1)[1]], defs, where)
        return
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            yield from unbounded(option, defs, where)
    kind = schema.get("type")
    if kind == "string" and "maxLength" not in schema and "enum" not in schema and "const" not in schema:
        yield where
    if kind == "array":
        if "maxItems" not in schema:
            yield where
        yield from unbounded(schema.get("items", {}), defs, f"{where}[]")
    for name, field in schema.get("properties", {}).items():
        yield from unbounded(field, defs, f"{where}.{name}" if where else name)


async def test_every_string_and_list_of_every_tool_has_a_bound_in_its_input_schema(tools: ToolCaller) -> None:
    listed = (await tools.client.list_tools()).tools
    assert len(listed) >= 15
    missing = [
        f"{tool.name}: {path}"
        for tool in listed
        for path in unbounded(tool.input_schema, tool.input_schema.get("$defs", {}), "")
    ]
    assert missing == []
    for tool in listed:  # and unknown keys are refused: the schema says so too
        assert tool.input_schema.get("additionalProperties") is False, tool.name


# ----- options: bounded, checked against the library, nothing nonsensical -----------------------------------
@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"finish": {"preset": "p" * HUGE}}, "`options.finish.preset` is 1000000 characters; the limit is 32"),
        ({"finish": {"solver_operators": ["Programmer"] * 65}}, "`options.finish.solver_operators` has 65 items"),
        ({"finish": {"checker_operators": ["V" * HUGE]}}, "the limit is 64"),
        ({"disabled_operators": ["Plan"] * 65}, "`options.disabled_operators` has 65 items; the limit is 64"),
        ({"disabled_operators": ["Review", "X" * HUGE]}, "`options.disabled_operators[1]` is 1000000 characters"),
        ({"finish": {"verbose_output_chars": -5}}, "`options.finish.verbose_output_chars` should be greater than"),
        ({"finish": {"verbose_output_chars": 0}}, "verbose_output_chars"),
        ({"finish": {"min_operators": -1}}, "min_operators"),
        ({"finish": {"min_operators": 49}}, "`options.finish.min_operators` should be less than or equal to 48"),
    ],
)
async def test_out_of_bound_options_are_refused_before_anything_is_created(
    tools: ToolCaller, options: dict[str, Any], fragment: str
) -> None:
    for tool, extra in (("create_workflow", {}), ("import_workflow", {"spec": "Plan"})):
        message = await refused_creating_nothing(tools, tool, task="What is 2 + 2?", options=options, **extra)
        assert fragment in message, message


@pytest.mark.parametrize("field", ["solver_operators", "checker_operators"])
async def test_unknown_finish_operators_are_named_in_a_short_error(tools: ToolCaller, field: str) -> None:
    options = {"finish": {field: ["Programmer", "Wizard", "W" * 64]}}
    message = await refused_creating_nothing(tools, "create_workflow", task="What is 2 + 2?", options=options)
    assert f"Unknown operators in finish.{field}: 'Wizard', 'WWWW" in message, message
    assert "(64 characters)" in message and "Valid: Plan, Decompose" in message


async def test_unknown_disabled_operators_are_echoed_only_as_excerpts(tools: ToolCaller) -> None:
    options = {"disabled_operators": ["Review", "D" * 64]}
    message = await refused_creating_nothing(tools, "create_workflow", task="What is 2 + 2?", options=options)
    assert "Unknown operators in disabled_operators: 'DDDD" in message and "(64 characters)" in message
    many = {"disabled_operators": [f"Dance{k}" for k in range(60)]}
    message = await refused_creating_nothing(tools, "create_workflow", task="What is 2 + 2?", options=many)
    assert "'Dance0'" in message and "55 more" in message


async def test_finish_operator_names_are_stored_in_their_registered_spelling(
    tools: ToolCaller,
) -> None:
    """A lower-case checker name used to be stored as given and then never matched the graph's operators."""
    policy = {"min_operators": 1, "require_checker": True, "checker_operators": ["verify", " Test "]}
    workflow_id = await tools.create(options={"finish": policy, "disabled_operators": ["review", "Review"]})
    options = (await tools.detail(workflow_id))["options"]
    assert options["finish"]["checker_operators"] == ["Verify", "Test"]
    assert options["disabled_operators"] == ["Review"]
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Verify")
    assert (await tools.ok("finish", workflow_id=workflow_id))["done"] is True


async def test_a_gate_that_no_workflow_could_pass_is_refused(connect: Connect) -> None:
    async with connect(ServerSettings(limits=CanvasLimits(max_operators=4))) as tools:
        too_many = {"finish": {"min_operators": 5}}
        message = await refused_creating_nothing(tools, "create_workflow", task="What is 2 + 2?", options=too_many)
        assert "finish.min_operators is 5, but a workflow holds at most 4 operators" in message
        no_solver = {"finish": {"require_solver": True, "solver_operators": []}}
        message = await refused_creating_nothing(tools, "create_workflow", task="What is 2 + 2?", options=no_solver)
        assert "require_solver is true but finish.solver_operators is empty" in message
        assert await tools.create(options={"finish": {"min_operators": 4}})


def test_a_server_cannot_raise_a_limit_past_what_its_schema_publishes() -> None:
    with pytest.raises(ValueError, match="max_task_chars"):
        ServerSettings(max_task_chars=10**6)
    with pytest.raises(ValueError, match="max_import_chars"):
        ServerSettings(max_import_chars=10**7)
    with pytest.raises(ValueError, match="max_act_chars"):
        ServerSettings(limits=CanvasLimits(max_act_chars=64_000))
    assert ServerSettings(limits=CanvasLimits(max_act_chars=200, min_prompt_chars=20))


# ----- unknown argument keys ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("create_workflow", {"task": "What is 2 + 2?", "bogus": 1}),
        ("import_workflow", {"spec": "Plan", "task": "What is 2 + 2?", "libary": "mine"}),
        ("list_operators", {"verbose": True}),
        ("list_workflows", {"ctx": {}}),
    ],
)
async def test_unknown_argument_keys_are_refused_by_name(
    tools: ToolCaller, tool: str, arguments: dict[str, Any]
) -> None:
    message = await refused_creating_nothing(tools, tool, **arguments)
    unknown = next(key for key in arguments if key not in {"task", "spec"})
    assert message.startswith(f"Error executing tool {tool}: invalid arguments: "), message
    assert f"unknown argument `{unknown}`" in message, message


async def test_unknown_argument_keys_on_an_edit_change_nothing(tools: ToolCaller) -> None:
    workflow_id = await tools.create()
    before = await tools.snapshot(workflow_id)
    message = await tools.error("add_operator", workflow_id=workflow_id, operator="Plan", postion=0)
    assert "unknown argument `postion`" in message and "position" in message, message
    assert await tools.snapshot(workflow_id) == before


async def test_many_and_long_unknown_keys_are_named_short(tools: ToolCaller) -> None:
    arguments = {"task": "What is 2 + 2?", "k" * HUGE: 1} | {f"extra{n}": n for n in range(40)}
    message = await refused_creating_nothing(tools, "create_workflow", **arguments)
    assert "unknown arguments" in message and "…" in message and "more" in message, message


@pytest.mark.parametrize(
    "options",
    [{"bogus": 1}, {"finish": {"preset": "mine", "bogus": 1}}, {"finish": {"k" * HUGE: 1}}, {"Z" * HUGE: True}],
)
async def test_unknown_nested_keys_are_refused_short(tools: ToolCaller, options: dict[str, Any]) -> None:
    message = await refused_creating_nothing(tools, "create_workflow", task="What is 2 + 2?", options=options)
    assert "is not a known field" in message, message


# ----- unpaired surrogates, everywhere ------------------------------------------------------------------
def surrogate_cases() -> list[tuple[str, dict[str, Any], str]]:
    task = {"task": "What is 2 + 2?"}
    wid = "WID"  # replaced by a real workflow id
    return [
        ("create_workflow", {"task": f"What is 2{SURROGATE} + 2?"}, "task"),
        ("create_workflow", task | {"entry_point": f"solve{SURROGATE}"}, "entry_point"),
        ("create_workflow", task | {"public_tests": f"assert f() == 1{SURROGATE}"}, "public_tests"),
        ("create_workflow", task | {"options": {"finish": {"preset": f"a{SURROGATE}"}}}, "options.finish.preset"),
        (
            "create_workflow",
            task | {"options": {"finish": {"solver_operators": ["Programmer", f"Plan{SURROGATE}"]}}},
            "options.finish.solver_operators[1]",
        ),
        ("create_workflow", task | {"options": {"disabled_operators": [f"R{SURROGATE}"]}}, "disabled_operators[0]"),
        ("create_workflow", task | {"options": '{"finish": {"preset": "a\\ud800"}}'}, "options.finish.preset"),
        ("import_workflow", task | {"spec": f"Plan -> Custom{SURROGATE}"}, "spec"),
        ("act", {"workflow_id": wid, "text": f"<action>add</action><operator>Plan{SURROGATE}"}, "text"),
        ("add_operator", {"workflow_id": wid, "operator": "Plan", "prompt": f"Plan {SURROGATE}it."}, "prompt"),
        ("add_operator", {"workflow_id": wid, "operator": f"Plan{SURROGATE}"}, "operator"),
        (
            "add_structure",
            {"workflow_id": wid, "structure": "parallel", "operators": ["Plan", "Custom"], "prompts": [f"{SURROGATE}"]},
            "prompts[0]",
        ),
        ("set_prompt", {"workflow_id": wid, "node_id": f"node_1{SURROGATE}", "prompt": "Think about it."}, "node_id"),
        ("finish", {"workflow_id": wid, "answer": f"4{SURROGATE}2"}, "answer"),
        ("get_workflow", {"workflow_id": f"wf_{SURROGATE}"}, "workflow_id"),
    ]


@pytest.mark.parametrize(("tool", "arguments", "where"), surrogate_cases())
async def test_an_unpaired_surrogate_is_refused_anywhere_before_anything_changes(
    tools: ToolCaller, tool: str, arguments: dict[str, Any], where: str
) -> None:
    workflow_id = await tools.create(options={"finish": "relaxed"})
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
    before = await tools.snapshot(workflow_id)
    arguments = {key: workflow_id if value == "WID" else value for key, value in arguments.items()}
    message = await tools.error(tool, **arguments)
    assert "invalid_text" in message and "unpaired surrogate" in message and where in message, message
    assert SURROGATE not in message and len(message) < SHORT
    assert await workflow_ids(tools) == [workflow_id]
    assert await tools.snapshot(workflow_id) == before


def test_a_surrogate_in_a_key_is_named_by_its_path_and_escaped() -> None:
    """Keys are screened too (the in-memory client already replaces a lone surrogate in a key, so not via MCP)."""
    problem = invalid_text({"options": {"finish": {f"pre{SURROGATE}set": "x"}}})
    assert problem is not None and problem.startswith("invalid_text: the argument name `pre\\ud800set`")
    problem = invalid_text({"operators": ["Plan", ["deep", f"x{SURROGATE}"]]})
    assert problem is not None and "`operators[1][1]` contains an unpaired surrogate" in problem
    assert "at index 1" in problem and SURROGATE not in problem
    assert invalid_text([[[]]] * 10 + [{"k": "v"}]) is None
    nested: list[object] = [f"{SURROGATE}"]
    for _ in range(50_000):  # deeper than any recursion limit
        nested = [nested]
    problem = invalid_text({"task": nested})
    assert problem is not None and "`task[0][0]" in problem and len(problem) < 400


async def test_a_surrogate_in_a_finish_policy_can_no_longer_break_get_workflow(tools: ToolCaller) -> None:
    """Found by fuzzing: the memory store accepted it, and every later get_workflow of the workflow failed."""
    await tools.error("create_workflow", task="What is 2 + 2?", options={"finish": {"preset": f"x{SURROGATE}"}})
    for workflow_id in await workflow_ids(tools):
        await tools.detail(workflow_id)
    assert await workflow_ids(tools) == []


# ----- names of tools, prompts and resources ------------------------------------------------------------
async def test_an_unknown_tool_name_is_echoed_only_as_an_excerpt(app: FlowSteerServer) -> None:
    async with Client(app.mcp) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("T" * HUGE, {})
    error = raised.value.error
    assert error.code == INVALID_PARAMS and "Unknown tool 'TTTT" in error.message and "create_workflow" in error.message
    assert len(error.message) < SHORT and len(json.dumps(error.data)) < SHORT


async def test_an_unknown_prompt_name_is_echoed_only_as_an_excerpt(app: FlowSteerServer) -> None:
    async with Client(app.mcp) as client:
        with pytest.raises(MCPError) as raised:
            await client.get_prompt("P" * HUGE, {"task": "What is 2 + 2?"})
    error = raised.value.error
    assert error.code == INVALID_PARAMS and "Unknown prompt 'PPPP" in error.message and "flow_director" in error.message
    assert len(error.message) < SHORT


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_over_long_resource_uri_is_not_found_and_echoed_short(app: FlowSteerServer, mode: ConnectMode) -> None:
    async with Client(app.mcp, mode=mode) as client:
        for uri in ("flowsteer://" + "r" * HUGE, "flowsteer://workflows/" + "w" * HUGE):
            with pytest.raises(MCPError) as raised:
                await client.read_resource(uri)
            error = raised.value.error
            assert error.code == (-32002 if mode == "legacy" else INVALID_PARAMS), error
            assert "flowsteer://" in error.message and len(error.message) < SHORT, error.message[:300]
            assert len(json.dumps(error.data)) < SHORT


@pytest.mark.parametrize(
    ("arguments", "phrase"),
    [
        ({"task": "What is 2 + 2?", "bogus": "1"}, "unknown argument `bogus`"),
        ({"task": "x" * HUGE}, "`task` is 1000000 characters; the limit is 16000"),
        ({"task": "What is 2 + 2?", "task_type": "t" * 5_000}, "Unknown task_type 'tttt"),
        ({"task": "What is 2 + 2?", "finish": "f" * 5_000}, "Unknown finish preset 'ffff"),
        ({"task": "What is 2 + 2?", "finish": f"paper{SURROGATE}"}, "`finish` contains an unpaired surrogate"),
    ],
)
async def test_prompt_arguments_are_bounded_and_strict(
    tools: ToolCaller, arguments: dict[str, str], phrase: str
) -> None:
    with pytest.raises(MCPError) as raised:
        await tools.client.get_prompt("flow_director", arguments)
    error = raised.value.error
    assert error.code == INVALID_PARAMS, error  # never an internal error
    assert phrase in error.message and len(error.message) < SHORT, error.message[:300]
