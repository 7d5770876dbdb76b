"""Resource subscriptions and the live resource list: what `initialize` and `server/discover` advertise is sent.

Handshake era (`mode="legacy"`, what the TypeScript SDK speaks): `resources/subscribe`, then
`notifications/resources/updated` per subscribed URI and `notifications/resources/list_changed` to every session.
2026-07-28: a `subscriptions/listen` stream gets the same changes as typed events. In-memory first, then over
real stdio and HTTP server processes.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, ServerEvent, Subscription
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.shared.dispatcher import CallOptions
from mcp.types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    ResourceListChangedNotification,
    ResourceUpdatedNotification,
    SubscribeRequestParams,
)

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server import subscriptions as subscriptions_module
from flowsteer_mcp.server.app import FlowSteerServer
from flowsteer_mcp.server.subscriptions import ResourceSubscriptions, workflow_uris
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.server.test_stdio import stdio_server
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import MCP_HTTP_TIMEOUT, HttpServerProcess, ToolCaller

RESOURCE_NOT_FOUND = -32002
LIST_CHANGED = "list_changed"
WAIT_S = 10.0
PLAN = {"operator": "Plan", "prompt": "Split the product into easy parts."}


class Heard:
    """What a handshake-era client was told: updated URIs, and LIST_CHANGED for a list change, in order."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._more = anyio.Event()

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.items.append(message.params.uri)
        elif isinstance(message, ResourceListChangedNotification):
            self.items.append(LIST_CHANGED)
        else:
            return
        self._more.set()

    async def take(self, count: int) -> list[str]:
        """The next `count` notifications, waiting up to WAIT_S for them."""
        with anyio.fail_after(WAIT_S):
            while len(self.items) < count:
                self._more = anyio.Event()
                await self._more.wait()
        taken, self.items = self.items[:count], self.items[count:]
        return taken


async def events(subscription: Subscription, count: int) -> list[ServerEvent]:
    with anyio.fail_after(WAIT_S):
        seen: list[ServerEvent] = []
        async for event in subscription:
            seen.append(event)
            if len(seen) == count:
                return seen
    raise AssertionError(f"the listen stream ended after {seen}")


def registry_of(app: FlowSteerServer) -> ResourceSubscriptions:
    (found,) = [m for m in app.mcp.middleware if isinstance(m, ResourceSubscriptions)]
    return found


@asynccontextmanager
async def legacy(app: FlowSteerServer) -> AsyncIterator[tuple[ToolCaller, Heard]]:
    heard = Heard()
    async with Client(app.mcp, mode="legacy", message_handler=heard) as client:
        yield ToolCaller(client), heard


async def subscribe(tools: ToolCaller, *uris: str) -> None:
    with warnings.catch_warnings():  # the SDK flags the handshake-era methods as removed in 2026-07-28
        warnings.simplefilter("ignore")
        for uri in uris:
            await tools.client.subscribe_resource(uri)


