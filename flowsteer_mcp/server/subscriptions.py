"""Change notifications for workflow resources, so that what the server advertises is what it does.

Why: `initialize` and `server/discover` advertise `resources.subscribe` and `resources.listChanged`; a client that
relies on them (to refresh a workflow it shows, or its list of workflows) must hear of every committed change.
The workbench announces each one (create; any edit, act, run or finish; delete; expiry) to `changed`, which
fans it out in the form each protocol era knows:

- 2026-07-28: events on the `SubscriptionBus` passed to `MCPServer(subscriptions=...)`; the SDK's
  `subscriptions/listen` streams filter, stamp and deliver them.
- Handshake era (up to 2025-11-25, the `initialize` handshake): `resources/subscribe` and
  `resources/unsubscribe` keep a per-connection set of subscribed URIs (at most MAX_SUBSCRIPTIONS_PER_SESSION,
  only resources that exist), `notifications/resources/updated` goes to the connections subscribed to a URI,
  and `notifications/resources/list_changed` to every initialized connection. A connection is registered at its
  `initialize` and removed by its own teardown (its exit stack), so a closed session leaves nothing behind.

A workflow's update is announced for its state and its Mermaid view; a created or deleted workflow changes the
resource list (`resources/list` shows each live workflow). After a delete or expiry the subscribers hear one
last update (reading the resource then fails with "not found") and their subscriptions to it end.

Delivery never holds up the call that caused it for long: connections are notified concurrently, each within
SEND_TIMEOUT_S, and shielded from the caller's cancellation so every subscriber hears of a change that was
committed. A connection that does not take a notification in time (its client stopped reading) is dropped
and logged; a client hears again after it subscribes again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import ResourcesListChanged, ResourceUpdated, SubscriptionBus
from mcp.types import INVALID_PARAMS, EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from flowsteer_mcp.canvas.text import clip
from flowsteer_mcp.server.errors import RESOURCE_NOT_FOUND
from flowsteer_mcp.server.library import LIBRARY_URI
from flowsteer_mcp.server.resources import MERMAID_URI, OPERATORS_URI, WORKFLOW_URI
from flowsteer_mcp.server.workbench import Workbench, WorkflowChange, WorkflowNotFound

log = structlog.get_logger(__name__)

MAX_SUBSCRIPTIONS_PER_SESSION = 256
SEND_TIMEOUT_S = 2.0
URI_CHARS = 100  # how much of an unknown URI an error quotes
STATIC_URIS = frozenset({OPERATORS_URI, LIBRARY_URI})  # subscribable, though they never change while serving
_WORKFLOW_URI = re.compile(r"flowsteer://workflows/(?P<id>[^/]+)(?:/mermaid)?")  # WORKFLOW_URI, MERMAID_URI


def workflow_uris(workflow_id: str) -> tuple[str, str]:
    """The resources that show one workflow: its state and its Mermaid view."""
    return WORKFLOW_URI.format(workflow_id=workflow_id), MERMAID_URI.format(workflow_id=workflow_id)


@dataclass(eq=False)
class _Listener:
    """One handshake-era connection and what it subscribed to (workflow id, or None for static resources)."""

    connection: Connection
    uris: dict[str | None, set[str]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(len(uris) for uris in self.uris.values())

    def discard(self, key: str | None, uri: str) -> None:
        uris = self.uris.get(key)
        if uris is not None:
            uris.discard(uri)
            if not uris:
                del self.uris[key]


class ResourceSubscriptions:
    """Who hears about workflow changes, and the delivery to them (see the module docstring).

    It is also a middleware: at `initialize` it registers the connection and advertises `listChanged`, which the
    SDK's handshake capabilities would leave false."""

    def __init__(self, bench: Workbench, bus: SubscriptionBus) -> None:
        self.bench = bench
        self.bus = bus
        self._listeners: dict[Connection, _Listener] = {}

    @property
    def session_count(self) -> int:
        """Handshake-era connections registered (0 once every client has gone)."""
        return len(self._listeners)

    @property
    def subscription_count(self) -> int:
        return sum(listener.count for listener in self._listeners.values())

    # ----- the middleware: registration and the advertised capability ---------------------------------------
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict):
            self._listener_of(ctx)
            capabilities = dict(result.get("capabilities") or {})
            capabilities["resources"] = {**(capabilities.get("resources") or {}), "listChanged": True}
            result = {**result, "capabilities": capabilities}
        return result

    # ----- resources/subscribe and resources/unsubscribe (handshake era) -------------------------------------
    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        """Subscribe this connection to a resource that exists; an unknown one is "Resource not found" (-32002)."""
        uri = str(params.uri)
        key = _resource_key(uri)
        listener = self._listener_of(ctx)
        known = listener.uris.setdefault(key, set())
        if uri not in known and listener.count >= MAX_SUBSCRIPTIONS_PER_SESSION:
            listener.discard(key, uri)  # drops the empty set setdefault made
            raise MCPError(
                INVALID_PARAMS,
                f"This session already holds {MAX_SUBSCRIPTIONS_PER_SESSION} resource subscriptions; "
                "unsubscribe from some (resources/unsubscribe) first.",
                data={"uri": uri},
            )
        known.add(uri)  # before the check: a delete that lands meanwhile finds it and ends it
        if key is not None:
            try:
                async with self.bench.open(key, write=False):
                    pass
            except WorkflowNotFound:
                listener.discard(key, uri)
                raise MCPError(
                    RESOURCE_NOT_FOUND,
                    f"Unknown workflow_id {key!r} (never created, deleted, or expired); only live workflows can be "
                    "subscribed to (resources/list shows them).",
                    data={"uri": uri},
                ) from None
        log.info("resource_subscribed", workflow_id=key, subscriptions=listener.count)
        return EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        """Idempotent: a URI not subscribed (or whose workflow is gone, which ended it) is no error."""
        listener = self._listeners.get(_connection_of(ctx))
        if listener is not None:
            uri = str(params.uri)
            match = _WORKFLOW_URI.fullmatch(uri)
            listener.discard(match["id"] if match else None, uri)
        return EmptyResult()

    # ----- the workbench listener ------------------------------------------------------------------------------
    async def changed(self, change: WorkflowChange) -> None:
        """The workbench listener: one committed change, told to every era's subscribers."""
        workflow_id = change.workflow_id
        updated = workflow_uris(workflow_id) if change.kind != "created" else ()
        list_changed = change.kind != "updated"
        deliveries: list[tuple[_Listener, list[str], bool]] = []
        for listener in self._listeners.values():
            uris = sorted(listener.uris.get(workflow_id, ()))
            if change.kind == "deleted":
                listener.uris.pop(workflow_id, None)
            announce = list_changed and listener.connection.initialized.is_set()
            if uris or announce:
                deliveries.append((listener, uris, announce))
        with anyio.CancelScope(shield=True):  # the change is committed: tell everyone, each within SEND_TIMEOUT_S
            with anyio.move_on_after(SEND_TIMEOUT_S):
                for uri in updated:
                    await self.bus.publish(ResourceUpdated(uri=uri))
                if list_changed:
                    await self.bus.publish(ResourcesListChanged())
            async with anyio.create_task_group() as group:
                for listener, uris, announce in deliveries:
                    group.start_soon(self._deliver, listener, uris, announce)

    async def _deliver(self, listener: _Listener, uris: list[str], announce: bool) -> None:
        connection = listener.connection
        with anyio.move_on_after(SEND_TIMEOUT_S) as scope:
            try:
                for uri in uris:
                    await connection.send_resource_updated(uri)
                if announce:
                    await connection.send_resource_list_changed()
            except Exception:
                log.warning("resource_notification_failed", session=connection.session_id, exc_info=True)
                self._forget(connection)
                return
        if scope.cancelled_caught:
            log.warning("resource_notification_timed_out", session=connection.session_id, timeout_s=SEND_TIMEOUT_S)
            self._forget(connection)

    # ----- registry ----------------------------------------------------------------------------------------
    def _listener_of(self, ctx: ServerRequestContext[Any, Any]) -> _Listener:
        connection = _connection_of(ctx)
        listener = self._listeners.get(connection)
        if listener is None:
            listener = self._listeners[connection] = _Listener(connection)
            connection.exit_stack.callback(self._forget, connection)
        return listener

    def _forget(self, connection: Connection) -> None:
        listener = self._listeners.pop(connection, None)
        if listener is not None and listener.uris:
            log.info("resource_subscriptions_ended", session=connection.session_id, subscriptions=listener.count)


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    # The request context carries the connection only inside its session proxy; the SDK has no public accessor
    # for the `Connection` (its exit stack and standalone channel) in a low-level handler.
    return ctx.session._connection


def _resource_key(uri: str) -> str | None:
    """The workflow a subscribable URI shows, None for a static resource; anything else is not found."""
    if uri in STATIC_URIS:
        return None
    match = _WORKFLOW_URI.fullmatch(uri)
    if match is None:
        shown = clip(uri, URI_CHARS)
        raise MCPError(
            RESOURCE_NOT_FOUND, f"Unknown resource {shown!r}; resources/list shows them.", data={"uri": shown}
        )
    return match["id"]


def register_subscriptions(server: MCPServer, bench: Workbench, bus: SubscriptionBus) -> ResourceSubscriptions:
    """Serve handshake-era subscriptions and feed both eras from the workbench's change announcements."""
    subscriptions = ResourceSubscriptions(bench, bus)
    bench.add_listener(subscriptions.changed)
    server.middleware.append(subscriptions)
    # MCPServer has no registration API for these two methods; the low-level server owns the handler table.
    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscriptions.subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, subscriptions.unsubscribe)
    return subscriptions
