"""The library, solve and job tools, the tasks/* handlers, the resources and the prompt as module-level functions:
each runs alone on a constructed context whose lifespan state is a `ToolKit` (the policy `solve` uses comes from
that state too), and what the server lists for resources and the prompt is what their table and functions say."""

from __future__ import annotations

import inspect
import json

import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter

from flowsteer_mcp.canvas.options import FINISH_PRESETS
from flowsteer_mcp.director.library import DEFAULT_WORKFLOW
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.app import server_tools
from flowsteer_mcp.server.job_tools import cancel_job, get_job, list_jobs, start_job
from flowsteer_mcp.server.library import library_listing, library_resource, list_library
from flowsteer_mcp.server.policy import PolicyEndpoint, PolicySource
from flowsteer_mcp.server.resources import flow_director, server_resources, workflow_mermaid, workflow_resource
from flowsteer_mcp.server.solve import solve
from flowsteer_mcp.server.tasks import TaskIdParams, TaskListParams, get_task, list_tasks
from flowsteer_mcp.server.toolkit import ToolKit
from flowsteer_mcp.server.tools.creation import create_workflow
from flowsteer_mcp.server.tools.edits import add_operator
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry
from tests.server.conftest import ProgressSink, tool_context
from tests.server.test_solve_policy import TASK, replayed_policy
from tests.support.openai_stub import OpenAIStub
from tests.support.scripted_runner import ScriptedRunner


async def test_list_library_and_its_resource_run_alone() -> None:
    math = await list_library("math")
    assert [kind.task_type for kind in math.task_types] == ["math"]
    assert math.task_types[0].default == DEFAULT_WORKFLOW["math"]
    assert [entry.name for entry in math.task_types[0].entries if entry.default] == [DEFAULT_WORKFLOW["math"]]
    whole = json.loads(await library_resource())
    assert [kind["task_type"] for kind in whole["task_types"]] == list(DEFAULT_WORKFLOW)
    assert whole == library_listing().model_dump(mode="json")


async def test_job_tools_and_task_handlers_run_alone_on_a_constructed_context(kit: ToolKit) -> None:
    kit.register(server_tools())  # start_job runs a tool of the kit's server, as a request would
    ctx = tool_context(kit, ProgressSink())
    async with kit.jobs.serving():
        created = await create_workflow("What is 17 * 23?", ctx, task_type="math")
        with pytest.raises(ToolError, match="'get_workflow' cannot run as a job; these can: act, "):
            await start_job("get_workflow", {"workflow_id": created.workflow_id}, ctx)
        started = await start_job("add_operator", {"workflow_id": created.workflow_id, "operator": "Custom"}, ctx)
        assert (started.tool, started.workflow_id) == ("add_operator", created.workflow_id)
        ended = await get_job(started.job_id, ctx, wait_s=10)
        assert ended.status == "completed" and ended.error is None
        assert ended.result is not None and ended.result["state"]["dsl"] == "Custom"
        assert [job.job_id for job in (await list_jobs(ctx)).jobs] == [started.job_id]
        task = await get_task(ctx.request_context, TaskIdParams(taskId=started.job_id))
        assert (task["taskId"], task["status"]) == (started.job_id, "completed")
        listed = await list_tasks(ctx.request_context, TaskListParams())
        assert [row["taskId"] for row in listed["tasks"]] == [started.job_id]
        with pytest.raises(ToolError, match="already"):
            await cancel_job(started.job_id, ctx)
        with pytest.raises(ToolError, match="job_nope"):
            await get_job("job_nope", ctx)


async def test_solve_runs_alone_with_the_library(kit: ToolKit) -> None:
    session = ProgressSink()
    solved = await solve("What is 6 * 7?", tool_context(kit, session), task_type="math")
    assert (solved.director, solved.workflow, solved.status) == ("library", DEFAULT_WORKFLOW["math"], "ok")
    assert solved.answer == solved.dsl  # the scripted runner answers with the DSL it ran
    assert [record.workflow_id for record in await kit.bench.list()] == [solved.workflow_id]
    assert session.reports, "the run reported progress to the caller"


async def test_solve_finds_its_policy_in_the_servers_state(kit: ToolKit) -> None:
    ctx = tool_context(kit, ProgressSink())
    with pytest.raises(ToolError, match="--policy-url"):  # the kit's default: no policy configured
        await solve(TASK, ctx, director="policy")
    assert await kit.bench.list() == []
    with OpenAIStub(responder=replayed_policy, served_models=["policy-double"]) as stub:
        kit.policy = PolicySource(fixed=PolicyEndpoint(stub.base_url, "policy-double", "policy-url"))
        solved = await solve(TASK, ctx, task_type="math", director="policy")
    assert (solved.director, solved.workflow, solved.dsl, solved.answer) == (
        "policy",
        "policy-double",
        "Custom",
        "Custom",
    )
    assert solved.turns is not None and solved.turns >= 2 and stub.chat_requests


async def test_resources_and_the_prompt_run_alone_on_a_constructed_context(kit: ToolKit) -> None:
    ctx = tool_context(kit, ProgressSink())
    created = await create_workflow("What is 17 * 23?", ctx, task_type="math")
    await add_operator(created.workflow_id, "Custom", ctx)
    state = json.loads(await workflow_resource(created.workflow_id, ctx))
    assert (state["workflow_id"], state["state"]["dsl"]) == (created.workflow_id, "Custom")
    diagram = await workflow_mermaid(created.workflow_id, ctx)
    assert diagram.startswith("flowchart LR") and "<small>node_1</small>" in diagram
    with pytest.raises(ResourceNotFoundError, match="Unknown workflow_id 'wf_gone'"):
        await workflow_resource("wf_gone", ctx)
    (message,) = await flow_director("What is 17 * 23?", ctx, task_type="math", finish="relaxed")
    system = kit.observer.system_prompt(kit.registry, FINISH_PRESETS["relaxed"])
    text = message.content.text  # type: ignore[union-attr]  # one text message: the system prompt, then the turn
    assert text.startswith(system + "\n\n") and "What is 17 * 23?" in text[len(system) :]


async def test_each_listed_resource_and_the_prompt_is_what_the_table_declares(registry: OperatorRegistry) -> None:
    app = build_server(ServerSettings(), registry=registry, runner=ScriptedRunner(), store=MemoryStore())
    async with Client(app.mcp) as client:
        resources = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        (prompt,) = (await client.list_prompts()).prompts
        operators = await client.read_resource("flowsteer://operators")
    rows = server_resources(app.bench)
    listed = [(r.uri, r.name, r.title, r.mime_type, r.description) for r in resources] + [
        (t.uri_template, t.name, t.title, t.mime_type, t.description) for t in templates
    ]
    assert listed == [(row.uri, row.name, row.title, row.mime_type, row.description) for row in rows]
    assert json.loads(operators.contents[0].text)["operators"]  # type: ignore[union-attr]
    context = find_context_parameter(flow_director)
    declared = [name for name in inspect.signature(flow_director).parameters if name != context]
    assert (prompt.name, context) == ("flow_director", "ctx")
    assert [argument.name for argument in prompt.arguments or []] == declared == ["task", "task_type", "finish"]
