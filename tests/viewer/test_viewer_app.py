"""The live canvas viewer: DOM contract, escaping, headers, auth (bearer, cookie sign-in), read-only routes, live
events, the mount beside /mcp and `flowsteer-mcp view`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp

from flowsteer_mcp.canvas.execution import ExecutionReport, NodeTrace
from flowsteer_mcp.canvas.kinds.node import OperatorNode
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.session import CanvasState, HistoryEntry
from flowsteer_mcp.cli import mcp_main
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.base import StoredWorkflow
from flowsteer_mcp.store.memory import MemoryStore
from flowsteer_mcp.store.sqlite import SQLiteStore
from flowsteer_mcp.viewer.app import viewer_app
from flowsteer_mcp.viewer.security import CONTENT_SECURITY_POLICY, SESSION_COOKIE, session_cookie_value
from tests.support.servers import REPO_ROOT, HttpServerProcess, ToolCaller, free_port, http_client, server_command

TOKEN = "viewer-test-token-3b9e"
HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
DATA_ROUTES = ["/view/", "/view/list/fragment", "/view/w/w1", "/view/w/w1/fragment", "/view/events"]
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def hostile_record(workflow_id: str = "w1", updated_at: float = 100.0) -> StoredWorkflow:
    trace = [
        NodeTrace(node_id="node_1", operator="Programmer", ok=True, output=f"out {HOSTILE}", llm_calls=1, tokens=42),
        NodeTrace(node_id="node_2", operator="Review", ok=False, error=f"boom {HOSTILE}"),
        NodeTrace(node_id="node_3", operator="Format", ok=True, skipped=True, note="branch not taken"),
    ]
    state = CanvasState(
        task=TaskSpec(problem=f"Solve {HOSTILE}", task_type="math"),
        graph=WorkflowGraph(
            stages=[
                OperatorNode(id="node_1", operator="Programmer", prompt=f"prompt {HOSTILE}"),
                OperatorNode(id="node_2", operator="Review"),
                OperatorNode(id="node_3", operator="Format"),
            ],
            next_index=4,
        ),
        rounds_used=2,
        last_execution=ExecutionReport(status="failed", error=f"run {HOSTILE}", trace=trace),
        last_feedback=f"feedback {HOSTILE}",
        history=[
            HistoryEntry(
                round=1, source="act", input=f"<action>add</action>{HOSTILE}", ok=True, message="Added.", dsl=""
            ),
            HistoryEntry(round=2, source="tool", input="delete node_9", ok=False, message=f"No node {HOSTILE}", dsl=""),
        ],
    )
    return StoredWorkflow(workflow_id=workflow_id, state=state, created_at=1.0, updated_at=updated_at)


async def memory_store() -> MemoryStore:
    store = MemoryStore()
    await store.put(hostile_record())
    return store


@asynccontextmanager
async def client_of(app: ASGIApp, **kwargs: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", **kwargs) as client:  # type: ignore[arg-type]
        yield client


@asynccontextmanager
async def served(app: ASGIApp) -> AsyncIterator[str]:
    """`app` on a real uvicorn in this event loop (ASGITransport buffers whole responses, so no SSE)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    )
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        with anyio.fail_after(30):
            while not server.started:  # noqa: ASYNC110 - uvicorn offers only this flag
                await anyio.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


# ----- pages and the DOM contract ------------------------------------------------------------------------
async def test_workflow_page_follows_the_dom_contract() -> None:
    async with client_of(viewer_app(await memory_store(), token=None)) as client:
        page = (await client.get("/view/w/w1")).text
    assert re.search(r'<main id="canvas" data-workflow-id="w1" data-updated-at="100.0">', page)
    assert '<body data-updates="0"' in page
    assert '<pre id="task">Solve ' in page and '<div id="graph">' in page and '<p id="feedback">' in page
    assert re.findall(r'<li class="step (\w+)">', page) == ["ok", "invalid"]
    assert re.findall(r'<tr data-node-id="(\w+)" class="(\w+)">', page) == [
        ("node_1", "ok"),
        ("node_2", "failed"),
        ("node_3", "skipped"),
    ]
    assert '<p id="run" class="failed">' in page and "Programmer -&gt; Review -&gt; Format" in page


async def test_list_page_has_one_row_per_workflow() -> None:
    store = await memory_store()
    await store.put(hostile_record("w2", updated_at=200.0))
    async with client_of(viewer_app(store, token=None)) as client:
        listing = (await client.get("/view/")).text
        fragment = (await client.get("/view/list/fragment")).text
    assert '<table id="workflows">' in listing
    assert re.findall(r'<tr class="workflow" data-workflow-id="(\w+)">', fragment) == ["w2", "w1"]
    assert '<a href="/view/w/w1">' in fragment and "2/20" in fragment and "math" in fragment


