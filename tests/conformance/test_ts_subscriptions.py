"""Resource subscriptions as the official TypeScript MCP SDK sees them (protocol 2025-11-25, `resources/subscribe`).

`subscribe.mjs` subscribes to a workflow's state and Mermaid view, edits the workflow, unsubscribes from the view,
edits again and deletes it, over stdio and over streamable HTTP with a bearer token, and reports every
notification with the phase it arrived in. Node is required (see test_ts_client.py).
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.conformance.ts_scripts import flowsteer_mcp, run_script
from tests.support.servers import HttpServerProcess, server_env

pytestmark = pytest.mark.slow

SCRIPT_TIMEOUT_S = 120
LIST_CHANGED = "list_changed"


def run_subscriber(*args: str, env: dict[str, str]) -> dict[str, Any]:
    run = run_script("subscribe.mjs", *args, env=env, timeout_s=SCRIPT_TIMEOUT_S)
    assert run.summary["timeouts"] == [], f"expected notifications never came: {run.summary['timeouts']}"
    assert run.returncode == 0, run.stderr
    return run.summary


def assert_notified(summary: dict[str, Any]) -> None:
    assert summary["protocolVersion"] == "2025-11-25"
    assert summary["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
    state, mermaid = summary["uris"]["state"], summary["uris"]["mermaid"]
    assert state == f"flowsteer://workflows/{summary['workflowId']}" and mermaid == f"{state}/mermaid"
    static = ["flowsteer://library", "flowsteer://operators"]
    assert summary["listed"] == {"before": static, "after": [*static, state]}
    assert {name: error["code"] for name, error in summary["errors"].items()} == {
        "unknownWorkflow": -32002,
        "unknownResource": -32002,
    }
    assert summary["read"] == {"dsl": "Plan"}, "the update came after the edit was readable"

    by_phase: dict[str, list[str]] = {}
    for heard in summary["heard"]:
        by_phase.setdefault(heard["phase"], []).append(heard["what"])
    assert {phase: sorted(heard) for phase, heard in by_phase.items()} == {
        "create": [LIST_CHANGED],
        "add_operator": sorted([state, mermaid]),
        "set_prompt": [state],  # the Mermaid view was unsubscribed
        "delete_workflow": sorted([state, LIST_CHANGED]),
    }


def test_typescript_client_hears_updates_over_stdio() -> None:
    summary = run_subscriber("stdio", *flowsteer_mcp(), "--no-executor", "--log-level", "WARNING", env=server_env())
    assert summary["transport"] == "stdio"
    assert_notified(summary)


def test_typescript_client_hears_updates_over_http_with_a_token() -> None:
    token = secrets.token_urlsafe(32)
    with HttpServerProcess("--no-executor", env={"FLOWSTEER_MCP_TOKEN": token}) as server:
        summary = run_subscriber("http", server.url, env=server_env({"FLOWSTEER_MCP_TOKEN": token}))
    assert summary["transport"] == "http"
    assert_notified(summary)
