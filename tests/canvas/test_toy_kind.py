"""A stage kind defined and registered by this test module alone, driven through every layer.

The `relay` kind (`<A, B>` in the DSL) runs its operators one after the other, each on the state the previous
one left, like a short chain inside one stage. Nothing outside this file knows it: the dialect, the typed tool,
validation, the engine, the viewer, the director's prompt, scripted transcripts and the reward all find it in
the registries, and the fixture removes it again so every other test sees the five built-in kinds only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import pytest
from mcp import Client

from flowsteer_mcp.canvas.actions import AddStage, apply_edit
from flowsteer_mcp.canvas.blueprint import blueprint_of, build_stage
from flowsteer_mcp.canvas.dialect import ActionTurn, parse_action_turn
from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.export import export_json, export_mermaid, import_dsl, import_json
from flowsteer_mcp.canvas.kinds import (
    KINDS,
    ConditionalBlueprint,
    FallbackBlueprint,
    KindRegistrationError,
    LoopBlueprint,
    OperatorBlueprint,
    ParallelBlueprint,
    StageKind,
    kind_of,
    registered_kind,
)
from flowsteer_mcp.canvas.kinds.base import (
    Box,
    DslReader,
    KindBlueprint,
    MermaidPart,
    Slot,
    StructureArgs,
    StructureArgsError,
    TagReader,
)
from flowsteer_mcp.canvas.kinds.drawing import CHAIN, Drawing
from flowsteer_mcp.canvas.kinds.node import OperatorNode, StageModel
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import FINISH_PRESETS, CanvasOptions
from flowsteer_mcp.canvas.stats import graph_stats
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.engine.kinds import StageOutcome, applied, registered_stage_runner
from flowsteer_mcp.engine.node_call import NodeCaller, NodeResult
from flowsteer_mcp.engine.state import FlowState
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from flowsteer_mcp.viewer.graph_svg import LayoutError, render_graph_svg
from operators.backends.base import ChatRequest
from operators.backends.scripted import ScriptedBackend
from operators.registry import default_registry
from tests.support.servers import ToolCaller
from training.reward import RewardConfig, compute_reward
from training.traces.collect import add_turn

if TYPE_CHECKING:
    from flowsteer_mcp.canvas.validate import CanvasRules as Rules

REGISTRY = default_registry()
RULES = CanvasRules(REGISTRY, CanvasOptions())
RELAY_BONUS = 0.05


class RelayStage(StageModel):
    kind: Literal["relay"] = "relay"
    legs: list[OperatorNode]


class RelayBlueprint(KindBlueprint):
    kind: Literal["relay"] = "relay"
    operators: list[str]
    prompts: list[str | None] | None = None


class RelayKind(StageKind[RelayStage, RelayBlueprint]):
    name = "relay"
    is_structure = True
    stage_type = RelayStage
    blueprint_type = RelayBlueprint
    summary = "2 to 3 operators run one after the other, each on the previous one's output"
    dialect_help = (
        "- Add a relay (each operator works on the previous one's output):\n"
        "  <action>add</action><structure>relay</structure><operators>A, B</operators>"
    )
    milestone_bonus = RELAY_BONUS
    dsl_opener = "<"
    dsl_tokens = ("<", ">", ",")

    def slots(self, blueprint: RelayBlueprint) -> list[Slot]:
        n = len(blueprint.operators)
        return [Slot(suffix=f"_r{i}", role=f"leg {i + 1}/{n}", operator=op) for i, op in enumerate(blueprint.operators)]

    def with_operators(self, blueprint: RelayBlueprint, names: list[str]) -> RelayBlueprint:
        return blueprint.model_copy(update={"operators": list(names)})

    def build(self, blueprint: RelayBlueprint, stage_id: str, nodes: list[OperatorNode]) -> RelayStage:
        return RelayStage(id=stage_id, legs=nodes)

    def children(self, stage: RelayStage) -> list[OperatorNode]:
        return list(stage.legs)

    def blueprint_of(self, stage: RelayStage) -> RelayBlueprint:
        return RelayBlueprint(operators=[n.operator for n in stage.legs], prompts=[n.prompt for n in stage.legs])

    def validate(self, blueprint: RelayBlueprint, rules: Rules) -> None:
        if not 2 <= len(blueprint.operators) <= 3:
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE, f"A relay needs 2 to 3 operators; got {len(blueprint.operators)}."
            )

    def describe(self, blueprint: RelayBlueprint) -> str:
        return f"relay <{', '.join(blueprint.operators)}>"

    def planned_calls(self, stage: RelayStage) -> int:
        return len(stage.legs)

    def render_dsl(self, stage: RelayStage) -> str:
        return "<" + ", ".join(n.operator for n in stage.legs) + ">"

    def parse_dsl_prefix(self, reader: DslReader) -> RelayBlueprint:
        operators = [reader.operator()]
        while reader.at(","):
            reader.expect(",")
            operators.append(reader.operator())
        reader.expect(">")
        return RelayBlueprint(operators=operators)

    def mermaid(self, stage: RelayStage, box: Box) -> MermaidPart:
        lines = [box(n) for n in stage.legs]
        lines += [f"    {a.id} --> {b.id}" for a, b in zip(stage.legs, stage.legs[1:], strict=False)]
        return MermaidPart(lines=lines, entry=[stage.legs[0].id], exits=[stage.legs[-1].id])

    def from_tags(self, tags: TagReader) -> RelayBlueprint:
        return RelayBlueprint(operators=tags.operators("operators", "a relay lists its operators in order"))

    def to_tags(self, blueprint: RelayBlueprint, *, inline_prompt: bool = False) -> str:
        return f"<structure>relay</structure><operators>{', '.join(blueprint.operators)}</operators>"

    def from_tool(self, args: StructureArgs) -> RelayBlueprint:
        operators = args.operator_list(self.name)
        args.no_count()
        return RelayBlueprint(operators=operators, prompts=args.prompts)

    def drawing(self, stage: RelayStage) -> Drawing:
        return Drawing(CHAIN, tuple(stage.legs), caption="relay")


async def run_relay(stage: RelayStage, state: FlowState, sink: list[NodeTrace], caller: NodeCaller) -> StageOutcome:
    """Each leg runs on the state the previous one left; the stage fails when its last leg failed."""
    last: NodeResult | None = None
    for leg in stage.legs:
        last = await caller.call(leg, state, sink=sink)
        state = applied(state, last)
    assert last is not None
    return StageOutcome(state, None if last.ok else last.describe_failure())


RELAY = RelayKind()
RELAY_TAGS = "<action>add</action><structure>relay</structure><operators>Custom, Custom</operators>"


@pytest.fixture
def relay() -> Iterator[RelayKind]:
    with registered_kind(RELAY), registered_stage_runner("relay", run_relay):
        yield RELAY


def test_the_fixture_leaves_only_the_built_in_kinds_behind() -> None:
    assert list(KINDS) == ["operator", "parallel", "conditional", "loop", "fallback"]
    with pytest.raises(CanvasError):  # unknown outside the fixture: the dialect refuses it
        parse_action_turn(RELAY_TAGS, RULES)


def test_registration_refuses_a_second_kind_of_the_same_name(relay: RelayKind) -> None:
    with pytest.raises(KindRegistrationError, match="already registered"), registered_kind(RelayKind()):
        pass  # pragma: no cover


@pytest.mark.parametrize(
    "blueprint",
    [
        OperatorBlueprint(operator="Programmer", samples=3, until="tests"),
        ParallelBlueprint(operators=["Programmer", "Custom"]),
        ConditionalBlueprint(check="Verify", on_fail="Revise"),
        ConditionalBlueprint(check="Review", on_fail="Revise", on_pass="Format"),
        LoopBlueprint(operators=["Test", "Revise"], count=2),
        FallbackBlueprint(operators=["Programmer", "Custom"]),
        RelayBlueprint(operators=["Custom", "Revise"]),
    ],
)
def test_every_kind_writes_tags_its_dialect_reads_back(relay: RelayKind, blueprint: KindBlueprint) -> None:
    turn = parse_action_turn("<action>add</action>" + kind_of(blueprint).to_tags(blueprint), RULES)
    assert isinstance(turn, ActionTurn) and turn.action == AddStage(stage=blueprint)


def test_dsl_json_and_mermaid_know_the_relay(relay: RelayKind) -> None:
    graph = import_dsl("Plan -> <Custom, Revise> -> Format", RULES)
    assert isinstance(graph.stages[1], RelayStage)
    assert [n.id for n in graph.stages[1].legs] == ["node_2_r0", "node_2_r1"]
    assert render(graph) == "Plan -> <Custom, Revise> -> Format"
    assert import_json(export_json(graph), RULES) == graph
    assert "node_2_r0 --> node_2_r1" in export_mermaid(graph)
    assert blueprint_of(build_stage(RelayBlueprint(operators=["Custom", "Revise"]), 2)) == RelayBlueprint(
        operators=["Custom", "Revise"], prompts=[None, None]
    )
    schema = json.dumps(WorkflowGraph.model_json_schema())
    assert "RelayStage" in schema and "ParallelStage" in schema


def test_a_bad_relay_is_refused_with_a_clear_error(relay: RelayKind) -> None:
    with pytest.raises(CanvasError) as caught:
        apply_edit(WorkflowGraph(), AddStage(stage=RelayBlueprint(operators=["Custom"])), RULES)
    assert caught.value.code is ErrorCode.INVALID_STRUCTURE
    assert "A relay needs 2 to 3 operators; got 1." in caught.value.message
    with pytest.raises(StructureArgsError, match="only applies to loops"):
        relay.from_tool(StructureArgs(operators=["Custom", "Revise"], count=2))


def test_the_viewer_draws_the_relay_as_a_captioned_chain(relay: RelayKind, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = import_dsl("<Custom, Revise>", RULES)
    svg = render_graph_svg(graph)
    assert 'class="stage relay" data-stage-id="node_1"' in svg
    assert '<text class="caption"' in svg and ">relay</text>" in svg
    assert "node_1_r0" in svg and "node_1_r1" in svg
    monkeypatch.setattr(RelayKind, "drawing", lambda self, stage: Drawing("spiral", tuple(stage.legs)))
    with pytest.raises(LayoutError, match="'spiral'"):
        render_graph_svg(graph)


def test_the_director_prompt_and_scripted_transcripts_describe_the_relay(relay: RelayKind) -> None:
    system = ObservationBuilder.default().system_prompt(REGISTRY, FINISH_PRESETS["paper"])
    assert relay.dialect_help in system
    assert system.index("<structure>fallback</structure>") < system.index(relay.dialect_help)
    # the finish rule the director reads names every kind the gate accepts as a structure
    assert "- at least one structure (parallel, conditional, loop, fallback or relay)" in system
    assert add_turn(RelayBlueprint(operators=["Custom", "Custom"])) == RELAY_TAGS


def test_statistics_and_reward_count_the_relay(relay: RelayKind) -> None:
    stats = graph_stats(import_dsl("Custom -> <Programmer, Revise> -> Verify ? Revise : done", RULES), REGISTRY)
    assert stats.structures == ["conditional", "relay"]
    milestones = compute_reward(stats, correctness=0.0, finished=True, config=RewardConfig(schedule="milestones"))
    assert milestones.terms["relay"] == RELAY_BONUS
    assert milestones.terms["multi_structure"] == 0.15
    assert compute_reward(stats, correctness=0.0, finished=True).terms["structure"] == 0.4
    configured = RewardConfig.model_validate({"schedule": "milestones", "milestones": {"relay": 0.3}})
    assert configured.model_dump()["milestones"]["relay"] == 0.3
    assert compute_reward(stats, correctness=0.0, finished=True, config=configured).terms["relay"] == 0.3


def _executor_double(request: ChatRequest) -> str:
    """Scripted executor: drafts 390, and corrects it to 391 when it is shown that draft."""
    if any("390" in message.content for message in request.messages):
        return "Corrected the draft.\nFinal answer: 391"
    return "Draft.\nFinal answer: 390"


async def test_act_add_structure_and_a_run_through_mcp(relay: RelayKind) -> None:
    backend = ScriptedBackend(rules=[_executor_double])
    engine = WorkflowEngine(REGISTRY, backend, memo=None)
    server = build_server(ServerSettings(), registry=REGISTRY, runner=engine, store=MemoryStore())
    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        by_act = await tools.create(options={"prompt_turns": False})
        step: dict[str, Any] = await tools.act(by_act, RELAY_TAGS)
        assert step["ok"], step["message"]
        by_tool = await tools.create(options={"prompt_turns": False})
        step = await tools.ok("add_structure", workflow_id=by_tool, structure="relay", operators=["Custom", "Custom"])
        nodes = [(n["id"], n["kind"], n["slot"]) for n in step["state"]["nodes"]]
        assert nodes == [
            ("node_1", "relay", None),
            ("node_1_r0", "operator", "leg 1/2"),
            ("node_1_r1", "operator", "leg 2/2"),
        ]
        assert step["state"]["stats"]["structures"] == ["relay"]
        refused = await tools.error("add_structure", workflow_id=by_tool, structure="relay", operators=["Custom"])
        assert "A relay needs 2 to 3 operators" in refused
        for workflow_id in (by_act, by_tool):
            assert await tools.dsl(workflow_id) == "<Custom, Custom>"
            backend.requests.clear()
            run = await tools.ok("run_workflow", workflow_id=workflow_id)
            assert run["execution"]["status"] == "ok"
            assert [(r["node_id"], r["operator"], r["ok"]) for r in run["trace"]] == [
                ("node_1_r0", "Custom", True),
                ("node_1_r1", "Custom", True),
            ]
            assert "391" in run["execution"]["output"]
            assert len(backend.requests) == 2  # the second leg was shown the first leg's draft (see the double)
