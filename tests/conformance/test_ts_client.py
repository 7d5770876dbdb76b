"""The server as a client in another language sees it: the official TypeScript MCP SDK (tests/conformance/ts).

`client.mjs` runs the same script over stdio (`flowsteer-mcp --no-executor`) and over streamable HTTP with a
bearer token and a scripted executor (so workflows really run and report progress), and prints a JSON summary.
Node is required: a missing `node` fails here; set FLOWSTEER_SKIP_NODE=1 to skip on purpose.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.ts_scripts import flowsteer_mcp, run_script
from tests.support.servers import HttpServerProcess, server_env

pytestmark = pytest.mark.slow

CLIENT_TIMEOUT_S = 180

SCRIPTED_EXECUTOR = """
[executor]
model = "script"

[models.script]
backend = "scripted"
default_reply = "Final answer: 391"
"""

# What each tool claims (readOnly, destructive, idempotent, openWorld); see the reasoning in server/toolkit.py.
ANNOTATIONS: dict[str, tuple[bool, bool | None, bool, bool]] = {
    "create_workflow": (False, False, False, False),
    "import_workflow": (False, False, False, False),
    "act": (False, True, False, True),
    "add_operator": (False, False, False, True),
    "add_structure": (False, False, False, True),
    "delete_node": (False, True, False, True),
    "modify_node": (False, True, False, True),
    "set_prompt": (False, True, True, True),
    "run_workflow": (False, False, True, True),
    "finish": (False, True, False, True),
    "get_workflow": (True, None, True, False),
    "list_operators": (True, None, True, False),
    "export_workflow": (True, None, True, False),
    "list_workflows": (True, None, True, False),
    "delete_workflow": (False, True, True, False),
    "start_job": (False, True, False, True),
    "get_job": (True, None, True, False),
    "cancel_job": (False, True, False, False),
    "list_jobs": (True, None, True, False),
    "list_library": (True, None, True, False),
    "solve": (False, True, False, True),
}


def run_client(*args: str, env: dict[str, str]) -> dict[str, Any]:
    run = run_script("client.mjs", *args, env=env, timeout_s=CLIENT_TIMEOUT_S)
    failed = [c for c in run.summary["checks"] if not c["ok"]]
    assert failed == [], failed
    assert run.returncode == 0, run.stderr
    return run.summary


def assert_conformant(summary: dict[str, Any], *, executes: bool) -> None:
    assert summary["server"]["info"]["name"] == "flowsteer"
    tools = summary["tools"]
    claimed = {
        name: tuple(
            tool["annotations"].get(hint)
            for hint in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
        )
        for name, tool in tools.items()
    }
    assert claimed == ANNOTATIONS
    assert all(tool["title"] and tool["outputSchema"] for tool in tools.values())

    trip = summary["roundTrip"]
    assert (trip["dsl"], trip["round"], trip["finished"], trip["endReason"]) == (
        "Plan -> [Custom, Custom]",
        3,
        True,
        "finished",
    )
    errors = summary["errors"]
    tool_errors = ("invalidArguments", "unfedEnsemble")
    assert {name: error.get("code") for name, error in errors.items() if name not in tool_errors} == {
        "unknownTool": -32602,
        "missingPromptArgument": -32602,
        "unknownPrompt": -32602,
        "unknownResource": -32002,  # the TypeScript SDK speaks 2025-11-25: "Resource not found"
        "unknownWorkflowResource": -32002,
    }
    invalid = errors["invalidArguments"]
    assert invalid["isError"] is True
    assert invalid["text"].startswith(
        "Error executing tool get_workflow: invalid arguments: `workflow_id` should be a valid string"
    )
    assert "pydantic" not in invalid["text"]
    unfed = errors["unfedEnsemble"]  # an agent mistake: a ToolError with the fix, and the workflow unchanged
    assert unfed["isError"] is True
    assert "node_1 (ScEnsemble) would have no candidates" in unfed["text"] and "samples > 1" in unfed["text"]
    assert unfed["dslAfter"] == ""

    progress = summary["progress"]
    if executes:
        assert trip["runStatus"] == "ok"
        run = progress["run_workflow"]
        assert [event["progress"] for event in run] == [1, 2, 3, 4, 5, 6], run
        assert {event["total"] for event in run} == {6}
        assert [event["progress"] for event in progress["act"]] == [1, 2]
    else:
        assert trip["runStatus"] == "no_executor"
        assert progress == {"act": [], "add_structure": [], "run_workflow": []}


def test_typescript_client_over_stdio() -> None:
    summary = run_client("stdio", *flowsteer_mcp(), "--no-executor", "--log-level", "WARNING", env=server_env())
    assert summary["transport"] == "stdio"
    assert_conformant(summary, executes=False)


def test_typescript_client_over_http_with_a_token(tmp_path: Path) -> None:
    config = tmp_path / "executor.toml"
    config.write_text(SCRIPTED_EXECUTOR)
    token = secrets.token_urlsafe(32)
    with HttpServerProcess("--config", str(config), env={"FLOWSTEER_MCP_TOKEN": token}) as server:
        summary = run_client("http", server.url, env=server_env({"FLOWSTEER_MCP_TOKEN": token}))
    assert summary["transport"] == "http"
    assert_conformant(summary, executes=True)
