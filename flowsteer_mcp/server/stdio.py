"""Serve over stdio, answering lines that are not JSON-RPC messages instead of dropping them.

Why: the SDK's stdio transport hands a line it cannot parse to the server loop as an exception, and the loop
only logs it, so a client that sent a broken request waits forever. JSON-RPC 2.0 wants an answer: -32700
"Parse error" for text that is not JSON, -32600 "Invalid Request" for JSON that is not a message, with the id
null unless one can be read. A relay between the transport and the server loop writes those answers; all
other traffic passes through unchanged. Blank lines carry nothing and are skipped.
"""

from __future__ import annotations

from typing import Any

import anyio
import structlog
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, RequestId
from pydantic import ValidationError

log = structlog.get_logger(__name__)

Inbound = SessionMessage | Exception


async def serve_stdio(server: MCPServer) -> None:
    """`server.run("stdio")`, plus answers to malformed lines."""
    # The SDK runs an MCPServer on given streams only through its low-level server; no public accessor exists.
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        relay_send, relay_receive = anyio.create_memory_object_stream[Inbound](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(answer_malformed, read_stream, relay_send, write_stream)
            await lowlevel.run(relay_receive, write_stream, lowlevel.create_initialization_options())
            tasks.cancel_scope.cancel()


async def answer_malformed(
    inbound: ObjectReceiveStream[Inbound], relay: ObjectSendStream[Inbound], outbound: ObjectSendStream[SessionMessage]
) -> None:
    """Pass messages on to the server loop; answer each line the transport could not turn into one."""
    async with relay:
        async for item in inbound:
            if not isinstance(item, Exception):
                await relay.send(item)
                continue
            answer = error_answer(item)
            if answer is None:
                log.debug("stdio_line_skipped", error=type(item).__name__)
                continue
            log.info("stdio_malformed_line", code=answer.error.code)  # the line itself is the client's data
            await outbound.send(SessionMessage(answer))


def error_answer(error: Exception) -> JSONRPCError | None:
    """The JSON-RPC error for a line the transport rejected (None: nothing to answer)."""
    if not isinstance(error, ValidationError):
        return None
    details = error.errors(include_url=False)
    if details and details[0]["type"] == "json_invalid":
        if isinstance(details[0].get("input"), str) and not details[0]["input"].strip():
            return None  # a blank line
        return JSONRPCError(
            jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message="Parse error: the line is not JSON")
        )
    message = "Invalid Request: not a JSON-RPC 2.0 request, notification or response"
    return JSONRPCError(
        jsonrpc="2.0",
        id=_readable_id(detail.get("input") for detail in details),
        error=ErrorData(code=INVALID_REQUEST, message=message),
    )


def _readable_id(inputs: Any) -> RequestId | None:
    """The `id` of the rejected object when it has a valid one (so the client can match the answer), else None."""
    for value in inputs:
        if isinstance(value, dict):
            request_id = value.get("id")
            if isinstance(request_id, str | int) and not isinstance(request_id, bool):
                return request_id
    return None
