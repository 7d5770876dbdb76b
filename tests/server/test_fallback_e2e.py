"""The fallback kind end to end through MCP: built with `act` and with `add_structure`, run by the real engine
over a scripted executor backend, once with the attempt failing and once with it answering."""

from __future__ import annotations

from typing import Any

from mcp import Client

from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.backends.base import BackendError, ChatRequest
from operators.backends.scripted import ScriptedBackend
from operators.registry import OperatorRegistry
from tests.support.servers import ToolCaller

ACT = "<action>add</action><structure>fallback</structure><operators>AnswerGenerate, Custom</operators>"


class AttemptSwitch:
    """Executor double: AnswerGenerate (the attempt) fails while `failing` is set; every other operator answers."""

    def __init__(self) -> None:
        self.failing = True

    def __call__(self, request: ChatRequest) -> str | BaseException:
        if request.operator == "AnswerGenerate":
            return BackendError("endpoint down") if self.failing else "<thought>easy</thought><answer>391</answer>"
        return "Working it out.\nFinal answer: 391"


def trace_rows(run: dict[str, Any]) -> list[tuple[str, str, bool, bool]]:
    return [(r["node_id"], r["operator"], r["ok"], r["skipped"]) for r in run["trace"]]


async def test_fallback_through_act_and_add_structure(registry: OperatorRegistry) -> None:
    switch = AttemptSwitch()
    engine = WorkflowEngine(registry, ScriptedBackend(rules=[switch]), memo=None)  # each run asks the backend
    server = build_server(ServerSettings(), registry=registry, runner=engine, store=MemoryStore())
    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        by_act = await tools.create(options={"prompt_turns": False})
        step = await tools.act(by_act, ACT)
        assert step["ok"], step["message"]
        by_tool = await tools.create(options={"prompt_turns": False})
        step = await tools.ok(
            "add_structure", workflow_id=by_tool, structure="fallback", operators=["AnswerGenerate", "Custom"]
        )
        nodes = [(n["id"], n["kind"], n["slot"]) for n in step["state"]["nodes"]]
        assert nodes == [
            ("node_1", "fallback", None),
            ("node_1_try", "operator", "try"),
            ("node_1_else", "operator", "else"),
        ]
        assert step["state"]["stats"]["structures"] == ["fallback"]

        for workflow_id in (by_act, by_tool):
            assert await tools.dsl(workflow_id) == "AnswerGenerate ?? Custom"
            switch.failing = True
            failed_attempt = await tools.ok("run_workflow", workflow_id=workflow_id)
            assert failed_attempt["execution"]["status"] == "ok"
            assert trace_rows(failed_attempt) == [
                ("node_1_try", "AnswerGenerate", False, False),
                ("node_1_else", "Custom", True, False),
            ]
            switch.failing = False
            answered = await tools.ok("run_workflow", workflow_id=workflow_id)
            assert answered["execution"]["status"] == "ok"
            assert trace_rows(answered) == [
                ("node_1_try", "AnswerGenerate", True, False),
                ("node_1_else", "Custom", True, True),
            ]
            assert answered["trace"][1]["note"] == "not taken: node_1_try answered"
