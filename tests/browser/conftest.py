"""Fixtures for the real-browser tests: Debian's `chromium` driven by Playwright against real viewer processes.

Why the distribution's browser and not Playwright's own build: downloading a browser at run time fails offline
and in CI, so `make system-deps` installs the `chromium` package and Playwright drives it via `executable_path`.
Without it (or without the `playwright` package) these tests skip and say why, unless
`FLOWSTEER_REQUIRE_BROWSER=1` declares that the set-up promised a browser: then its absence fails.

Servers are started the way users start them (the installed console scripts), on a free loopback port, and are
always stopped by PID (`HttpServerProcess`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio

from tests.support.servers import HttpServerProcess, ToolCaller, flowsteer_mcp_script, free_port, http_client

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

REQUIRE_BROWSER = os.environ.get("FLOWSTEER_REQUIRE_BROWSER") == "1"
TOKEN_ENV = "FLOWSTEER_MCP_TOKEN"
# How long a page may take to show what a test waits for; a ceiling for hangs, never an assertion on speed.
WAIT_MS = 20_000


def chromium_executable() -> str | None:
    return shutil.which("chromium")


def missing_browser_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is missing (pip install -e '.[dev]')"
    if chromium_executable() is None:
        return "no `chromium` on PATH (run `make system-deps` or `apt-get install chromium`)"
    return None


@pytest.fixture(scope="session", autouse=True)
def chromium_path() -> str:
    """Debian's chromium; autouse so that a test skips before it starts any server."""
    reason = missing_browser_reason()
    if reason is not None:
        if REQUIRE_BROWSER:
            pytest.fail(f"FLOWSTEER_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    path = chromium_executable()
    assert path is not None
    return path


# One browser per test module (a launch costs seconds), hence one event loop per module: test modules mark
# themselves `BROWSER_TESTS`. Each test still gets a fresh context (no shared cookies or pages).
BROWSER_TESTS = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(chromium_path: str) -> AsyncIterator[Browser]:
    """A headless Chromium. As root Chromium cannot sandbox itself, so the sandbox is on only for other users."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium_path, headless=True, chromium_sandbox=os.geteuid() != 0
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A page in a fresh context (no cookies); a script error the page raised fails the test."""
    context = await browser.new_context()
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        await context.close()
    assert errors == [], f"the page raised script errors: {errors}"


# ----- servers ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LiveServer:
    """A running `flowsteer-mcp --transport http` process: its MCP endpoint and its viewer."""

    process: HttpServerProcess
    token: str | None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.process.port}"

    @property
    def view(self) -> str:
        return f"{self.origin}/view/"

    def workflow_page(self, workflow_id: str) -> str:
        return f"{self.view}w/{workflow_id}"

    @asynccontextmanager
    async def tools(self) -> AsyncIterator[ToolCaller]:
        """An MCP client over streamable HTTP, as an assistant connects."""
        async with http_client(self.process.url, self.token) as client:
            yield ToolCaller(client)


@contextmanager
def live_server(*, token: str | None = None) -> Iterator[LiveServer]:
    """`flowsteer-mcp --transport http --port P --no-executor [--token-env VAR]`, stopped by PID on exit."""
    port = free_port()
    command: list[str] = [
        str(flowsteer_mcp_script()),
        "--transport",
        "http",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-executor",
        "--log-level",
        "WARNING",
    ]
    env: dict[str, str] = {}
    if token is not None:
        command += ["--token-env", TOKEN_ENV]
        env[TOKEN_ENV] = token
    with HttpServerProcess(command=command, port=port, env=env) as process:
        yield LiveServer(process, token)


def flowsteer_script() -> Path:
    """The installed `flowsteer` console script beside `flowsteer-mcp`."""
    return flowsteer_mcp_script().with_name("flowsteer")


@contextmanager
def episode_browser(run_dir: Path, *extra: str) -> Iterator[str]:
    """`flowsteer view RUN_DIR --port P` running; yields its base URL (ending in `/`)."""
    port = free_port()
    command: Sequence[str] = [str(flowsteer_script()), "view", str(run_dir), "--port", str(port), *extra]
    with HttpServerProcess(command=command, port=port):
        yield f"http://127.0.0.1:{port}/"
