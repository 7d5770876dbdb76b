"""The `operator` kind: a single operator node as a stage (`NAME`, `NAME{k}` or `NAME{k|rule}` in the DSL)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from flowsteer_mcp.canvas.kinds.base import Box, KindBlueprint, MermaidPart, Slot, StageKind
from flowsteer_mcp.canvas.kinds.drawing import SINGLE, Drawing
from flowsteer_mcp.canvas.kinds.node import OperatorNode
from operators.stopping import StopRuleName

if TYPE_CHECKING:
    from flowsteer_mcp.canvas.validate import CanvasRules


class OperatorBlueprint(KindBlueprint):
    kind: Literal["operator"] = "operator"
    operator: str
    prompt: str | None = None
    samples: int = 1  # draws of the node (bounded by CanvasRules, with an actionable error)
    until: StopRuleName | None = None  # stop drawing early (operators/stopping.py); needs samples > 1


def render_drawn(node: OperatorNode) -> str:
    if node.samples <= 1:
        return node.operator
    rule = f"|{node.until}" if node.until else ""
    return f"{node.operator}{{{node.samples}{rule}}}"


class OperatorKind(StageKind[OperatorNode, OperatorBlueprint]):
    name = "operator"
    is_structure = False
    stage_type = OperatorNode
    blueprint_type = OperatorBlueprint
    summary = "one operator"
    dialect_help = (
        "- Add an operator (appended, or inserted at a 0-based stage position):\n"
        "  <action>add</action><operator>NAME</operator>[<position>k</position>][<prompt>instruction</prompt>]"
        "[<samples>k</samples>]"
    )

    def slots(self, blueprint: OperatorBlueprint) -> list[Slot]:
        return [Slot(suffix="", role="operator", operator=blueprint.operator)]

    def given_prompts(self, blueprint: OperatorBlueprint) -> list[str | None]:
        return [blueprint.prompt]

    def slot_samples(self, blueprint: OperatorBlueprint) -> list[int]:
        return [blueprint.samples]

    def with_prompts(self, blueprint: OperatorBlueprint, prompts: list[str | None]) -> OperatorBlueprint:
        return blueprint.model_copy(update={"prompt": prompts[0]})

    def with_operators(self, blueprint: OperatorBlueprint, names: list[str]) -> OperatorBlueprint:
        return blueprint.model_copy(update={"operator": names[0]})

    def build(self, blueprint: OperatorBlueprint, stage_id: str, nodes: list[OperatorNode]) -> OperatorNode:
        return nodes[0].model_copy(update={"until": blueprint.until}) if blueprint.until else nodes[0]

    def children(self, stage: OperatorNode) -> list[OperatorNode]:
        return []

    def blueprint_of(self, stage: OperatorNode) -> OperatorBlueprint:
        return OperatorBlueprint(operator=stage.operator, prompt=stage.prompt, samples=stage.samples, until=stage.until)

    def validate_samples(self, blueprint: OperatorBlueprint, rules: CanvasRules) -> None:
        rules.samples(blueprint.samples)
        rules.stop_rule(blueprint.until, blueprint.samples)

    def describe(self, blueprint: OperatorBlueprint) -> str:
        if blueprint.samples <= 1:
            return blueprint.operator
        rule = f", stopping early by {blueprint.until}" if blueprint.until else ""
        return f"{blueprint.operator} with {blueprint.samples} samples{rule}"

    def planned_calls(self, stage: OperatorNode) -> int:
        return stage.samples

    def render_dsl(self, stage: OperatorNode) -> str:
        return render_drawn(stage)

    def mermaid(self, stage: OperatorNode, box: Box) -> MermaidPart:
        return MermaidPart(lines=[box(stage)], entry=[stage.id], exits=[stage.id])

    def to_tags(self, blueprint: OperatorBlueprint, *, inline_prompt: bool = False) -> str:
        samples = f"<samples>{blueprint.samples}</samples>" if blueprint.samples > 1 else ""
        if blueprint.until:
            samples += f"<until>{blueprint.until}</until>"
        prompt = f"<prompt>{blueprint.prompt}</prompt>" if inline_prompt and blueprint.prompt else ""
        return f"<operator>{blueprint.operator}</operator>{samples}{prompt}"

    def drawing(self, stage: OperatorNode) -> Drawing:
        return Drawing(SINGLE, (stage,))


OPERATOR = OperatorKind()
