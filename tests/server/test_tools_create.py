"""create_workflow, get_workflow, list_workflows, delete_workflow and list_operators over an in-memory client."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.client.client import ConnectMode
from mcp.types import INVALID_PARAMS

from flowsteer_mcp.server import ServerSettings
from flowsteer_mcp.server.app import FlowSteerServer
from tests.server.conftest import Connect
from tests.support.servers import ToolCaller

ADVERTISED = {
    "Plan": "planning",
    "Decompose": "planning",
    "Custom": "solving",
    "AnswerGenerate": "solving",
    "Programmer": "solving",
    "Test": "verification",
    "Review": "verification",
    "Verify": "verification",
    "Revise": "revision",
    "ScEnsemble": "ensemble",
    "Aggregate": "ensemble",
    "Format": "formatting",
}

# Tools that may run the workflow, and so call the executor LLM.
EXECUTING = {
    "act",
    "add_operator",
    "add_structure",
    "delete_node",
    "modify_node",
    "set_prompt",
    "run_workflow",
    "finish",
}
# Models defined outside the MCP layer's result types (graph stats, traces, task, episode end): not checked here.
FIELDS_DESCRIBED_ELSEWHERE = {"GraphStats", "NodeTrace", "TaskSpec", "EpisodeEnd", "FinishPolicy"}


async def workflow_ids(tools: ToolCaller) -> list[str]:
    listed = await tools.ok("list_workflows")
    return [w["workflow_id"] for w in listed["workflows"]]


@pytest.mark.parametrize("task_type", ["math", "code", "qa", "general"])
async def test_create_workflow_keeps_each_task_type(tools: ToolCaller, task_type: str) -> None:
    created = await tools.ok("create_workflow", task="Solve the problem.", task_type=task_type)
    assert created["ok"] is True
    assert created["workflow_id"].startswith("wf_")
    state = created["state"]
    assert (state["dsl"], state["round"], state["max_rounds"], state["status"]) == ("", 0, 20, "building")
    assert state["nodes"] == []
    assert created["done"] is False
    assert "Solve the problem." in created["observation"]
    assert all(name in created["system_prompt"] for name in ADVERTISED)
    assert created["feedback"].startswith("<feedback>")
    detail = await tools.detail(created["workflow_id"])
    assert detail["task"]["task_type"] == task_type
    assert detail["task"]["problem"] == "Solve the problem."


async def test_auto_task_type_is_code_only_with_an_entry_point_or_tests(tools: ToolCaller) -> None:
    with_entry = await tools.create("Write add(a, b).", entry_point="add")
    with_tests = await tools.create("Write add(a, b).", public_tests="assert add(1, 2) == 3")
    plain = await tools.create("Who wrote Hamlet?")
    kinds = [(await tools.detail(w))["task"] for w in (with_entry, with_tests, plain)]
    assert [k["task_type"] for k in kinds] == ["code", "code", "general"]
    assert kinds[0]["entry_point"] == "add"
    assert kinds[1]["public_tests"] == "assert add(1, 2) == 3"


async def test_create_workflow_applies_every_option(tools: ToolCaller) -> None:
    options = {
        "max_rounds": 7,
        "finish": "relaxed",
        "execute_each_step": False,
        "hints": False,
        "lenient": True,
        "prompt_turns": False,
        "disabled_operators": ["Review"],
    }
    created = await tools.ok("create_workflow", task="Add 2 and 3.", options=options)
    assert created["state"]["max_rounds"] == 7
    assert "[BLOCK_FINISH]" not in created["feedback"]
    assert "Add 2 and 3." in created["observation"]
    detail = await tools.detail(created["workflow_id"])
    for key, value in options.items():
        assert detail["options"][key] == value
    default = await tools.ok("create_workflow", task="Add 2 and 3.")
    assert "[BLOCK_FINISH]=1" in default["feedback"]


async def test_custom_finish_policy_object_is_accepted(tools: ToolCaller) -> None:
    policy = {"preset": "mine", "min_operators": 2, "require_checker": True}
    workflow_id = await tools.create(options={"finish": policy})
    detail = await tools.detail(workflow_id)
    assert detail["options"]["finish"]["min_operators"] == 2
    assert detail["options"]["finish"]["require_checker"] is True


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"options": {"max_rounds": 201}}, "exceeds this server's cap of 200"),
        ({"options": {"disabled_operators": ["Review", "Dance"]}}, "Unknown operators in disabled_operators: 'Dance'"),
        ({"options": {"max_rounds": 0}}, "max_rounds"),
        ({"options": {"finish": "strict"}}, "finish"),
        ({"options": {"turbo": True}}, "turbo"),
        ({"task_type": "poetry"}, "task_type"),
        ({"task": "   "}, "task is empty"),
    ],
)
async def test_invalid_create_arguments_are_tool_errors_and_create_nothing(
    tools: ToolCaller, arguments: dict[str, object], expected: str
) -> None:
    existing = await tools.create()
    before = await workflow_ids(tools)
    message = await tools.error("create_workflow", **({"task": "What is 2 + 2?"} | arguments))
    assert expected in message
    assert await workflow_ids(tools) == before == [existing]


async def test_unknown_disabled_operator_error_lists_the_valid_names(tools: ToolCaller) -> None:
    message = await tools.error("create_workflow", task="x y z", options={"disabled_operators": ["Dance"]})
    assert all(name in message for name in ADVERTISED)


async def test_task_over_the_server_limit_is_refused(connect: Connect) -> None:
    async with connect(ServerSettings(max_task_chars=50)) as tools:
        message = await tools.error("create_workflow", task="x" * 51)
        assert "51 characters" in message and "at most 50" in message
        assert await workflow_ids(tools) == []
        assert await tools.create("x" * 50)


async def test_disabled_operator_cannot_be_added(tools: ToolCaller) -> None:
    workflow_id = await tools.create(options={"disabled_operators": ["review"]})
    message = await tools.error("add_operator", workflow_id=workflow_id, operator="Review")
    assert "disabled" in message and "'Review'" in message
    step = await tools.act(workflow_id, "<action>add</action><operator>Review</operator>")
    assert step["ok"] is False and step["error_code"] == "disabled_operator"
    assert (await tools.snapshot(workflow_id))["graph"]["stages"] == []


async def test_list_workflows_shows_each_workflow_with_its_own_state(tools: ToolCaller) -> None:
    first = await tools.create("First task: compute 1 + 1.", task_type="math")
    second = await tools.create("Second task: who wrote Hamlet?", task_type="qa")
    await tools.ok("add_operator", workflow_id=first, operator="Programmer", prompt="Compute it in Python.")
    listed = {w["workflow_id"]: w for w in (await tools.ok("list_workflows"))["workflows"]}
    assert set(listed) == {first, second}
    assert listed[first]["dsl"] == "Programmer" and listed[first]["round"] == 1
    assert listed[first]["task_type"] == "math"
    assert listed[first]["task_preview"] == "First task: compute 1 + 1."
    assert listed[second]["dsl"] == "" and listed[second]["round"] == 0
    assert listed[second]["status"] == "building" and listed[second]["max_rounds"] == 20


async def test_delete_workflow_removes_it_everywhere(tools: ToolCaller) -> None:
    keep = await tools.create()
    gone = await tools.create()
    deleted = await tools.ok("delete_workflow", workflow_id=gone)
    assert deleted == {"workflow_id": gone, "deleted": True}
    assert await workflow_ids(tools) == [keep]
    for tool, extra in (
        ("get_workflow", {}),
        ("act", {"text": "<action>add</action><operator>Plan</operator>"}),
        ("add_operator", {"operator": "Plan"}),
        ("export_workflow", {}),
        ("run_workflow", {}),
        ("finish", {}),
    ):
        message = await tools.error(tool, workflow_id=gone, **extra)
        assert f"Unknown workflow_id {gone!r}" in message and "create_workflow" in message
    again = await tools.error("delete_workflow", workflow_id=gone)
    assert "Unknown workflow_id" in again
    assert await workflow_ids(tools) == [keep]


async def test_list_operators_advertises_the_twelve_builtins(tools: ToolCaller) -> None:
    catalog = (await tools.ok("list_operators"))["operators"]
    assert {op["name"]: op["category"] for op in catalog} == ADVERTISED
    assert len(catalog) == 12
    by_name = {op["name"]: op for op in catalog}
    assert by_name["Verify"]["role"] == "checker"
    assert by_name["Plan"]["role"] == "guidance"
    assert by_name["Programmer"]["role"] == "solution"
    assert all(op["summary"] and op["when_to_use"] and op["signature"] for op in catalog)
    assert not any(op["legacy"] for op in catalog)


async def test_tool_annotations_mark_read_only_and_destructive_tools(tools: ToolCaller) -> None:
    client: Client = tools.client
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(listed) == {
        "create_workflow",
        "act",
        "add_operator",
        "add_structure",
        "delete_node",
        "modify_node",
        "set_prompt",
        "run_workflow",
        "finish",
        "get_workflow",
        "list_operators",
        "export_workflow",
        "import_workflow",
        "delete_workflow",
        "list_workflows",
        "start_job",
        "get_job",
        "cancel_job",
        "list_jobs",
        "list_library",
        "solve",
    }
    hints = {name: tool.annotations for name, tool in listed.items() if tool.annotations is not None}
    assert set(hints) == set(listed)
    read_only = {name for name, hint in hints.items() if hint.read_only_hint}
    assert read_only == {
        "get_workflow",
        "list_operators",
        "export_workflow",
        "list_workflows",
        "get_job",
        "list_jobs",
        "list_library",
    }
    writers = {name: hint for name, hint in hints.items() if name not in read_only}
    assert all(hint.destructive_hint is not None for hint in writers.values()), "unset means destructive"
    destructive = {name for name, hint in writers.items() if hint.destructive_hint}
    assert destructive == {
        "act",
        "delete_node",
        "modify_node",
        "set_prompt",
        "finish",
        "delete_workflow",
        "start_job",  # it may start any of the destructive tools
        "cancel_job",
        "solve",  # it finishes the episode it creates
    }
    open_world = {name for name, hint in hints.items() if hint.open_world_hint is not False}
    assert open_world == EXECUTING | {"start_job", "solve"}, "only tools that may call the executor LLM are open world"
    assert hints["set_prompt"].idempotent_hint is True
    assert listed["act"].output_schema is not None
    assert "workflow_id" in listed["act"].input_schema["required"]


async def test_every_tool_has_a_human_title(tools: ToolCaller) -> None:
    listed = (await tools.client.list_tools()).tools
    titles = {tool.name: tool.title for tool in listed}
    assert all(title and title[0].isupper() and "_" not in title for title in titles.values()), titles
    assert titles["modify_node"] == "Modify node (replace its operator)"


def described_fields(schema: dict[str, Any]) -> dict[str, bool]:
    """Every property of the schema and its $defs, and whether it carries a description."""
    found: dict[str, bool] = {}
    for owner, node in [("", schema), *schema.get("$defs", {}).items()]:
        for name, prop in node.get("properties", {}).items():
            found[f"{owner}.{name}"] = bool(prop.get("description"))
    return found


@pytest.mark.parametrize("tool", ["act", "create_workflow", "run_workflow", "get_workflow", "list_workflows"])
async def test_output_schemas_describe_the_step_result_fields(tools: ToolCaller, tool: str) -> None:
    listed = {t.name: t for t in (await tools.client.list_tools()).tools}
    schema = listed[tool].output_schema
    assert schema is not None
    fields = described_fields(schema)
    ours = {k: v for k, v in fields.items() if k.split(".")[0] not in FIELDS_DESCRIBED_ELSEWHERE}
    assert ours and all(ours.values()), [k for k, v in ours.items() if not v]


async def test_step_result_fields_clients_rely_on_are_described(tools: ToolCaller) -> None:
    listed = {t.name: t for t in (await tools.client.list_tools()).tools}
    schema = listed["act"].output_schema
    assert schema is not None
    for name in ("error_code", "end_reason", "final_answer", "execution"):
        assert schema["properties"][name]["description"], name
    execution = schema["$defs"]["ExecutionView"]["properties"]
    assert all(execution[name]["description"] for name in ("fresh", "duration_s", "cache_hits"))
    assert "awaiting_prompt" in schema["$defs"]["StateView"]["properties"]["awaiting_prompt_for"]["description"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_unknown_tool_is_invalid_params(app: FlowSteerServer, mode: ConnectMode) -> None:
    async with Client(app.mcp, mode=mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("create_workflo", {"task": "What is 2 + 2?"})
    assert raised.value.error.code == INVALID_PARAMS
    assert "Unknown tool 'create_workflo'" in raised.value.error.message
    assert "create_workflow" in raised.value.error.message, "the error lists the real tools"
    assert await app.bench.list() == []


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("get_workflow", {}, "`workflow_id` is required but missing"),
        ("get_workflow", {"workflow_id": 3}, "`workflow_id` should be a valid string, got 3 (integer)"),
        (
            "export_workflow",
            {"workflow_id": "wf_x", "format": "yaml"},
            "`format` should be 'json', 'dsl' or 'mermaid', got \"yaml\" (string)",
        ),
        (
            "create_workflow",
            {"task": "What is 2 + 2?", "options": {"max_rounds": "many"}},
            "`options.max_rounds` should be a valid integer",
        ),
        (
            "create_workflow",
            {"task": "What is 2 + 2?", "options": {"finish": 3}},
            "`options.finish` should be 'paper' or 'relaxed' or a valid dictionary",
        ),
        (
            "create_workflow",
            {"task": "What is 2 + 2?", "options": {"turbo": True}},
            "`options.turbo` is not a known field",
        ),
        (
            "add_structure",
            {"workflow_id": "wf_x", "structure": "parallel", "operators": ["Plan", 7]},
            "`operators[1]` should be a valid string, got 7 (integer)",
        ),
    ],
)
async def test_invalid_arguments_get_a_short_actionable_message(
    tools: ToolCaller, tool: str, arguments: dict[str, Any], expected: str
) -> None:
    message = await tools.error(tool, **arguments)
    assert message.startswith(f"Error executing tool {tool}: invalid arguments: "), message
    assert expected in message, message
    assert "pydantic" not in message and "http" not in message and "[type=" not in message, message
    assert "\n" not in message, "one line"


async def test_a_long_wrong_value_is_not_echoed_whole(tools: ToolCaller) -> None:
    message = await tools.error("get_workflow", workflow_id=["x" * 5000])
    assert len(message) < 300, message
    assert "got an array of 1 item(s)" in message


async def test_get_workflow_of_an_unknown_id_is_an_actionable_error(tools: ToolCaller) -> None:
    message = await tools.error("get_workflow", workflow_id="wf_doesnotexist")
    assert "Unknown workflow_id 'wf_doesnotexist'" in message
    assert "list_workflows" in message
