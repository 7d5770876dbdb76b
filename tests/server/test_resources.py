"""Resources (`flowsteer://operators`, `flowsteer://workflows/{id}`, `.../mermaid`) and the `flow_director` prompt."""

from __future__ import annotations

import json

import pytest
from mcp import Client, MCPError
from mcp.types import INVALID_PARAMS, TextContent, TextResourceContents

from flowsteer_mcp.server.app import FlowSteerServer
from tests.support.servers import ToolCaller


async def read_text(tools: ToolCaller, uri: str) -> tuple[str, str | None]:
    result = await tools.client.read_resource(uri)
    assert len(result.contents) == 1
    content = result.contents[0]
    assert isinstance(content, TextResourceContents)
    return content.text, content.mime_type


async def build(tools: ToolCaller) -> str:
    workflow_id = await tools.create("What is 17 * 23?", task_type="math")
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Programmer", prompt="Compute it in Python.")
    await tools.ok(
        "add_structure", workflow_id=workflow_id, structure="conditional", condition="Verify", on_fail="Revise"
    )
    return workflow_id


async def test_resources_are_listed(tools: ToolCaller) -> None:
    listed = await tools.client.list_resources()
    assert [(r.uri, r.mime_type) for r in listed.resources] == [
        ("flowsteer://library", "application/json"),
        ("flowsteer://operators", "application/json"),
    ]
    templates = await tools.client.list_resource_templates()
    assert {(t.uri_template, t.mime_type) for t in templates.resource_templates} == {
        ("flowsteer://workflows/{workflow_id}", "application/json"),
        ("flowsteer://workflows/{workflow_id}/mermaid", "text/vnd.mermaid"),
    }


async def test_operators_resource_matches_list_operators(tools: ToolCaller) -> None:
    text, mime = await read_text(tools, "flowsteer://operators")
    assert mime == "application/json"
    assert json.loads(text) == await tools.ok("list_operators")
    assert len(json.loads(text)["operators"]) == 12


async def test_workflow_resource_is_the_full_state(tools: ToolCaller) -> None:
    workflow_id = await build(tools)
    before = await tools.snapshot(workflow_id)
    text, mime = await read_text(tools, f"flowsteer://workflows/{workflow_id}")
    assert mime == "application/json"
    document = json.loads(text)
    assert document == await tools.detail(workflow_id)
    assert document["state"]["dsl"] == "Programmer -> Verify ? Revise : done"
    assert document["graph"]["stages"][0]["prompt"] == "Compute it in Python."
    assert document["state"]["round"] == 2
    assert await tools.snapshot(workflow_id) == before, "reading a resource changes nothing"


async def test_mermaid_resource_matches_the_export(tools: ToolCaller) -> None:
    workflow_id = await build(tools)
    text, mime = await read_text(tools, f"flowsteer://workflows/{workflow_id}/mermaid")
    assert mime == "text/vnd.mermaid"
    exported = await tools.ok("export_workflow", workflow_id=workflow_id, format="mermaid")
    assert text == exported["content"]
    assert "node_2_cond -- fail --> node_2_fail" in text


async def test_resources_follow_edits(tools: ToolCaller) -> None:
    workflow_id = await build(tools)
    await read_text(tools, f"flowsteer://workflows/{workflow_id}")
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Format")
    text, _ = await read_text(tools, f"flowsteer://workflows/{workflow_id}")
    assert json.loads(text)["state"]["dsl"] == "Programmer -> Verify ? Revise : done -> Format"
    mermaid, _ = await read_text(tools, f"flowsteer://workflows/{workflow_id}/mermaid")
    assert "node_3 --> answer" in mermaid


@pytest.mark.parametrize("suffix", ["", "/mermaid"])
async def test_unknown_workflow_resource_is_an_error(tools: ToolCaller, suffix: str) -> None:
    with pytest.raises(MCPError) as raised:
        await tools.client.read_resource(f"flowsteer://workflows/wf_missing{suffix}")
    assert "Unknown workflow_id 'wf_missing'" in str(raised.value)


