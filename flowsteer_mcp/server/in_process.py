"""The canvas server a training or evaluation process runs inside itself (no transport, no auth).

Why one factory: rollouts, evaluations and transcript collection each need the same server (the default
operators, an engine over the process's executor under the `[engine]` settings, the directors' observation
template), and three hand-built copies had started to drift.
"""

from __future__ import annotations

from pathlib import Path

from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.engine.memo_store import MemoStore
from flowsteer_mcp.runner_choice import engine_with
from flowsteer_mcp.server.app import FlowSteerServer, build_server
from flowsteer_mcp.server.settings import ServerSettings
from operators.backends.base import ChatBackend
from operators.backends.config import EngineConfig
from operators.registry import default_registry


def in_process_server(
    backend: ChatBackend,
    engine: EngineConfig,
    *,
    template: Path | str | None = None,
    observer: ObservationBuilder | None = None,
    memo_store: MemoStore | None = None,
) -> FlowSteerServer:
    """A server with the default operators on `backend`; observations from `observer`, else from the `template`
    file, else the built-in template; memoised results also kept in `memo_store` when given. Clients reach it
    with `mcp.Client(server.mcp)`."""
    if observer is None:
        observer = ObservationBuilder.from_file(Path(template)) if template else ObservationBuilder.default()
    registry = default_registry()
    return build_server(
        ServerSettings(),
        registry=registry,
        runner=engine_with(registry, backend, engine, memo_store=memo_store),
        observer=observer,
    )
