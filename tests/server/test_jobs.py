"""Background jobs through the MCP tools: started at once, polled, cancelled; the same results as a direct call.

The runner double holds each run open (`hold_s`), so a job is observably running while the test polls it.
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult

from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.jobs import JobBoard, JobError, JobNotFound
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller, result_text

ADD_CUSTOM = "<action>add</action><operator>Custom</operator><prompt>Solve it carefully.</prompt>"


async def wait_for(tools: ToolCaller, job_id: str) -> dict[str, Any]:
    with anyio.fail_after(20):
        while True:
            job = await tools.ok("get_job", job_id=job_id, wait_s=5)
            if job["status"] != "working":
                return job


async def test_a_job_returns_at_once_and_ends_with_the_direct_calls_result(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    runner.hold_s = 1.0
    workflow_id = await tools.create()
    with anyio.fail_after(0.9):
        started = await tools.ok("start_job", name="act", arguments={"workflow_id": workflow_id, "text": ADD_CUSTOM})
    assert started["status"] == "working" and started["tool"] == "act" and started["workflow_id"] == workflow_id
    assert started["job_id"].startswith("job_") and len(started["job_id"]) == 36
    running = await tools.ok("get_job", job_id=started["job_id"])
    assert running["status"] == "working" and running["result"] is None

    done = await wait_for(tools, started["job_id"])
    assert done["status"] == "completed" and done["error"] is None
    step = done["result"]
    assert step["ok"] is True and step["state"]["dsl"] == "Custom" and step["execution"]["output"] == "Custom"
    other = await tools.create()
    runner.hold_s = 0.0
    assert set(step) == set(await tools.act(other, ADD_CUSTOM)), "the result a direct act returns"
    assert (await tools.detail(workflow_id))["state"]["round"] == 1
    assert done["message"].startswith("act completed in ")


async def test_while_a_job_runs_reads_answer_at_once_and_edits_are_refused_with_its_id(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    runner.hold_s = 2.0
    workflow_id = await tools.create()
    job = await tools.ok("start_job", name="act", arguments={"workflow_id": workflow_id, "text": ADD_CUSTOM})
    await anyio.sleep(0.3)
    with anyio.fail_after(1):
        detail = await tools.detail(workflow_id)
    assert detail["state"]["dsl"] == "" and detail["state"]["round"] == 0, "the job's step is not committed yet"
    message = await tools.error("add_operator", workflow_id=workflow_id, operator="Plan")
    assert f"busy: background job {job['job_id']} (act)" in message and "get_job" in message
    refused = await tools.error("start_job", name="run_workflow", arguments={"workflow_id": workflow_id})
    assert job["job_id"] in refused
    polled = await tools.ok("get_job", job_id=job["job_id"])
    assert polled["status"] == "working" and polled["message"].startswith("act; "), "the phase while it runs"
    await wait_for(tools, job["job_id"])
    assert (await tools.dsl(workflow_id)) == "Custom"


async def test_cancelling_a_job_stops_its_step_and_changes_nothing(tools: ToolCaller, runner: ScriptedRunner) -> None:
    runner.hold_s = 30.0
    workflow_id = await tools.create()
    before = await tools.snapshot(workflow_id)
    job = await tools.ok("start_job", name="act", arguments={"workflow_id": workflow_id, "text": ADD_CUSTOM})
    await anyio.sleep(0.2)
    with anyio.fail_after(2):
        cancelled = await tools.ok("cancel_job", job_id=job["job_id"])
    assert cancelled["status"] == "cancelled" and "cancelled by request" in cancelled["message"]
    assert (await tools.ok("get_job", job_id=job["job_id"]))["status"] == "cancelled"
    assert await tools.snapshot(workflow_id) == before
    again = await tools.error("cancel_job", job_id=job["job_id"])
    assert "already ended (cancelled)" in again
    runner.hold_s = 0.0
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Plan")  # no longer busy


async def test_a_tool_error_fails_the_job_with_the_direct_calls_message(
    tools: ToolCaller, runner: ScriptedRunner
) -> None:
    workflow_id = await tools.create()
    direct = await tools.error("add_operator", workflow_id=workflow_id, operator="NoSuchOperator")
    job = await tools.ok(
        "start_job", name="add_operator", arguments={"workflow_id": workflow_id, "operator": "NoSuchOperator"}
    )
    failed = await wait_for(tools, job["job_id"])
    assert failed["status"] == "failed" and failed["result"] is None
    assert failed["error"] == direct

    bad = await tools.ok("start_job", name="act", arguments={"workflow_id": workflow_id})
    failed = await wait_for(tools, bad["job_id"])
    assert failed["status"] == "failed" and "`text` is required but missing" in failed["error"]


async def test_only_tools_that_run_the_workflow_start_as_jobs(tools: ToolCaller) -> None:
    message = await tools.error("start_job", name="get_workflow", arguments={"workflow_id": "wf_x"})
    assert "'get_workflow' cannot run as a job" in message and "run_workflow" in message and "finish" in message
    unknown = await tools.error("get_job", job_id="job_" + "0" * 32)
    assert "Unknown job_id" in unknown


async def test_the_number_of_running_jobs_is_bounded(registry: OperatorRegistry) -> None:
    server = build_server(
        ServerSettings(max_running_jobs=2),
        registry=registry,
        runner=ScriptedRunner(hold_s=30.0),
        store=MemoryStore(),
    )
    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        workflows = [await tools.create() for _ in range(3)]
        jobs = [
            await tools.ok("start_job", name="run_workflow", arguments={"workflow_id": workflow_id})
            for workflow_id in workflows[:2]
        ]
        message = await tools.error("start_job", name="run_workflow", arguments={"workflow_id": workflows[2]})
        assert "already runs 2 background jobs" in message
        listed = await tools.ok("list_jobs")
        assert [job["job_id"] for job in listed["jobs"]] == [job["job_id"] for job in jobs]
        for job in jobs:
            await tools.ok("cancel_job", job_id=job["job_id"])


async def test_a_job_is_forgotten_after_its_ttl_and_grace_but_never_while_running() -> None:
    now = [0.0]
    board = JobBoard(default_ttl_s=60.0, grace_s=10.0, clock=lambda: now[0], wall_clock=lambda: now[0])
    release = anyio.Event()

    async def slow() -> CallToolResult:
        await release.wait()
        return CallToolResult(content=[], structured_content={"ok": True})

    async with board.serving():
        job = board.start("run_workflow", "wf_1", slow, owner=None)
        now[0] = 1000.0
        assert board.get(job.job_id, None) is job, "running: kept past its ttl"
        release.set()
        await job.done.wait()
        assert job.status == "completed" and job.duration_s == 1000.0
        now[0] = 1005.0
        assert board.get(job.job_id, None) is job, "within the grace after it ended"
        assert job.duration_s == 1000.0 and job.status_message() == "run_workflow completed in 1000.0 s"
        now[0] = 1011.0
        with pytest.raises(JobNotFound):
            board.get(job.job_id, None)


async def test_a_job_belongs_to_the_identity_that_started_it() -> None:
    board = JobBoard()

    async def quick() -> CallToolResult:
        return CallToolResult(content=[])

    with pytest.raises(JobError, match="not available"):
        board.start("run_workflow", None, quick, owner="alice")
    async with board.serving():
        job = board.start("run_workflow", None, quick, owner="alice")
        await job.done.wait()
        assert board.get(job.job_id, "alice") is job
        with pytest.raises(JobNotFound):
            board.get(job.job_id, "bob")
        assert board.list("bob") == [] and board.list("alice") == [job]


async def test_mcp_tasks_over_the_2025_11_25_protocol(registry: OperatorRegistry) -> None:
    """The tasks capability, taskSupport, a task-augmented call, tasks/get, tasks/result and tasks/cancel."""
    server = build_server(ServerSettings(), registry=registry, runner=ScriptedRunner(hold_s=0.5), store=MemoryStore())
    async with Client(server.mcp, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        tasks = client.server_capabilities.tasks if client.server_capabilities else None
        assert tasks is not None and tasks.requests is not None and tasks.requests.tools is not None
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert listed["act"].execution is not None and listed["act"].execution.task_support == "optional"
        assert listed["get_workflow"].execution is None
        tools = ToolCaller(client)
        workflow_id = await tools.create()

        async def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
            # The Python client speaks no tasks: its typed requests would read a CreateTaskResult as a tool result.
            return await client.session._dispatcher.send_raw_request(method, params)

        call = {"name": "act", "arguments": {"workflow_id": workflow_id, "text": ADD_CUSTOM}, "task": {"ttl": 60000}}
        created = await request("tools/call", call)
        task_id = created["task"]["taskId"]
        assert created["task"]["status"] == "working" and created["task"]["ttl"] == 60000
        status = await request("tasks/get", {"taskId": task_id})
        assert status["status"] == "working" and status["statusMessage"]
        result = await request("tasks/result", {"taskId": task_id})
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
        assert result["structuredContent"]["state"]["dsl"] == "Custom" and not result.get("isError")
        assert (await request("tasks/get", {"taskId": task_id}))["status"] == "completed"
        assert [task["taskId"] for task in (await request("tasks/list", {}))["tasks"]] == [task_id]
        with pytest.raises(Exception, match="already in terminal status 'completed'"):
            await request("tasks/cancel", {"taskId": task_id})
        with pytest.raises(Exception, match="does not support task-augmented calls"):
            await request("tools/call", {"name": "get_workflow", "arguments": {"workflow_id": workflow_id}, "task": {}})
        plain = await client.call_tool("act", {"workflow_id": workflow_id, "text": ADD_CUSTOM})
        assert not plain.is_error, result_text(plain)


async def test_a_long_poll_sends_the_jobs_activity_as_progress(registry: OperatorRegistry) -> None:
    server = build_server(
        ServerSettings(progress_interval_s=0.2),
        registry=registry,
        runner=ScriptedRunner(hold_s=1.5),
        store=MemoryStore(),
    )
    heard: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, message))

    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create()
        job = await tools.ok("start_job", name="act", arguments={"workflow_id": workflow_id, "text": ADD_CUSTOM})
        polled = await client.call_tool(
            "get_job", {"job_id": job["job_id"], "wait_s": 10}, progress_callback=on_progress
        )
        assert polled.structured_content is not None and polled.structured_content["status"] == "completed"
    assert len(heard) >= 3, heard
    assert all(later[0] > earlier[0] for earlier, later in itertools.pairwise(heard))
    assert all(message and message.startswith("act") for _, message in heard), heard


def test_the_owner_of_a_job_is_the_oauth_principal_of_the_request() -> None:
    """Jobs belong to the identity the OAuth gate authenticated (the SDK's user in the request scope)."""
    from types import SimpleNamespace

    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    from flowsteer_mcp.server.background import principal_of

    token = AccessToken(
        token="t", client_id="assistant", scopes=["flowsteer:write"], subject="alice", claims={"iss": "https://idp"}
    )
    request = SimpleNamespace(scope={"user": AuthenticatedUser(token)})
    assert principal_of(SimpleNamespace(request=request)) == "https://idp|assistant|alice"  # type: ignore[arg-type]
    assert principal_of(SimpleNamespace(request=SimpleNamespace(scope={}))) is None  # type: ignore[arg-type]
    assert principal_of(None) is None
