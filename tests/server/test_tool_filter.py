"""`--tools` and `--read-only`: a server offers only the tools asked for, and refuses a name it does not have."""

from __future__ import annotations

import subprocess

import pytest
from mcp import Client, MCPError

from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import server_command, server_env


async def offered(settings: ServerSettings, registry: OperatorRegistry) -> set[str]:
    server = build_server(settings, registry=registry, runner=ScriptedRunner(), store=MemoryStore())
    async with Client(server.mcp) as client:
        return {tool.name for tool in (await client.list_tools()).tools}


async def test_an_allow_list_offers_those_tools_and_no_other(registry: OperatorRegistry) -> None:
    allowed = ["solve", "list_library", "start_job", "get_job"]
    server = build_server(
        ServerSettings(tools=allowed), registry=registry, runner=ScriptedRunner(), store=MemoryStore()
    )
    async with Client(server.mcp) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == set(allowed)
        with pytest.raises(MCPError, match="Unknown tool 'create_workflow'"):
            await client.call_tool("create_workflow", {"task": "What is 6 * 7?"})
        job = await client.call_tool(
            "start_job", {"name": "act", "arguments": {"workflow_id": "wf_0", "text": "<action>finish</action>"}}
        )
        assert job.is_error and "'act' cannot run as a job; these can: solve" in job.content[0].text  # type: ignore[union-attr]


async def test_the_read_only_profile_offers_only_read_only_tools(registry: OperatorRegistry) -> None:
    assert await offered(ServerSettings(read_only=True), registry) == {
        "get_workflow",
        "list_operators",
        "export_workflow",
        "list_workflows",
        "get_job",
        "list_jobs",
        "list_library",
    }
    assert await offered(ServerSettings(read_only=True, tools=["list_library", "solve"]), registry) == {"list_library"}


def test_an_unknown_tool_name_stops_the_server_with_the_valid_names(registry: OperatorRegistry) -> None:
    with pytest.raises(ValueError, match="--tools names unknown tools: sovle; the tools are: create_workflow"):
        build_server(ServerSettings(tools=["solve", "sovle"]), registry=registry, store=MemoryStore())
    done = subprocess.run(
        server_command("--no-executor", "--tools", "sovle"),
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
    )
    assert done.returncode == 2 and "--tools names unknown tools: sovle" in done.stderr