async def test_hostile_text_appears_only_escaped() -> None:
    async with client_of(viewer_app(await memory_store(), token=None)) as client:
        bodies = [(await client.get(path)).text for path in DATA_ROUTES[:4]]
    for body in bodies:
        assert HOSTILE not in body and "alert(1)</" not in body
        assert ESCAPED in body
        scripts = re.findall(r"<script[^>]*>", body)
        assert scripts in ([], ['<script src="/view/static/viewer.js" defer>']), scripts
        assert not re.search(r"\son\w+\s*=", body), "no inline event handlers"
        assert "style=" not in body


async def test_missing_workflow_is_404_and_static_files_are_served() -> None:
    async with client_of(viewer_app(MemoryStore(), token=None)) as client:
        assert (await client.get("/view/w/nope")).status_code == 404
        assert (await client.get("/view/w/nope/fragment")).status_code == 404
        script = await client.get("/view/static/viewer.js")
        css = await client.get("/view/static/viewer.css")
        assert (await client.get("/view/static/other.js")).status_code == 404
        redirect = await client.get("/view")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "EventSource" in script.text and "history.replaceState" in script.text
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert redirect.status_code == 308 and redirect.headers["location"] == "/view/"


# ----- security ------------------------------------------------------------------------------------------
async def test_security_headers_on_every_route() -> None:
    async with client_of(viewer_app(await memory_store(), token=TOKEN)) as client:
        responses = [await client.get(path, headers=BEARER) for path in DATA_ROUTES[:4]]
        responses += [await client.get("/view/static/viewer.js"), await client.get("/view/static/viewer.css")]
        responses += [await client.get("/view/"), await client.get("/view/w/nope", headers=BEARER)]
        responses += [await client.post("/view/session"), await client.post("/view/session", headers=BEARER)]
    for response in responses:
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, response.url
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    assert {response.headers["cache-control"] for response in responses[:4]} == {"no-store"}


@pytest.mark.parametrize("path", DATA_ROUTES)
async def test_data_routes_need_the_token(path: str) -> None:
    async with client_of(viewer_app(await memory_store(), token=TOKEN)) as client:
        assert (await client.get(path)).status_code == 401
        assert (await client.get(path, headers={"Authorization": "Bearer wrong"})).status_code == 401
        for cookie in (TOKEN, session_cookie_value("another-token-123")):
            assert (await client.get(path, headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})).status_code == 401
        if path != "/view/events":  # (a stream: ASGITransport would wait for its end)
            assert (await client.get(path, headers=BEARER)).status_code == 200


async def test_unauthenticated_browser_gets_a_data_free_sign_in_shell() -> None:
    async with client_of(viewer_app(await memory_store(), token=TOKEN)) as client:
        shell = await client.get("/view/w/w1", headers={"Accept": "text/html,application/xhtml+xml"})
    assert shell.status_code == 401
    assert '<script src="/view/static/viewer.js" defer></script>' in shell.text
    assert "Solve" not in shell.text and "w1" not in shell.text and "alert" not in shell.text


async def test_cookie_sign_in_flow() -> None:
    async with client_of(viewer_app(await memory_store(), token=TOKEN)) as client:
        refused = await client.post("/view/session", headers={"Authorization": "Bearer wrong-token"})
        assert refused.status_code == 401 and "set-cookie" not in refused.headers
        signed_in = await client.post("/view/session", headers=BEARER)
        assert signed_in.status_code == 204
        cookie = signed_in.headers["set-cookie"]
        value = session_cookie_value(TOKEN)
        assert cookie.startswith(f"{SESSION_COOKIE}={value};")
        assert TOKEN not in cookie and value != TOKEN
        attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/view"} <= attributes
        page = await client.get("/view/w/w1")  # the client now sends the cookie
    assert page.status_code == 200 and ESCAPED in page.text


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE", "PATCH"])
@pytest.mark.parametrize("path", DATA_ROUTES)
async def test_data_routes_are_read_only(method: str, path: str) -> None:
    store = await memory_store()
    async with client_of(viewer_app(store, token=TOKEN)) as client:
        response = await client.request(method, path, headers=BEARER)
    assert response.status_code == 405
    assert await store.get("w1") == hostile_record()


