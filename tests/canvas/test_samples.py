"""`samples: k` on the canvas: model, validation bounds, DSL `Op{k}`, JSON export/import, dialect, edits."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from flowsteer_mcp.canvas.actions import AddStage, ModifyNode, apply_edit
from flowsteer_mcp.canvas.blueprint import LoopBlueprint, OperatorBlueprint, ParallelBlueprint
from flowsteer_mcp.canvas.dialect import ActionTurn, parse_action_turn
from flowsteer_mcp.canvas.dsl import DSLSyntaxError, parse_dsl, render
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.export import export_json, export_mermaid, import_dsl, import_json
from flowsteer_mcp.canvas.model import OperatorNode, ParallelStage, WorkflowGraph
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.stats import graph_stats
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import default_registry
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller, entered_in_own_task, result_text

RULES = CanvasRules(default_registry(), CanvasOptions())


def build(*blueprints: OperatorBlueprint | ParallelBlueprint | LoopBlueprint) -> WorkflowGraph:
    graph = WorkflowGraph()
    for blueprint in blueprints:
        graph = apply_edit(graph, AddStage(stage=blueprint), RULES).graph
    return graph


# -- DSL ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Programmer{3} -> ScEnsemble",
        "[Programmer{2}, Custom, Programmer{4}] -> ScEnsemble -> Test ? Revise : done",
        "Plan -> Custom{16} -> ScEnsemble -> (Verify -> Revise) * 2",
    ],
)
def test_dsl_with_samples_round_trips_exactly(text: str) -> None:
    graph = import_dsl(text, RULES)
    assert render(graph) == text


def test_dsl_samples_reach_the_nodes() -> None:
    graph = import_dsl("Programmer{3} -> [Custom, Custom{2}] -> ScEnsemble", RULES)
    first, parallel = graph.stages[0], graph.stages[1]
    assert isinstance(first, OperatorNode) and first.samples == 3
    assert isinstance(parallel, ParallelStage) and [b.samples for b in parallel.branches] == [1, 2]


def test_one_sample_renders_without_braces() -> None:
    assert render(import_dsl("Custom{1}", RULES)) == "Custom"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("(Custom{2} -> Revise) * 2", "not allowed inside a loop"),
        ("Verify ? Revise{2} : done", "not allowed inside a conditional"),
        ("Verify ? Revise : Custom{2}", "not allowed inside a conditional"),
        ("Verify{2} ? Revise : done", "check of a conditional"),
        ("Custom{}", "expected int"),
        ("Custom{3", "expected '}'"),
    ],
)
def test_dsl_samples_syntax_errors(text: str, fragment: str) -> None:
    with pytest.raises(DSLSyntaxError) as info:
        parse_dsl(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text", ["Custom{0}", "Custom{17}", "[Custom, Programmer{99}]"])
def test_out_of_range_samples_are_refused_with_the_bounds(text: str) -> None:
    with pytest.raises(CanvasError) as info:
        import_dsl(text, RULES)
    assert info.value.code is ErrorCode.INVALID_STRUCTURE
    assert "between 1 and 16" in info.value.message and "ScEnsemble" in info.value.message


_op = st.sampled_from(["Custom", "Programmer", "AnswerGenerate", "Plan"])
_k = st.integers(1, 16)
_stage = st.one_of(
    st.tuples(_op, _k).map(lambda t: OperatorBlueprint(operator=t[0], samples=t[1])),
    st.lists(st.tuples(_op, _k), min_size=2, max_size=4).map(
        lambda b: ParallelBlueprint(operators=[o for o, _ in b], samples=[k for _, k in b])
    ),
    st.tuples(st.lists(_op, min_size=1, max_size=2), st.integers(1, 5)).map(
        lambda t: LoopBlueprint(operators=t[0], count=t[1])
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_stage, max_size=5))
def test_any_sampled_graph_round_trips_through_dsl_and_json(
    stages: list[OperatorBlueprint | ParallelBlueprint | LoopBlueprint],
) -> None:
    graph = build(*stages)
    text = render(graph)
    assert render(import_dsl(text, RULES)) == text
    assert import_json(export_json(graph), RULES) == graph


# -- JSON -----------------------------------------------------------------------------------------------------


def test_json_export_carries_samples_and_old_documents_still_import() -> None:
    graph = build(OperatorBlueprint(operator="Programmer", samples=4))
    document = json.loads(export_json(graph))
    assert document["graph"]["stages"][0]["samples"] == 4 and document["dsl"] == "Programmer{4}"
    del document["graph"]["stages"][0]["samples"]
    document["dsl"] = "Programmer"
    old = import_json(json.dumps(document), RULES)  # exports from before samples existed
    assert isinstance(old.stages[0], OperatorNode) and old.stages[0].samples == 1


def test_json_import_refuses_samples_inside_a_loop() -> None:
    graph = build(LoopBlueprint(operators=["Custom"], count=2))
    document = json.loads(export_json(graph))
    document["graph"]["stages"][0]["body"][0]["samples"] = 3
    with pytest.raises(CanvasError) as info:
        import_json(json.dumps(document), RULES)
    assert "inside a loop stage" in info.value.message


def test_json_import_refuses_out_of_range_samples() -> None:
    document = json.loads(export_json(build(OperatorBlueprint(operator="Custom"))))
    document["graph"]["stages"][0]["samples"] = 40
    with pytest.raises(CanvasError):
        import_json(json.dumps(document), RULES)


def test_mermaid_shows_samples() -> None:
    assert "Programmer{3}" in export_mermaid(build(OperatorBlueprint(operator="Programmer", samples=3)))


# -- dialect --------------------------------------------------------------------------------------------------


def test_dialect_add_with_samples() -> None:
    turn = parse_action_turn("<action>add</action><operator>Programmer</operator><samples>5</samples>", RULES)
    assert isinstance(turn, ActionTurn)
    assert turn.action == AddStage(stage=OperatorBlueprint(operator="Programmer", samples=5))


def test_dialect_without_samples_is_unchanged() -> None:
    turn = parse_action_turn("<action>add</action><operator>Programmer</operator>", RULES)
    assert isinstance(turn, ActionTurn)
    assert turn.action == AddStage(stage=OperatorBlueprint(operator="Programmer"))


def test_dialect_modify_with_samples() -> None:
    turn = parse_action_turn(
        "<action>modify</action><target>node_1</target><operator>Custom</operator>[samples]3[/samples]", RULES
    )
    assert isinstance(turn, ActionTurn)
    assert turn.action == ModifyNode(node_id="node_1", operator="Custom", samples=3)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<action>add</action><operator>Custom</operator><samples>0</samples>", "between 1 and 16"),
        ("<action>add</action><operator>Custom</operator><samples>20</samples>", "between 1 and 16"),
        ("<action>add</action><operator>Custom</operator><samples>many</samples>", "<samples> must be an integer"),
        (
            "<action>add</action><structure>parallel</structure><operators>Custom, Custom</operators>"
            "<samples>3</samples>",
            "single operator",
        ),
    ],
)
def test_dialect_samples_errors(text: str, fragment: str) -> None:
    with pytest.raises(CanvasError) as info:
        parse_action_turn(text, RULES)
    assert fragment in info.value.message


# -- edits ----------------------------------------------------------------------------------------------------


def test_modify_sets_and_resets_samples() -> None:
    graph = build(OperatorBlueprint(operator="Custom"))
    sampled = apply_edit(graph, ModifyNode(node_id="node_1", operator="Programmer", samples=3), RULES)
    assert "3 samples" in sampled.message
    node = sampled.graph.stages[0]
    assert isinstance(node, OperatorNode) and node.samples == 3
    reset = apply_edit(sampled.graph, ModifyNode(node_id="node_1", operator="Programmer"), RULES).graph
    assert isinstance(reset.stages[0], OperatorNode) and reset.stages[0].samples == 1


def test_modify_a_parallel_branch_with_samples() -> None:
    graph = build(ParallelBlueprint(operators=["Custom", "Programmer"]))
    new = apply_edit(graph, ModifyNode(node_id="node_1_p1", operator="Programmer", samples=4), RULES).graph
    assert render(new) == "[Custom, Programmer{4}]"


def test_modify_refuses_samples_inside_a_loop_and_out_of_range() -> None:
    graph = build(LoopBlueprint(operators=["Custom"], count=2), OperatorBlueprint(operator="Custom"))
    with pytest.raises(CanvasError) as inside:
        apply_edit(graph, ModifyNode(node_id="node_1_l0", operator="Custom", samples=2), RULES)
    assert "inside a loop stage" in inside.value.message
    with pytest.raises(CanvasError) as bounds:
        apply_edit(graph, ModifyNode(node_id="node_2", operator="Custom", samples=17), RULES)
    assert "between 1 and 16" in bounds.value.message


def test_parallel_blueprint_with_too_many_samples_values() -> None:
    with pytest.raises(CanvasError) as info:
        build(ParallelBlueprint(operators=["Custom", "Programmer"], samples=[1, 2, 3]))
    assert "at most one per branch" in info.value.message


def test_system_prompt_explains_samples() -> None:
    text = ObservationBuilder.default().system_prompt(default_registry(), CanvasOptions().finish_policy())
    assert "<samples>k</samples>" in text and "candidates for the next stage" in text


# -- typed MCP tools ------------------------------------------------------------------------------------------


async def test_typed_tools_set_samples() -> None:
    server = build_server(ServerSettings(), registry=default_registry(), runner=ScriptedRunner(), store=MemoryStore())
    async with entered_in_own_task(Client(server.mcp)) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create(options={"prompt_turns": False})
        await tools.ok("add_operator", workflow_id=workflow_id, operator="Programmer", samples=3)
        await tools.ok("add_operator", workflow_id=workflow_id, operator="ScEnsemble")
        assert await tools.dsl(workflow_id) == "Programmer{3} -> ScEnsemble"
        await tools.ok("modify_node", workflow_id=workflow_id, node_id="node_1", operator="Custom", samples=2)
        assert await tools.dsl(workflow_id) == "Custom{2} -> ScEnsemble"
        result = await client.call_tool(
            "add_operator", {"workflow_id": workflow_id, "operator": "Custom", "samples": 17}
        )
        assert "between 1 and 16" in (result_text(result) + json.dumps(result.structured_content))
        assert await tools.dsl(workflow_id) == "Custom{2} -> ScEnsemble"


# -- graph statistics -----------------------------------------------------------------------------------------


def test_graph_stats_count_sampled_nodes_and_the_largest_draw() -> None:
    stats = graph_stats(import_dsl("Programmer{3} -> [Custom, Custom{2}] -> ScEnsemble", RULES), default_registry())
    assert (stats.max_samples, stats.sampled_nodes) == (3, 2)
    plain = graph_stats(import_dsl("Programmer -> Custom", RULES), default_registry())
    assert (plain.max_samples, plain.sampled_nodes) == (1, 0)
    assert (graph_stats(WorkflowGraph(), default_registry()).max_samples) == 1


async def test_sampling_stats_reach_the_client_through_get_workflow() -> None:
    server = build_server(ServerSettings(), registry=default_registry(), runner=ScriptedRunner(), store=MemoryStore())
    async with entered_in_own_task(Client(server.mcp)) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create(options={"prompt_turns": False})
        await tools.ok("add_operator", workflow_id=workflow_id, operator="Programmer", samples=4)
        detail = await tools.ok("get_workflow", workflow_id=workflow_id)
        assert detail["state"]["stats"]["max_samples"] == 4
        assert detail["state"]["stats"]["sampled_nodes"] == 1
