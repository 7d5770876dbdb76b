"""Streamable HTTP: a real `flowsteer-mcp --transport http` process with bearer auth, bind safety and load."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import anyio
import httpx
import pytest
from mcp import MCPError

from tests.support.servers import (
    REPO_ROOT,
    HttpServerProcess,
    ToolCaller,
    free_port,
    http_client,
    server_command,
    server_env,
)

pytestmark = pytest.mark.slow

TOKEN = "test-token-8f2c"
JSON_RPC = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server() -> Iterator[HttpServerProcess]:
    with HttpServerProcess("--no-executor", env={"FLOWSTEER_MCP_TOKEN": TOKEN}) as process:
        yield process


def flatten(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in flatten(inner)]
    return [error]


async def test_bearer_token_is_accepted(server: HttpServerProcess) -> None:
    async with http_client(server.url, TOKEN) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create("What is 17 * 23?", task_type="math")
        step = await tools.act(
            workflow_id, "<action>add</action><operator>Programmer</operator><prompt>Compute it in Python.</prompt>"
        )
        assert step["ok"] is True and step["state"]["dsl"] == "Programmer"
        assert step["execution"]["status"] == "no_executor"
        assert (await tools.detail(workflow_id))["state"]["round"] == 1
        message = await tools.error("add_operator", workflow_id=workflow_id, operator="Wizard")
        assert "Unknown operator 'Wizard'" in message
        await tools.ok("delete_workflow", workflow_id=workflow_id)


@pytest.mark.parametrize("token", [None, "wrong-token", TOKEN + "x", TOKEN[:-1]])
async def test_missing_or_wrong_token_is_rejected(server: HttpServerProcess, token: str | None) -> None:
    with pytest.raises(BaseException) as raised:
        async with http_client(server.url, token) as client:
            await client.call_tool("list_workflows", {})
    assert any(isinstance(e, MCPError) for e in flatten(raised.value)), raised.value
    headers = MCP_HEADERS | ({"Authorization": f"Bearer {token}"} if token else {})
    async with httpx.AsyncClient() as raw:
        response = await raw.post(server.url, json=JSON_RPC, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="flowsteer"'
    assert response.json()["error"] == "unauthorized"
    assert TOKEN not in response.text


async def test_body_limit(server: HttpServerProcess) -> None:
    """(The Host/Origin policy, with and without a token, is tested in test_http_remote.py.)"""
    headers = MCP_HEADERS | {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient() as raw:
        huge = await raw.post(server.url, content=b"x" * (4 * 1024 * 1024 + 1), headers=headers)
        assert huge.status_code == 413


async def test_token_env_names_the_variable() -> None:
    with HttpServerProcess(
        "--no-executor", "--token-env", "MY_MCP_SECRET", env={"MY_MCP_SECRET": "other-secret"}
    ) as process:
        async with http_client(process.url, "other-secret") as client:
            assert (await ToolCaller(client).ok("list_workflows"))["workflows"] == []
        async with httpx.AsyncClient() as raw:
            response = await raw.post(
                process.url, json=JSON_RPC, headers=MCP_HEADERS | {"Authorization": f"Bearer {TOKEN}"}
            )
        assert response.status_code == 401


def test_non_loopback_bind_without_a_token_is_refused() -> None:
    command = server_command("--transport", "http", "--host", "0.0.0.0", "--port", str(free_port()), "--no-executor")
    finished = subprocess.run(command, cwd=REPO_ROOT, env=server_env(), capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2
    assert "Refusing to listen on 0.0.0.0 without a bearer token" in finished.stderr
    assert "FLOWSTEER_MCP_TOKEN" in finished.stderr


async def test_concurrent_clients_see_only_their_own_workflows(server: HttpServerProcess) -> None:
    operators = ["Plan", "Custom", "Programmer", "AnswerGenerate", "Review", "Verify", "Revise", "Format"]
    seen: dict[str, str] = {}

    async def session(k: int) -> None:
        mine = operators[k]
        async with http_client(server.url, TOKEN) as client:
            tools = ToolCaller(client)
            workflow_id = await tools.create(f"Client {k}: what is {k} + {k}?")
            await tools.act(
                workflow_id, f"<action>add</action><operator>{mine}</operator><prompt>Client {k} prompt.</prompt>"
            )
            await tools.ok("add_operator", workflow_id=workflow_id, operator=mine)
            step = await tools.act(workflow_id, f"<action>add</action><operator>{mine}</operator>")
            step = await tools.act(workflow_id, f"Second prompt of client {k}.")
            assert step["state"]["dsl"] == f"{mine} -> {mine} -> {mine}"
            detail = await tools.detail(workflow_id)
            assert detail["task"]["problem"] == f"Client {k}: what is {k} + {k}?"
            assert [n["prompt"] for n in detail["state"]["nodes"]] == [
                f"Client {k} prompt.",
                None,
                f"Second prompt of client {k}.",
            ]
            assert detail["state"]["round"] == 4 and detail["history_length"] == 4
            seen[workflow_id] = detail["state"]["dsl"]

    async with anyio.create_task_group() as group:
        for k in range(len(operators)):
            group.start_soon(session, k)
    assert sorted(seen.values()) == sorted(f"{op} -> {op} -> {op}" for op in operators)
    async with http_client(server.url, TOKEN) as client:
        tools = ToolCaller(client)
        listed = {w["workflow_id"]: w["dsl"] for w in (await tools.ok("list_workflows"))["workflows"]}
        assert {wid: listed[wid] for wid in seen} == seen
        for workflow_id in seen:
            await tools.ok("delete_workflow", workflow_id=workflow_id)
