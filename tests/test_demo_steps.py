"""`make demo` builds the measured default code workflow: its steps, sent through a real in-memory MCP server,
are all accepted, end in an accepted finish, and leave exactly `template`'s default code workflow (issue #10)."""

from __future__ import annotations

import json
from pathlib import Path

from mcp import Client

from flowsteer_mcp.demo import CODE_TEMPLATE, DEFAULT_TASK, DEMO_OPTIONS
from flowsteer_mcp.director.library import library_workflow
from flowsteer_mcp.server import build_server
from tests.support.scripted_runner import ScriptedRunner

TASK = json.loads(Path(DEFAULT_TASK).read_text(encoding="utf-8"))


async def test_the_demo_steps_build_the_default_code_workflow_and_finish() -> None:
    task = TASK
    meta = task.get("meta") or {}
    server = build_server(runner=ScriptedRunner())
    async with Client(server.mcp) as client:
        created = await client.call_tool(
            "create_workflow",
            {
                "task": task["problem"],
                "task_type": "code",
                "entry_point": meta.get("entry_point"),
                "public_tests": meta.get("public_tests"),
                "options": DEMO_OPTIONS,
            },
        )
        assert created.structured_content is not None
        workflow_id = created.structured_content["workflow_id"]
        for kind, payload in CODE_TEMPLATE:
            if kind == "act":
                result = await client.call_tool("act", {"workflow_id": workflow_id, "text": payload})
            else:
                name, extra = payload
                result = await client.call_tool(name, {"workflow_id": workflow_id, **extra})
            assert not result.is_error and result.structured_content is not None, result.content
            assert result.structured_content["ok"], result.structured_content["message"]
        detail = (await client.call_tool("get_workflow", {"workflow_id": workflow_id})).structured_content
        exported = await client.call_tool("export_workflow", {"workflow_id": workflow_id, "format": "json"})
    assert detail is not None and exported.structured_content is not None
    assert detail["state"]["dsl"] == library_workflow("code").dsl() == "Programmer{8|redraw} -> ScEnsemble"
    built = json.loads(exported.structured_content["content"])["graph"]["stages"]
    default = json.loads(library_workflow("code").spec())["graph"]["stages"]
    assert [(s["operator"], s["prompt"], s["samples"], s["until"]) for s in built] == [
        (s["operator"], s["prompt"], s["samples"], s["until"]) for s in default
    ]  # the same prompts too: a prompt-free Programmer sends direct's request, a prompted one does not
    assert (detail.get("end") or {}).get("reason") == "finished"
