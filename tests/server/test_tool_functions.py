"""The tools as module-level functions: what the server lists is what the functions of its registration table
declare, each tool can be called alone with a constructed context, and add_structure's kinds are read when the
server is built. (test_server_functions.py calls the library, solve and job tools alone.)"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp.server.mcpserver.utilities.func_metadata import func_metadata

from flowsteer_mcp.canvas import kinds
from flowsteer_mcp.canvas.kinds.base import StructureArgs, StructureArgsError
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.app import server_tools
from flowsteer_mcp.server.toolkit import ToolKit
from flowsteer_mcp.server.tools import canvas_tools
from flowsteer_mcp.server.tools.creation import create_workflow
from flowsteer_mcp.server.tools.edits import add_operator
from flowsteer_mcp.server.tools.structures import structure_blueprint
from flowsteer_mcp.server.tools.views import delete_workflow, get_workflow
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.server.conftest import ProgressSink, tool_context
from tests.support.scripted_runner import ScriptedRunner

CANVAS_TOOLS = [
    "create_workflow",
    "import_workflow",
    "act",
    "run_workflow",
    "finish",
    "add_operator",
    "add_structure",
    "delete_node",
    "modify_node",
    "set_prompt",
    "get_workflow",
    "list_operators",
    "export_workflow",
    "delete_workflow",
    "list_workflows",
]
SERVER_TOOLS = [*CANVAS_TOOLS, "list_library", "solve", "start_job", "get_job", "cancel_job", "list_jobs"]
STATELESS = {"list_library"}  # reads only the packaged library: no context needed


async def listed_tools(server: MCPServer) -> dict[str, Any]:
    async with Client(server) as client:
        return {tool.name: tool for tool in (await client.list_tools()).tools}


async def test_each_listed_tool_is_what_its_function_declares(registry: OperatorRegistry) -> None:
    app = build_server(ServerSettings(), registry=registry, runner=ScriptedRunner(), store=MemoryStore())
    listed = await listed_tools(app.mcp)
    entries = server_tools()
    assert [entry.fn.__name__ for entry in canvas_tools()] == CANVAS_TOOLS
    assert [entry.fn.__name__ for entry in entries] == SERVER_TOOLS == list(listed)  # the table's order is listed
    for entry in entries:
        tool, context = listed[entry.fn.__name__], find_context_parameter(entry.fn)
        declared = func_metadata(entry.fn, skip_names=[context] if context else [])
        assert (context is None) == (tool.name in STATELESS), f"{tool.name} cannot reach the server's state"
        assert (tool.title, tool.annotations) == (entry.title, entry.annotations)
        assert tool.description == inspect.cleandoc(entry.fn.__doc__ or "") != ""
        strict = {**declared.arg_model.model_json_schema(by_alias=True), "additionalProperties": False}  # errors.py
        assert tool.input_schema == strict
        assert tool.output_schema == declared.output_schema is not None
    assert [name for name, tool in listed.items() if not tool.output_schema] == []  # none lost its result schema


async def test_tool_functions_run_alone_on_a_constructed_context(kit: ToolKit) -> None:
    session = ProgressSink()
    ctx = tool_context(kit, session)
    created = await create_workflow("What is 17 * 23?", ctx, task_type="math")
    step = await add_operator(created.workflow_id, "Custom", ctx, samples=2)
    assert step.ok and step.state.dsl == "Custom{2}"
    assert [progress for progress, _, _ in session.reports] == [1.0, 2.0]  # the run after the edit: started, finished
    detail = await get_workflow(created.workflow_id, ctx)
    assert (detail.task.task_type, detail.state.dsl, detail.state.round) == ("math", "Custom{2}", 1)
    assert (await delete_workflow(created.workflow_id, ctx)).deleted
    with pytest.raises(ToolError, match="Unknown workflow_id"):
        await delete_workflow(created.workflow_id, ctx)


async def test_a_tool_refuses_a_context_without_the_servers_state(kit: ToolKit) -> None:
    request: ServerRequestContext[Any, Any] = ServerRequestContext(
        session=ProgressSink(),  # type: ignore[arg-type]
        lifespan_context={},
        protocol_version="2025-11-25",
        method="tools/call",
    )
    with pytest.raises(TypeError, match="not the ToolKit"):
        await get_workflow("wf", Context(request_context=request))


def test_structure_blueprint_names_the_registered_structures_for_an_unknown_one() -> None:
    with pytest.raises(ToolError) as refused:
        structure_blueprint("spiral", StructureArgs())
    message = str(refused.value)
    assert message == "Unknown structure 'spiral'; the structures are: parallel, conditional, loop, fallback."


class SpiralKind:
    """A structure kind registered after import: only what add_structure reads of a kind."""

    name = "spiral"
    summary = "a test kind that refuses every stage"
    is_structure = True

    def from_tool(self, args: StructureArgs) -> Any:
        raise StructureArgsError(f"spiral got operators {args.operators}")


async def test_add_structure_offers_the_kinds_registered_before_the_server_is_built(
    registry: OperatorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kinds, "STRUCTURES", (*kinds.STRUCTURES, SpiralKind()))
    app = build_server(ServerSettings(), registry=registry, runner=ScriptedRunner(), store=MemoryStore())
    tool = (await listed_tools(app.mcp))["add_structure"]
    structure = tool.input_schema["properties"]["structure"]
    assert structure["enum"] == ["parallel", "conditional", "loop", "fallback", "spiral"]
    assert structure["description"].endswith("; spiral: a test kind that refuses every stage")
    assert tool.title == "Add structure (parallel, conditional, loop, fallback, spiral)"
    async with Client(app.mcp) as client:
        created = await client.call_tool("create_workflow", {"task": "What is 17 * 23?"})
        assert created.structured_content is not None
        workflow_id = created.structured_content["workflow_id"]
        result = await client.call_tool(
            "add_structure", {"workflow_id": workflow_id, "structure": "spiral", "operators": ["Custom", "Custom"]}
        )
    assert result.is_error  # accepted by the schema and reaches the kind, which refuses the stage
    assert result.content[0].text == (  # type: ignore[union-attr]
        "Error executing tool add_structure: spiral got operators ['Custom', 'Custom']"
    )
