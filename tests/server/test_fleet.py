"""A fleet of real `flowsteer-mcp` HTTP servers on one PostgreSQL database serves any workflow from any server.

Create on A, edit on B, read on C: every server sees every acknowledged edit at once (none serves a cached
copy). Kill one server with SIGKILL mid-episode: the client carries on on another, and no acknowledged edit is
lost; an edit in flight at the kill lands whole or not at all, and never leaves the workflow locked.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any

import anyio
import pytest

from tests.support.postgres import PostgresServer
from tests.support.servers import HttpServerProcess, ToolCaller, http_client

pytestmark = pytest.mark.slow
TOKEN = "fleet-token"

EDITS: list[tuple[str, dict[str, Any]]] = [
    ("act", {"text": "<action>add</action><operator>Plan</operator>"}),
    ("act", {"text": "Split the product into partial products."}),
    ("add_structure", {"structure": "parallel", "operators": ["Programmer", "Custom"]}),
    ("set_prompt", {"node_id": "node_2_p0", "prompt": "Compute it in Python."}),
    ("add_operator", {"operator": "Format"}),
    ("delete_node", {"node_id": "node_3"}),
]


@contextmanager
def fleet(size: int, store: str, env: dict[str, str] | None = None) -> Iterator[list[HttpServerProcess]]:
    """`size` servers on one store, started together (each takes seconds to import) and stopped by PID."""
    servers = [
        HttpServerProcess(
            "--no-executor", "--store", store, "--log-level", "INFO", env={"FLOWSTEER_MCP_TOKEN": TOKEN, **(env or {})}
        )
        for _ in range(size)
    ]
    with ExitStack() as stack:
        for server in servers:
            stack.callback(server.__exit__)
        with ThreadPoolExecutor(size) as pool:
            list(pool.map(HttpServerProcess.start, servers))
        yield servers


async def edit(tools: ToolCaller, workflow_id: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return await tools.ok(tool, workflow_id=workflow_id, **arguments)


async def test_create_on_one_server_edit_on_another_read_on_a_third(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    with fleet(3, postgres_dsn) as (a, b, c):
        async with (
            http_client(a.url, TOKEN) as on_a,
            http_client(b.url, TOKEN) as on_b,
            http_client(c.url, TOKEN) as on_c,
        ):
            tools = [ToolCaller(on_a), ToolCaller(on_b), ToolCaller(on_c)]
            workflow_id = await tools[0].create("What is 17 * 23?", task_type="math")
            for k, (tool, arguments) in enumerate(EDITS):
                step = await edit(tools[(k + 1) % 3], workflow_id, tool, arguments)  # B, C, A, B, ...
                for reader in tools:  # every server sees the edit the moment it was acknowledged
                    detail = await reader.detail(workflow_id)
                    assert detail["state"] == step["state"] and detail["history_length"] == k + 1
            assert step["state"]["dsl"] == "Plan -> [Programmer, Custom]"
            for reader in tools:
                listed = (await reader.ok("list_workflows"))["workflows"]
                assert [w["workflow_id"] for w in listed] == [workflow_id]
            await tools[2].ok("delete_workflow", workflow_id=workflow_id)
            assert "Unknown workflow_id" in await tools[1].error("get_workflow", workflow_id=workflow_id)
        for server in (a, b, c):  # the DSN's password is never logged
            assert "workflow_store_opened" in server.logs() and postgres_server.password not in server.logs()


async def test_a_server_killed_mid_episode_loses_no_acknowledged_edit(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    # the password from the environment (libpq's PGPASSWORD), not the command line every local user can read
    without_password = postgres_dsn.replace(f":{postgres_server.password}@", "@")
    with fleet(2, without_password, env={"PGPASSWORD": postgres_server.password}) as (a, b):
        acknowledged: list[dict[str, Any]] = []
        try:
            async with http_client(a.url, TOKEN) as on_a:
                tools = ToolCaller(on_a)
                workflow_id = await tools.create("What is 17 * 23?", task_type="math")
                acknowledged += [await edit(tools, workflow_id, tool, arguments) for tool, arguments in EDITS[:4]]

                async def in_flight() -> None:
                    await tools.client.call_tool("add_operator", {"workflow_id": workflow_id, "operator": "Format"})

                async with anyio.create_task_group() as group:  # an edit in flight when the server dies
                    group.start_soon(in_flight)
                    await anyio.sleep(0.1)
                    a.kill()
                    group.cancel_scope.cancel()
        except Exception:  # the client's connection to the dead server fails as it closes
            if a.process is None or a.process.poll() is None:
                raise
        assert len(acknowledged) == 4
        async with http_client(b.url, TOKEN) as on_b:
            tools = ToolCaller(on_b)
            detail = await tools.detail(workflow_id)
            last = acknowledged[-1]["state"]
            assert detail["history_length"] in (4, 5)  # the in-flight edit landed whole, or not at all
            if detail["history_length"] == 4:
                assert detail["state"] == last
            else:
                assert detail["state"]["dsl"] == last["dsl"] + " -> Format"
            prompts = {n["id"]: n["prompt"] for n in detail["state"]["nodes"]}
            assert prompts["node_1"] == "Split the product into partial products."
            assert prompts["node_2_p0"] == "Compute it in Python."
            with anyio.fail_after(10):  # the dead server's lock died with it: B edits at once
                step = await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
            assert step["state"]["dsl"].endswith("-> Custom")
            assert (await tools.detail(workflow_id))["history_length"] == detail["history_length"] + 1