# Resource not found: -32002 up to spec revision 2025-11-25 (the initialize handshake, which the TypeScript SDK
# speaks); 2026-07-28 retired that code for -32602 (SEP-2164).
RESOURCE_NOT_FOUND = -32002
NOT_FOUND = {"legacy": RESOURCE_NOT_FOUND, "auto": INVALID_PARAMS}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize(
    "uri", ["flowsteer://nothing", "flowsteer://workflows/wf_missing", "flowsteer://workflows/wf_missing/mermaid"]
)
async def test_unknown_resource_is_not_found_not_an_internal_error(app: FlowSteerServer, mode: str, uri: str) -> None:
    async with Client(app.mcp, mode=mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(uri)
    assert raised.value.error.code == NOT_FOUND[mode], raised.value.error
    assert raised.value.error.data == {"uri": uri}


async def test_resources_and_templates_have_titles(tools: ToolCaller) -> None:
    listed = await tools.client.list_resources()
    assert [r.title for r in listed.resources] == ["Workflow library", "Operator library"]
    templates = await tools.client.list_resource_templates()
    assert {t.uri_template: t.title for t in templates.resource_templates} == {
        "flowsteer://workflows/{workflow_id}": "Workflow state",
        "flowsteer://workflows/{workflow_id}/mermaid": "Workflow diagram (Mermaid)",
    }


async def test_prompt_arguments_are_described(tools: ToolCaller) -> None:
    (prompt,) = (await tools.client.list_prompts()).prompts
    assert prompt.title == "Flow-Director"
    descriptions = {a.name: a.description for a in prompt.arguments or []}
    assert set(descriptions) == {"task", "task_type", "finish"}
    assert all(descriptions.values()), descriptions
    assert "relaxed" in (descriptions["finish"] or "")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize(
    ("name", "arguments", "phrase"),
    [
        ("flow_director", {}, "missing required argument(s): `task`"),
        ("flow_director", {"task_type": "math"}, "missing required argument(s): `task`"),
        ("flow_directorr", {"task": "What is 17 * 23?"}, "Unknown prompt 'flow_directorr'"),
    ],
)
async def test_missing_prompt_argument_and_unknown_prompt_are_invalid_params(
    app: FlowSteerServer, mode: str, name: str, arguments: dict[str, str], phrase: str
) -> None:
    async with Client(app.mcp, mode=mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.get_prompt(name, arguments)
    assert raised.value.error.code == INVALID_PARAMS, raised.value.error
    assert phrase in raised.value.error.message


async def test_flow_director_prompt(tools: ToolCaller) -> None:
    prompts = {p.name: p for p in (await tools.client.list_prompts()).prompts}
    assert "flow_director" in prompts
    arguments = {a.name: a.required for a in prompts["flow_director"].arguments or []}
    assert arguments == {"task": True, "task_type": False, "finish": False}

    result = await tools.client.get_prompt("flow_director", {"task": "What is 17 * 23?", "task_type": "math"})
    assert len(result.messages) == 1
    message = result.messages[0]
    assert message.role == "user" and isinstance(message.content, TextContent)
    text = message.content.text
    assert text.startswith("You are the Flow-Director.")
    assert "## Problem\nWhat is 17 * 23?" in text
    assert "This is a math problem" in text
    assert "- at least 5 operator(s)" in text and "- a checker (Verify, Test, Review)" in text
    for name in ("Plan", "Programmer", "ScEnsemble", "Verify", "Revise", "Format"):
        assert f"- {name} [" in text
    assert "if the check FAILS it runs F" in text
    assert "$operators" not in text and "$finish_constraints" not in text
    assert "Round: 1/20" in text

    relaxed = await tools.client.get_prompt("flow_director", {"task": "Who wrote Hamlet?", "finish": "relaxed"})
    relaxed_text = relaxed.messages[0].content
    assert isinstance(relaxed_text, TextContent)
    assert "- at least 1 operator(s)" in relaxed_text.text and "- a checker" not in relaxed_text.text
    assert "Choose operators that fit the task" in relaxed_text.text


async def test_flow_director_prompt_creates_no_workflow(tools: ToolCaller) -> None:
    await tools.client.get_prompt("flow_director", {"task": "What is 17 * 23?"})
    assert (await tools.ok("list_workflows"))["workflows"] == []


@pytest.mark.parametrize(
    ("arguments", "phrase"),
    [
        ({"task": "   "}, "task is empty"),
        ({"task": "What is 17 * 23?", "task_type": "poetry"}, "Unknown task_type 'poetry'"),
        ({"task": "What is 17 * 23?", "finish": "strict"}, "Unknown finish preset 'strict'"),
        ({"task": "What is \ud800?"}, "unpaired surrogate"),
    ],
)
async def test_flow_director_prompt_rejects_bad_arguments_clearly(
    tools: ToolCaller, arguments: dict[str, str], phrase: str
) -> None:
    with pytest.raises(MCPError) as raised:
        await tools.client.get_prompt("flow_director", arguments)
    assert phrase in str(raised.value)
    assert raised.value.error.code == INVALID_PARAMS
