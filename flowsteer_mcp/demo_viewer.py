"""The demo's live viewer: `flowsteer-mcp view` on the demo server's store, so a person can watch the workflow
being built in a browser while `make demo` runs.

Why a second process on a file: the demo's server runs over stdio as an assistant would start it, and that is
exactly the case `flowsteer-mcp view` exists for. The store file lives in the demo's folder under the user's
cache (`~/.cache/flowsteer/demo/`), so the same command shows past demo workflows afterwards.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

PREFERRED_PORT = 8765
READY_TIMEOUT_S = 30.0


def demo_store_path() -> Path:
    folder = Path.home() / ".cache" / "flowsteer" / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "workflows.sqlite"


def _free_port(preferred: int = PREFERRED_PORT) -> int:
    """`preferred` when nothing listens there, else any free loopback port."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise OSError("no free loopback port for the viewer")


async def _ready_url(process: Process) -> str | None:
    """The `viewer: URL` line the command prints once it listens, or None when it exits first."""
    assert process.stdout is not None
    buffered = ""
    async for chunk in TextReceiveStream(process.stdout):
        buffered += chunk
        for line in buffered.splitlines():
            if line.startswith("viewer: "):
                return line.removeprefix("viewer: ").strip()
    return None


@asynccontextmanager
async def live_viewer(store: Path) -> AsyncIterator[str | None]:
    """Run the read-only viewer on `store` for the block; yields its URL, or None when it could not start
    (the demo goes on without it: watching is a convenience, not part of the episode)."""
    command = [sys.executable, "-m", "flowsteer_mcp", "view", "--store", f"sqlite:{store}", "--port", str(_free_port())]
    try:
        process = await anyio.open_process(command, stderr=None)
    except OSError:
        yield None
        return
    try:
        url = None
        with anyio.move_on_after(READY_TIMEOUT_S):
            url = await _ready_url(process)
        yield url
    finally:
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
        await process.aclose()
