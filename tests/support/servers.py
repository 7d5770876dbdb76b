"""Helpers for tests that talk to a FlowSteer MCP server: a tool-call wrapper and real server processes.

`ToolCaller` turns tool results into plain dicts and fails loudly when a call that should succeed did not
(or the other way round). `HttpServerProcess` runs `python -m flowsteer_mcp --transport http` on a free
loopback port, waits until it accepts connections, and is always stopped by its PID.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
_HERMETIC_DROP = ("FLOWSTEER_", "OPENAI_")  # never let a developer's executor config or token leak into a test server
T = TypeVar("T")

# The streamable-HTTP transport holds response streams open: long reads, short everything else.
MCP_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


def result_text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


class ToolCaller:
    """Calls tools through an MCP `Client` and checks the outcome the test expects."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments)
        assert not result.is_error, f"{tool}({arguments}) failed: {result_text(result)}"
        assert result.structured_content is not None, f"{tool} returned no structured content"
        return result.structured_content

    async def error(self, tool: str, **arguments: Any) -> str:
        """Call a tool that must fail with a model-visible error; returns the error text."""
        result = await self.client.call_tool(tool, arguments)
        assert result.is_error, f"{tool}({arguments}) unexpectedly succeeded: {result.structured_content}"
        return result_text(result)

    async def create(self, task: str = "What is 17 * 23?", **arguments: Any) -> str:
        created = await self.ok("create_workflow", task=task, **arguments)
        workflow_id: str = created["workflow_id"]
        return workflow_id

    async def act(self, workflow_id: str, text: str) -> dict[str, Any]:
        return await self.ok("act", workflow_id=workflow_id, text=text)

    async def detail(self, workflow_id: str) -> dict[str, Any]:
        return await self.ok("get_workflow", workflow_id=workflow_id)

    async def snapshot(self, workflow_id: str) -> dict[str, Any]:
        """Everything an edit may change; equal snapshots mean the workflow is exactly as it was."""
        detail = await self.detail(workflow_id)
        state = detail["state"]
        return {
            "graph": detail["graph"],
            "dsl": state["dsl"],
            "round": state["round"],
            "status": state["status"],
            "awaiting_prompt_for": state["awaiting_prompt_for"],
            "history_length": detail["history_length"],
            "end": detail["end"],
            "options": detail["options"],
        }

    async def dsl(self, workflow_id: str) -> str:
        detail = await self.detail(workflow_id)
        dsl: str = detail["state"]["dsl"]
        return dsl


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without FlowSteer/OpenAI settings, plus `extra`, with the repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_HERMETIC_DROP)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def server_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "flowsteer_mcp", *args]


def flowsteer_mcp_script() -> Path:
    """The installed `flowsteer-mcp` console script of the interpreter running the tests (as the README runs it)."""
    script = Path(sys.executable).with_name("flowsteer-mcp")
    return script if script.exists() else Path(shutil.which("flowsteer-mcp") or script)


def connect_address(bind_host: str) -> str:
    """An address a client on this machine reaches a server bound to `bind_host` with (no brackets)."""
    bare = bind_host[1:-1] if bind_host.startswith("[") and bind_host.endswith("]") else bind_host
    return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(bare, bare)


def mcp_url(host: str, port: int, path: str = "/mcp") -> str:
    """`http://HOST:PORT/mcp`, with an IPv6 address in brackets."""
    bare = connect_address(host)
    shown = f"[{ipaddress.ip_address(bare)}]" if ":" in bare else bare
    return f"http://{shown}:{port}{path}"


def own_non_loopback_ipv4() -> str | None:
    """This machine's own non-loopback IPv4 address (its host name's, else the first global one `ip` lists)."""
    candidates: list[str] = []
    with suppress(OSError):
        candidates.append(socket.gethostbyname(socket.gethostname()))
    if ip := shutil.which("ip"):
        listed = subprocess.run([ip, "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True)
        candidates += [field.split("/")[0] for line in listed.stdout.splitlines() for field in line.split()[3:4]]
    for candidate in candidates:
        try:
            if not ipaddress.ip_address(candidate).is_loopback:
                return candidate
        except ValueError:
            continue
    return None


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


class HttpServerProcess:
    """A `flowsteer-mcp --transport http` subprocess on a free port (a context manager).

    By default it runs `python -m flowsteer_mcp --transport http --host 127.0.0.1 --port PORT ... *args`;
    `host` binds elsewhere, and `command` replaces the whole command line (e.g. the README's, verbatim).
    """

    def __init__(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        command: Sequence[str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.args: Sequence[str] = args
        self.host = host
        self.command = command
        self.env = server_env(env)
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - outlives __init__; closed by __exit__

    @property
    def url(self) -> str:
        return mcp_url(self.host, self.port)

    def url_via(self, host: str) -> str:
        """The endpoint as reached through another name or address of this machine."""
        return mcp_url(host, self.port)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> HttpServerProcess:
        command = (
            list(self.command)
            if self.command
            else server_command(
                "--transport",
                "http",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--log-level",
                "WARNING",
                *self.args,
            )
        )
        self.process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode} before listening:\n{self.logs()}")
            try:
                with socket.create_connection((connect_address(self.host), self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not listen on port {self.port} within {READY_TIMEOUT_S}s:\n{self.logs()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks run (simulates a crash)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """Terminate by PID, escalating to SIGKILL if it does not exit promptly."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()

    def logs(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def __enter__(self) -> HttpServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._stderr.close()


@asynccontextmanager
async def http_client(
    url: str, token: str | None = None, *, headers: Mapping[str, str] | None = None
) -> AsyncIterator[Client]:
    """An MCP client over streamable HTTP, sending `Authorization: Bearer <token>` when a token is given
    (or exactly `headers`, e.g. those of a client configuration)."""
    sent = dict(headers or {}) | ({"Authorization": f"Bearer {token}"} if token else {})
    async with (
        httpx2.AsyncClient(headers=sent or None, timeout=MCP_HTTP_TIMEOUT) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


@asynccontextmanager
async def entered_in_own_task(manager: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """Enter and exit `manager` inside one dedicated task.

    pytest-asyncio runs an async fixture's setup and teardown in different tasks, but an MCP `Client` holds
    an anyio cancel scope that must be exited by the task that entered it. Holding it in its own task makes
    the client usable as a fixture; errors raised while exiting still surface here.
    """
    entered: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    release = asyncio.Event()

    async def hold() -> None:
        try:
            async with manager as value:
                entered.set_result(value)
                await release.wait()
        except BaseException as error:
            if not entered.done():
                entered.set_exception(error)
            raise

    task = asyncio.create_task(hold())
    try:
        yield await entered
    finally:
        release.set()
        await task
