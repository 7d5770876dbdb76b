"""The issue's acceptance scenario over stdio: the official client drives `python -m flowsteer_mcp --no-executor`;
and lines that are not JSON-RPC messages get a JSON-RPC error instead of silence."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCRequest
from pydantic import ValidationError

from tests.support.servers import REPO_ROOT, ToolCaller, server_command, server_env

TARGET = "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format"
TARGET_IDS = ["node_1", "node_2", "node_2_p0", "node_2_p1", "node_3", "node_4", "node_4_cond", "node_4_fail", "node_5"]


def stdio_server() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "flowsteer_mcp", "--no-executor", "--log-level", "WARNING"],
        env=server_env(),
        cwd=REPO_ROOT,
    )


async def build_through_act(tools: ToolCaller, workflow_id: str) -> None:
    """Plan, the parallel pair and a premature finish (rejected), then the rest; prompt turns answered."""
    turns: list[tuple[str, str]] = [
        ("<action>add</action><operator>Plan</operator>", "Pending - awaiting prompt"),
        ("Break the multiplication into easy partial products.", "[DSL]: Plan"),
        ("[action]add[/action][structure]parallel[/structure][operators]Programmer, Custom[/operators]", "prompt 1/2"),
        ("<think>the programmer should compute</think>Compute 17 * 23 with Python and print it.", "prompt 2/2"),
        ("Multiply the numbers by hand, step by step.", "[DSL]: Plan -> [Programmer, Custom]"),
    ]
    for text, expected in turns:
        step = await tools.act(workflow_id, text)
        assert step["ok"] is True, step["message"]
        assert expected in step["feedback"], step["feedback"]

    rejected = await tools.act(workflow_id, "<action>finish</action><answer>391</answer>")
    assert rejected["ok"] is False and rejected["error_code"] == "finish_rejected"
    assert "at least 5 are required" in rejected["message"]
    assert "No checker: add one of Verify, Test, Review" in rejected["message"]
    assert "[BLOCK_FINISH]=1" in rejected["feedback"]
    assert rejected["state"]["dsl"] == "Plan -> [Programmer, Custom]" and rejected["state"]["round"] == 6

    more: list[tuple[str, str]] = [
        ("<action>add</action><operator>ScEnsemble</operator>", "ScEnsemble"),
        ("Pick the answer most candidates agree on.", "[DSL]: Plan -> [Programmer, Custom] -> ScEnsemble"),
        (
            "<action>add</action><structure>conditional</structure><condition>Verify</condition>"
            "<true>Revise</true><false>done</false>",
            "node_4_cond (Verify, check; prompt 1/2)",
        ),
        ("Check the product independently.", "node_4_fail (Revise, on_fail; prompt 2/2)"),
        ("If the check failed, recompute and correct the product.", "Verify ? Revise : done"),
        ("<action>add</action><operator>Format</operator><prompt>Return only the number.</prompt>", TARGET),
    ]
    for text, expected in more:
        step = await tools.act(workflow_id, text)
        assert step["ok"] is True, step["message"]
        assert expected in step["feedback"], step["feedback"]


async def build_through_typed_tools(tools: ToolCaller, workflow_id: str) -> None:
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Plan", prompt="Break the product into parts.")
    await tools.ok(
        "add_structure",
        workflow_id=workflow_id,
        structure="parallel",
        operators=["Programmer", "Custom"],
        prompts=["Compute it with Python.", "Multiply by hand."],
    )
    await tools.ok("add_operator", workflow_id=workflow_id, operator="ScEnsemble")
    await tools.ok(
        "add_structure", workflow_id=workflow_id, structure="conditional", condition="Verify", on_fail="Revise"
    )
    await tools.ok("add_operator", workflow_id=workflow_id, operator="Format", prompt="Return only the number.")


@pytest.mark.slow
async def test_done_when_scenario_over_stdio() -> None:
    async with Client(stdio_server()) as client:
        tools = ToolCaller(client)
        assert len((await tools.ok("list_operators"))["operators"]) == 12

        by_act = await tools.create("What is 17 * 23?", task_type="math")
        await build_through_act(tools, by_act)
        acted = await tools.detail(by_act)
        assert acted["state"]["dsl"] == TARGET
        assert [n["id"] for n in acted["state"]["nodes"]] == TARGET_IDS
        prompts = {n["id"]: n["prompt"] for n in acted["state"]["nodes"]}
        assert prompts["node_2_p0"] == "Compute 17 * 23 with Python and print it."
        assert prompts["node_4_fail"] == "If the check failed, recompute and correct the product."
        assert prompts["node_5"] == "Return only the number."
        assert acted["state"]["round"] == 12 and acted["history_length"] == 12
        assert acted["state"]["stats"]["total_operators"] == 7
        assert acted["last_execution"]["execution"]["status"] == "no_executor"
        assert "[Execution]: no executor configured" in acted["last_feedback"]

        by_tools = await tools.create("What is 17 * 23?", task_type="math")
        await build_through_typed_tools(tools, by_tools)
        typed = await tools.detail(by_tools)
        assert typed["state"]["dsl"] == TARGET
        assert [n["id"] for n in typed["state"]["nodes"]] == TARGET_IDS
        assert typed["state"]["round"] == 5
        assert typed["state"]["stats"] == acted["state"]["stats"]

        await tools.ok("delete_node", workflow_id=by_tools, node_id="node_5")
        await tools.ok("delete_node", workflow_id=by_tools, node_id="node_1")
        refused = await tools.error("delete_node", workflow_id=by_tools, node_id="node_2_p1")
        assert "Cannot delete node_2_p1 alone" in refused
        await tools.ok("add_operator", workflow_id=by_tools, operator="Plan", position=0)
        step = await tools.ok("add_operator", workflow_id=by_tools, operator="Format")
        assert step["state"]["dsl"] == TARGET
        assert [n["id"] for n in step["state"]["nodes"]] == [
            "node_6",
            "node_2",
            "node_2_p0",
            "node_2_p1",
            "node_3",
            "node_4",
            "node_4_cond",
            "node_4_fail",
            "node_7",
        ]

        finished = await tools.act(by_act, "<action>finish</action>")
        assert finished["done"] is True and finished["end_reason"] == "finished"
        assert finished["final_answer"] is None  # nothing was executed, and a claim is never an answer
        listed = {w["workflow_id"]: w["status"] for w in (await tools.ok("list_workflows"))["workflows"]}
        assert listed == {by_act: "finished", by_tools: "building"}


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


@pytest.mark.slow
def test_malformed_lines_over_stdio_get_json_rpc_errors() -> None:
    """JSON-RPC 2.0: -32700 with id null for text that is not JSON, -32600 for JSON that is not a message."""
    lines = ["{this is not json", "", json.dumps({"jsonrpc": "2.0", "id": 7}), "[1, 2]", json.dumps(INITIALIZE)]
    done = subprocess.run(
        server_command("--no-executor", "--log-level", "WARNING"),
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=server_env(),
        timeout=60,
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700),
        (7, -32600),
        (None, -32600),
        (1, None),
    ], done.stdout + done.stderr
    assert answers[0]["error"]["message"].startswith("Parse error")
    assert answers[-1]["result"]["serverInfo"]["name"] == "flowsteer", "the connection keeps working"


def rejected_line(line: str) -> ValidationError:
    """What the SDK's stdio transport puts on the read stream for a line it cannot parse."""
    from mcp_types import jsonrpc_message_adapter

    with pytest.raises(ValidationError) as raised:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    return raised.value


