"""The engine with the real built-in operators and the scripted backend (a deterministic executor double).

Workflow: `Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format`, built with the
canvas's own edits from the DSL. The Programmer branch runs its program in the real sandbox.
"""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.actions import AddStage, apply_edit
from flowsteer_mcp.canvas.dsl import parse_dsl, render
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.engine import WorkflowEngine
from operators.backends.base import ChatRequest
from operators.backends.scripted import ScriptedBackend
from operators.registry import default_registry

DSL = "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format"
TASK = TaskSpec(
    problem="A shop sells pens at $3 each. How much do 14 pens cost after a 10% discount?", task_type="math"
)

REPLIES = {
    "Plan": "<approach>Price times quantity, then the discount.</approach>\n"
    "<steps>\n1. Multiply 14 by 3.\n2. Take 10% off the total.\n</steps>",
    "Programmer": "```python\ndef solve():\n    return 14 * 3 * 0.9\n```",
    "Custom": "14 pens cost 42 dollars; 10% off leaves 37.8 dollars.\n37.8",
    "ScEnsemble": "<reason>both agree</reason>\n<choice>1</choice>",
    "Verify": "<working>14*3 = 42, 42*0.9 = 37.8</working>\n<independent_answer>37.8</independent_answer>\n"
    "<verdict>incorrect</verdict>\n<confidence>medium</confidence>\n"
    "<feedback>State the amount with its currency.</feedback>",
    "Revise": "<changes>added the currency</changes>\n<solution>The pens cost $37.80 in total.\n37.8</solution>",
    "Format": "<answer>37.8</answer>",
}


def scripted_executor(request: ChatRequest) -> str | None:
    return REPLIES.get(request.operator or "")


def build_graph() -> WorkflowGraph:
    rules = CanvasRules(default_registry(), CanvasOptions())
    graph = WorkflowGraph()
    for blueprint in parse_dsl(DSL):
        graph = apply_edit(graph, AddStage(stage=blueprint), rules).graph
    assert render(graph) == DSL
    return graph


@pytest.mark.slow
async def test_full_workflow_with_real_operators_and_scripted_backend() -> None:
    backend = ScriptedBackend(rules=[scripted_executor], name="engine-integration")
    engine = WorkflowEngine(default_registry(), backend, call_timeout_s=60, run_timeout_s=120)
    graph = build_graph()

    report = await engine.run(graph, TASK)

    assert report.status == "ok", (report.error, [(r.node_id, r.error) for r in report.trace])
    assert report.output == "37.8"
    by_node = {row.node_id: row for row in report.trace}
    assert list(by_node) == [
        "node_1",
        "node_2_p0",
        "node_2_p1",
        "node_3",
        "node_4_cond",
        "node_4_fail",
        "node_5",
    ]
    assert by_node["node_2_p0"].output == "37.8"  # the value solve() returned in the sandbox
    assert by_node["node_3"].output == "37.8"  # ScEnsemble's vote agreed with the Programmer branch
    assert by_node["node_4_cond"].verdict is False
    assert by_node["node_4_fail"].skipped is False  # the check failed, so Revise ran
    assert by_node["node_4_fail"].output.startswith("The pens cost $37.80")
    # Revise was given Verify's feedback; the plan reached the solvers as guidance.
    revise_prompt = next(r for r in backend.requests if r.operator == "Revise").messages[-1].content
    assert "State the amount with its currency." in revise_prompt
    programmer_prompt = next(r for r in backend.requests if r.operator == "Programmer").messages[-1].content
    assert "Multiply 14 by 3." in programmer_prompt
    # Every LLM call is attributed to its node and counted.
    assert {r.node_id for r in backend.requests} >= {"node_1", "node_2_p0", "node_2_p1", "node_4_cond", "node_5"}
    assert report.llm_calls == len(backend.requests)
    assert report.tokens == sum(rec.prompt_tokens + rec.completion_tokens for rec in backend.usage_log.records())

    # Re-running the unchanged workflow replays every node from the memo cache.
    calls_before = len(backend.requests)
    again = await engine.run(graph, TASK)
    assert again.output == "37.8"
    assert again.llm_calls == 0 and len(backend.requests) == calls_before
    assert again.cache_hits == len([r for r in again.trace if not r.skipped])