# ----- live events ---------------------------------------------------------------------------------------
async def test_event_stream_announces_a_change_after_a_put() -> None:
    store = await memory_store()
    app = viewer_app(store, token=TOKEN, poll_s=0.02)
    async with served(app) as url, httpx.AsyncClient(base_url=url, headers=BEARER) as client:
        with anyio.fail_after(20):
            async with client.stream("GET", "/view/events") as events:
                assert events.headers["content-type"].startswith("text/event-stream")
                assert events.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
                lines = events.aiter_lines()
                assert await anext(lines) == "retry: 2000"
                await store.put(hostile_record(updated_at=123.5))
                while await anext(lines) != "event: changed":
                    pass
                assert await anext(lines) == 'data: {"workflow_id": "w1", "updated_at": 123.5}'


# ----- the mount beside /mcp -----------------------------------------------------------------------------
async def test_http_app_serves_the_viewer_beside_mcp_behind_the_token() -> None:
    server = build_server(ServerSettings(token=TOKEN), store=await memory_store())
    async with client_of(server.http_app()) as client:
        assert (await client.get("/view/")).status_code == 401
        page = await client.get("/view/w/w1", headers=BEARER)
        mcp_refused = await client.post("/mcp", json={})
    assert page.status_code == 200 and ESCAPED in page.text
    assert mcp_refused.status_code == 401 and mcp_refused.headers["www-authenticate"] == 'Bearer realm="flowsteer"'


@pytest.mark.slow
async def test_mounted_viewer_shows_a_workflow_built_through_mcp() -> None:
    with HttpServerProcess("--no-executor", env={"FLOWSTEER_MCP_TOKEN": TOKEN}) as process:
        async with http_client(process.url, TOKEN) as mcp:
            workflow_id = await ToolCaller(mcp).create(f"Viewer {HOSTILE}")
        base = process.url.removesuffix("/mcp")
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get(f"/view/w/{workflow_id}")).status_code == 401
            page = await client.get(f"/view/w/{workflow_id}", headers=BEARER)
    assert page.status_code == 200
    assert f'data-workflow-id="{workflow_id}"' in page.text and f"Viewer {ESCAPED}" in page.text


# ----- flowsteer-mcp view --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--store", "memory"], "nothing to follow"),
        (["--store", "sqlite:{missing}"], "does not exist"),
        (["--store", "sqlite:{file}", "--host", "0.0.0.0"], "Refusing to listen on 0.0.0.0 without a bearer token"),
        (["--store", "sqlite:{file}", "--poll", "0"], "--poll must be a positive"),
    ],
)
def test_view_command_refusals(
    arguments: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FLOWSTEER_MCP_TOKEN", raising=False)
    file = tmp_path / "workflows.sqlite"
    anyio.run(SQLiteStore(file).close)
    filled = [a.format(missing=tmp_path / "missing.sqlite", file=file) for a in arguments]
    assert mcp_main(["view", *filled]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "missing.sqlite").exists()


@pytest.mark.slow
def test_view_command_follows_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "workflows.sqlite"
    writer = SQLiteStore(path)
    anyio.run(writer.put, hostile_record())
    port = free_port()
    command = server_command("view", "--store", f"sqlite:{path}", "--port", str(port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWSTEER_")} | {"PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()  # printed once the viewer listens
        assert first.strip() == f"viewer: http://127.0.0.1:{port}/view/", first or process.stderr.read()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            assert ESCAPED in client.get("/view/").text
            anyio.run(writer.put, hostile_record(updated_at=300.0))
            fragment = client.get("/view/w/w1/fragment")
            assert fragment.headers["x-updated-at"] == "300.0"
            with client.stream("GET", "/view/events") as events:  # an open tab must not hold a stop up
                lines = events.iter_lines()
                assert next(lines) == "retry: 2000"
                os.kill(process.pid, signal.SIGTERM)
                assert process.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
                assert list(lines) in ([], [""])
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        anyio.run(writer.close)


async def test_a_pending_edit_shows_before_it_joins_the_graph() -> None:
    """An add waiting for its prompt turn is not on the graph yet; the page says what is pending."""
    from mcp import Client

    from tests.support.scripted_runner import ScriptedRunner

    server = build_server(runner=ScriptedRunner())
    async with Client(server.mcp) as client:
        created = await client.call_tool("create_workflow", {"task": "What is 6*7?", "task_type": "math"})
        workflow_id = created.structured_content["workflow_id"]  # type: ignore[index]
        await client.call_tool(
            "act", {"workflow_id": workflow_id, "text": "<action>add</action><operator>Programmer</operator><prompt>"}
        )
    app = viewer_app(server.bench.store, token=None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as web:
        fragment = (await web.get(f"/view/w/{workflow_id}/fragment")).text
    assert 'id="pending"' in fragment and "Programmer (node_1), 0 of 1 prompt turn(s) received" in fragment
    assert 'class="node' not in fragment.split('id="graph"')[1].split('id="pending"')[0]