async def relay(items: list[Any]) -> tuple[list[Any], list[SessionMessage]]:
    """Run `answer_malformed` over `items`: what reached the server loop, and what was answered directly."""
    from flowsteer_mcp.server.stdio import answer_malformed

    inbound_send, inbound = anyio.create_memory_object_stream[Any](len(items))
    relay_send, relay_receive = anyio.create_memory_object_stream[Any](len(items))
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](len(items))
    for item in items:
        await inbound_send.send(item)
    inbound_send.close()
    await answer_malformed(inbound, relay_send, outbound)
    outbound.close()
    return [item async for item in relay_receive], [message async for message in outbound_receive]


async def test_the_relay_answers_rejected_lines_and_passes_messages_on() -> None:
    message = SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=3, method="ping"))
    passed, answered = await relay(
        [
            rejected_line("not json"),
            message,
            rejected_line("   "),
            rejected_line('{"jsonrpc": "2.0", "id": "a", "method": 5}'),
            rejected_line('{"jsonrpc": "2.0", "id": true}'),
            RuntimeError("some other transport trouble"),
        ]
    )
    assert passed == [message]
    errors = [m.message for m in answered]
    assert all(isinstance(e, JSONRPCError) for e in errors)
    assert [(e.id, e.error.code) for e in errors if isinstance(e, JSONRPCError)] == [
        (None, -32700),
        ("a", -32600),
        (None, -32600),
    ]


async def test_the_directors_template_comes_from_the_command_line(tmp_path: Any) -> None:
    template = tmp_path / "compact.txt"
    template.write_text("You build workflows. Operators: $operator_names", encoding="utf-8")
    params = stdio_server()
    params.args = [*params.args, "--director-template", str(template)]
    async with Client(params) as client:
        created = await ToolCaller(client).ok("create_workflow", task="What is 17 * 23?")
    assert created["system_prompt"].startswith("You build workflows. Operators: Plan, Decompose, Custom")


def test_an_unreadable_directors_template_is_refused_clearly(tmp_path: Any) -> None:
    missing = tmp_path / "missing.txt"
    command = server_command("--no-executor", "--director-template", str(missing))
    done = subprocess.run(command, capture_output=True, text=True, env=server_env(), cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 2 and f"--director-template {missing}: cannot read it" in done.stderr
