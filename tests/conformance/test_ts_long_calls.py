"""No client times out on a healthy long run: the official TypeScript SDK against an executor that takes 75 s
for each model call (longer than the SDK's default 60 s request timeout), over stdio and over HTTP at once.

The executor is real: the server runs its engine against a real OpenAI-compatible HTTP server (the test
double `OpenAIStub`) whose every chat reply comes after 75 s. `long_calls.mjs` runs four calls at once per
transport (see its header): the asynchronous form over MCP tasks and over the job tools with default client
options, the synchronous form with `resetTimeoutOnProgress`, and a control that must time out.
"""

from __future__ import annotations

import itertools
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.ts_scripts import finished, flowsteer_mcp, start_script
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.servers import HttpServerProcess, server_env

pytestmark = pytest.mark.slow

CALL_S = 75.0
CLIENT_TIMEOUT_S = 240
ANSWER = "42"


def executor_config(base_url: str) -> str:
    return f"""
[executor]
model = "slow"

[models.slow]
backend = "openai"
base_url = "{base_url}"
model = "stub-model"
timeout_s = 200
max_retries = 0
max_concurrency = 8

[engine]
call_timeout_s = 300
reasks = 0
"""


def assert_no_form_timed_out(summary: dict[str, Any]) -> None:
    forms = summary["forms"]
    assert summary["taskCapability"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}

    tasks = forms["tasks"]
    assert tasks["error"] is None, tasks
    assert (tasks["executionStatus"], tasks["output"]) == ("ok", ANSWER), tasks
    assert tasks["elapsedMs"] >= CALL_S * 1000, "the run really waited for the slow executor"
    assert any(
        s["status"] == "working" and "running node_1 (Custom)" in (s.get("message") or "") for s in tasks["statuses"]
    )

    job = forms["job"]
    assert job["acceptedMs"] < 10_000, "start_job answers at once"
    assert (job["status"], job["dsl"], job["executionStatus"], job["output"]) == ("completed", "Custom", "ok", ANSWER)
    assert job["elapsedMs"] >= CALL_S * 1000 and len(job["polls"]) >= 4
    assert any(p["message"].startswith("running node_1 (Custom)") for p in job["polls"]), job["polls"]

    sync = forms["sync"]
    assert sync["error"] is None, sync
    assert (sync["executionStatus"], sync["output"]) == ("ok", ANSWER)
    assert sync["elapsedMs"] >= CALL_S * 1000
    assert sync["maxGapMs"] <= 10_000, f"a silence of {sync['maxGapMs']} ms between progress notifications"
    values = [event["progress"] for event in sync["events"]]
    assert all(later > earlier for earlier, later in itertools.pairwise(values)), values
    assert all(event["total"] is None or event["progress"] <= event["total"] for event in sync["events"])
    heartbeat = [e["message"] for e in sync["events"] if e["message"].startswith("running node_1 (Custom) for ")]
    assert len(heartbeat) >= 10, sync["events"][:5]

    control = forms["control"]
    assert control["error"] is not None and control["error"]["code"] == -32001, control
    assert 55_000 <= control["elapsedMs"] < CALL_S * 1000, "the default options give up at 60 s"


def test_long_calls_complete_with_the_typescript_sdk_over_stdio_and_http(tmp_path: Path) -> None:
    with OpenAIStub(default=StubReply(content=ANSWER), latency_s=CALL_S) as stub:
        config = tmp_path / "slow-executor.toml"
        config.write_text(executor_config(stub.base_url))
        token = secrets.token_urlsafe(32)
        with HttpServerProcess("--config", str(config), env={"FLOWSTEER_MCP_TOKEN": token}) as server:
            over_stdio = start_script(
                "long_calls.mjs",
                "stdio",
                *flowsteer_mcp(),
                "--config",
                str(config),
                "--log-level",
                "WARNING",
                env=server_env(),
            )
            over_http = start_script(
                "long_calls.mjs", "http", server.url, env=server_env({"FLOWSTEER_MCP_TOKEN": token})
            )
            summaries = [finished(process, CLIENT_TIMEOUT_S).summary for process in (over_stdio, over_http)]
        requests = len(stub.chat_requests)
    for summary in summaries:
        assert_no_form_timed_out(summary)
    assert requests == 8, "one 75-s executor call per form and transport, none repeated"