async def unsubscribe(tools: ToolCaller, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await tools.client.unsubscribe_resource(uri)


# ----- what is advertised ------------------------------------------------------------------------------------
async def test_handshake_era_advertises_subscribe_and_list_changed(app: FlowSteerServer) -> None:
    async with legacy(app) as (tools, _):
        resources = tools.client.server_capabilities.resources
        assert tools.client.protocol_version == "2025-11-25"
    assert resources is not None and (resources.subscribe, resources.list_changed) == (True, True)


async def test_2026_era_advertises_them_and_serves_listen_not_subscribe(app: FlowSteerServer) -> None:
    async with Client(app.mcp, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        discovered = await client.session.discover()
        resources = discovered.capabilities.resources
        assert resources is not None and (resources.subscribe, resources.list_changed) == (True, True)
        with pytest.raises(MCPError) as raised:
            await subscribe(ToolCaller(client), "flowsteer://operators")
    assert raised.value.error.code == METHOD_NOT_FOUND


# ----- handshake era: resources/subscribe ------------------------------------------------------------------
async def test_a_subscriber_hears_every_committed_change(app: FlowSteerServer) -> None:
    async with legacy(app) as (tools, heard):
        workflow_id = await tools.create(options={"finish": "relaxed"})
        assert await heard.take(1) == [LIST_CHANGED]
        state, mermaid = workflow_uris(workflow_id)
        await subscribe(tools, state, mermaid)

        await tools.ok("add_operator", workflow_id=workflow_id, **PLAN)
        assert sorted(await heard.take(2)) == [state, mermaid]
        await tools.act(workflow_id, "<action>add</action><operator>Custom</operator><prompt>Solve it.</prompt>")
        assert sorted(await heard.take(2)) == [state, mermaid]
        await tools.ok("run_workflow", workflow_id=workflow_id)
        assert sorted(await heard.take(2)) == [state, mermaid]
        assert (await tools.ok("finish", workflow_id=workflow_id))["done"] is True
        assert sorted(await heard.take(2)) == [state, mermaid]
        await tools.ok("delete_workflow", workflow_id=workflow_id)
        assert sorted(await heard.take(3)) == sorted([state, mermaid, LIST_CHANGED])
        assert registry_of(app).subscription_count == 0, "a deleted workflow's subscriptions end"
        await tools.create()
        assert await heard.take(1) == [LIST_CHANGED]
        assert heard.items == []


async def test_reads_and_refused_edits_send_nothing(app: FlowSteerServer) -> None:
    async with legacy(app) as (tools, heard):
        workflow_id = await tools.create()
        await heard.take(1)
        state, mermaid = workflow_uris(workflow_id)
        await subscribe(tools, state)
        await tools.detail(workflow_id)
        await tools.client.read_resource(state)
        await tools.client.read_resource(mermaid)
        await tools.ok("export_workflow", workflow_id=workflow_id, format="json")
        await tools.ok("list_workflows")
        await tools.error("add_operator", workflow_id=workflow_id, operator="Wizard")
        await tools.error("delete_node", workflow_id=workflow_id, node_id="node_9")
        await tools.ok("add_operator", workflow_id=workflow_id, **PLAN)  # the first change since subscribing
        assert await heard.take(1) == [state]
        assert (await tools.detail(workflow_id))["state"]["dsl"] == "Plan"
        assert heard.items == []


async def test_unsubscribe_stops_updates_and_is_idempotent(app: FlowSteerServer) -> None:
    async with legacy(app) as (tools, heard):
        workflow_id = await tools.create()
        await heard.take(1)
        state, mermaid = workflow_uris(workflow_id)
        await subscribe(tools, state, mermaid, mermaid)  # subscribing twice is one subscription
        assert registry_of(app).subscription_count == 2
        await unsubscribe(tools, mermaid)
        await unsubscribe(tools, mermaid)
        await unsubscribe(tools, "flowsteer://workflows/wf_never")
        await tools.ok("add_operator", workflow_id=workflow_id, **PLAN)
        assert await heard.take(1) == [state]
        await unsubscribe(tools, state)
        await tools.ok("set_prompt", workflow_id=workflow_id, node_id="node_1", prompt="Plan it again.")
        await tools.create()  # list changes still reach every session, and come after any update would have
        assert await heard.take(1) == [LIST_CHANGED]
        assert heard.items == []


async def test_updates_reach_only_subscribers_and_list_changes_reach_every_session(app: FlowSteerServer) -> None:
    async with legacy(app) as (watcher, watched), legacy(app) as (editor, edited):
        workflow_id = await editor.create()
        assert await watched.take(1) == [LIST_CHANGED] and await edited.take(1) == [LIST_CHANGED]
        state, _ = workflow_uris(workflow_id)
        await subscribe(watcher, state)
        await editor.ok("add_operator", workflow_id=workflow_id, **PLAN)
        assert await watched.take(1) == [state]
        await editor.ok("delete_workflow", workflow_id=workflow_id)
        assert await watched.take(2) == [state, LIST_CHANGED]
        assert await edited.take(1) == [LIST_CHANGED], "the editor subscribed to nothing"


@pytest.mark.parametrize(
    "uri", ["flowsteer://workflows/wf_missing", "flowsteer://workflows/wf_missing/mermaid", "flowsteer://nothing"]
)
async def test_subscribing_to_an_unknown_resource_is_not_found(app: FlowSteerServer, uri: str) -> None:
    async with legacy(app) as (tools, _):
        with pytest.raises(MCPError) as raised:
            await subscribe(tools, uri)
        await subscribe(tools, "flowsteer://operators")  # static: it never changes, but it exists
        assert registry_of(app).subscription_count == 1
    assert raised.value.error.code == RESOURCE_NOT_FOUND
    assert raised.value.error.data == {"uri": uri}
    assert "Unknown" in raised.value.error.message


async def test_subscriptions_per_session_are_bounded(app: FlowSteerServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subscriptions_module, "MAX_SUBSCRIPTIONS_PER_SESSION", 3)
    async with legacy(app) as (tools, _), legacy(app) as (other, _):
        first, second = await tools.create(), await tools.create()
        await subscribe(tools, *workflow_uris(first), "flowsteer://operators")
        await subscribe(tools, workflow_uris(first)[0])  # already held: no new slot needed
        with pytest.raises(MCPError) as raised:
            await subscribe(tools, workflow_uris(second)[0])
        assert raised.value.error.code == INVALID_PARAMS
        assert "already holds 3 resource subscriptions" in raised.value.error.message
        await subscribe(other, workflow_uris(second)[0])  # the bound is per session
        await unsubscribe(tools, "flowsteer://operators")
        await subscribe(tools, workflow_uris(second)[0])
        assert registry_of(app).subscription_count == 4


async def test_a_closed_session_leaves_nothing_behind(app: FlowSteerServer) -> None:
    subs = registry_of(app)
    async with legacy(app) as (tools, _):
        workflow_id = await tools.create()
        await subscribe(tools, *workflow_uris(workflow_id))
        assert (subs.session_count, subs.subscription_count) == (1, 2)
    assert (subs.session_count, subs.subscription_count) == (0, 0)
    async with legacy(app) as (tools, heard):
        await tools.ok("add_operator", workflow_id=workflow_id, **PLAN)
        await tools.ok("delete_workflow", workflow_id=workflow_id)
        assert await heard.take(1) == [LIST_CHANGED]


async def test_expiry_is_announced(registry: OperatorRegistry) -> None:
    app = build_server(
        ServerSettings(workflow_ttl_s=0.2), registry=registry, runner=ScriptedRunner(), store=MemoryStore()
    )
    async with legacy(app) as (tools, heard):
        workflow_id = await tools.create()
        await heard.take(1)
        await subscribe(tools, *workflow_uris(workflow_id))
        await anyio.sleep(0.3)
        assert (await tools.ok("list_workflows"))["workflows"] == []  # the sweep that notices the expiry
        assert sorted(await heard.take(3)) == sorted([*workflow_uris(workflow_id), LIST_CHANGED])
        assert registry_of(app).subscription_count == 0


class StalledOutbound:
    """A client that stopped reading: every notification blocks."""

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise AssertionError("the server sends no requests here")

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        await anyio.sleep_forever()


class _Session:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection


async def test_a_stalled_client_delays_a_change_briefly_and_is_dropped(
    app: FlowSteerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subscriptions_module, "SEND_TIMEOUT_S", 0.2)
    subs = registry_of(app)
    workflow_id, _ = await app.bench.create(CanvasState(task=TaskSpec(problem="What is 17 * 23?", task_type="math")))
    stalled = Connection(StalledOutbound(), protocol_version="2025-11-25")
    stalled.initialized.set()
    ctx = cast(ServerRequestContext[Any, Any], type("Ctx", (), {"session": _Session(stalled)})())
    await subs.subscribe(ctx, SubscribeRequestParams(uri=workflow_uris(workflow_id)[0]))
    async with legacy(app) as (tools, heard):
        with anyio.fail_after(2):
            await tools.ok("add_operator", workflow_id=workflow_id, **PLAN)
        assert subs.session_count == 1, "the stalled client was dropped; the live one stays"
        await tools.ok("delete_workflow", workflow_id=workflow_id)
        assert await heard.take(1) == [LIST_CHANGED]


# ----- 2026-07-28: subscriptions/listen -------------------------------------------------------------------------
async def test_a_listen_stream_hears_updates_and_list_changes(app: FlowSteerServer) -> None:
    async with Client(app.mcp, mode="2026-07-28") as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create()
        state, mermaid = workflow_uris(workflow_id)
        async with client.listen(resources_list_changed=True, resource_subscriptions=[state, mermaid]) as stream:
            await tools.ok("add_operator", workflow_id=workflow_id, **PLAN)
            assert set(await events(stream, 2)) == {ResourceUpdated(state), ResourceUpdated(mermaid)}
            other = await tools.create()
            assert await events(stream, 1) == [ResourcesListChanged()]
            await tools.ok("add_operator", workflow_id=other, **PLAN)  # not subscribed: not delivered
            await tools.ok("delete_workflow", workflow_id=workflow_id)
            assert set(await events(stream, 3)) == {
                ResourceUpdated(state),
                ResourceUpdated(mermaid),
                ResourcesListChanged(),
            }


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_resources_list_shows_each_live_workflow(app: FlowSteerServer, mode: str) -> None:
    async with Client(app.mcp, mode=mode) as client:
        tools = ToolCaller(client)
        first = await tools.create("What is 17 * 23?")
        second = await tools.create("Who wrote Hamlet?")
        listed = (await tools.client.list_resources()).resources
        assert [(r.uri, r.name, r.description, r.mime_type) for r in listed] == [
            ("flowsteer://library", "library_resource", listed[0].description, "application/json"),
            ("flowsteer://operators", "operators_resource", listed[1].description, "application/json"),
            (f"flowsteer://workflows/{first}", first, "What is 17 * 23?", "application/json"),
            (f"flowsteer://workflows/{second}", second, "Who wrote Hamlet?", "application/json"),
        ]
        await tools.ok("delete_workflow", workflow_id=first)
        assert [r.uri for r in (await tools.client.list_resources()).resources] == [
            "flowsteer://library",
            "flowsteer://operators",
            f"flowsteer://workflows/{second}",
        ]


# ----- over real server processes --------------------------------------------------------------------------
async def scenario(client: Client, heard: Heard) -> None:
    """Subscribe the era's way, edit, and hear the update for exactly the subscribed URI."""
    tools = ToolCaller(client)
    workflow_id = await tools.create()
    _, mermaid = workflow_uris(workflow_id)
    if client.protocol_version == "2026-07-28":
        async with client.listen(resources_list_changed=True, resource_subscriptions=[mermaid]) as stream:
            await tools.ok("add_operator", workflow_id=workflow_id, **PLAN)
            assert await events(stream, 1) == [ResourceUpdated(mermaid)]
            await tools.ok("delete_workflow", workflow_id=workflow_id)
            assert set(await events(stream, 2)) == {ResourceUpdated(mermaid), ResourcesListChanged()}
        return
    assert await heard.take(1) == [LIST_CHANGED]
    await subscribe(tools, mermaid)
    await tools.ok("add_operator", workflow_id=workflow_id, **PLAN)
    assert await heard.take(1) == [mermaid]
    await tools.ok("delete_workflow", workflow_id=workflow_id)
    assert await heard.take(2) == [mermaid, LIST_CHANGED]


ERAS = [("legacy", "2025-11-25"), ("auto", "2026-07-28")]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_subscriptions_over_stdio(mode: str, version: str) -> None:
    heard = Heard()
    async with Client(stdio_server(), mode=mode, message_handler=heard) as client:
        assert client.protocol_version == version
        await scenario(client, heard)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_subscriptions_over_http(mode: str, version: str) -> None:
    token = "subscriptions-token-5d1e"
    heard = Heard()
    with HttpServerProcess("--no-executor", env={"FLOWSTEER_MCP_TOKEN": token}) as server:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=MCP_HTTP_TIMEOUT) as http,
            Client(streamable_http_client(server.url, http_client=http), mode=mode, message_handler=heard) as client,
        ):
            assert client.protocol_version == version
            await scenario(client, heard)
