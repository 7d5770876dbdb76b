"""The `conditional` kind: `C ? F : P` runs the checker C, then F when the check FAILS, else P (or nothing,
`done`). The dialect keeps its historical tags: `<condition>` is C, `<true>` is F, `<false>` is P."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import ConfigDict

from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds.base import (
    Box,
    DslReader,
    DSLSyntaxError,
    KindBlueprint,
    MermaidPart,
    Slot,
    StageKind,
    StructureArgs,
    StructureArgsError,
    TagReader,
)
from flowsteer_mcp.canvas.kinds.drawing import CHECK, Drawing
from flowsteer_mcp.canvas.kinds.node import NodeId, OperatorNode, StageModel

if TYPE_CHECKING:
    from flowsteer_mcp.canvas.validate import CanvasRules


class ConditionalStage(StageModel):
    """`check ? on_fail : on_pass`: run the checker; if its check FAILS run on_fail, else on_pass (or nothing)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["conditional"] = "conditional"
    id: NodeId
    check: OperatorNode
    on_fail: OperatorNode
    on_pass: OperatorNode | None = None


class ConditionalBlueprint(KindBlueprint):
    kind: Literal["conditional"] = "conditional"
    check: str
    on_fail: str
    on_pass: str | None = None  # None = "done"
    prompts: list[str | None] | None = None  # in slot order: check, on_fail, on_pass


class ConditionalKind(StageKind[ConditionalStage, ConditionalBlueprint]):
    name = "conditional"
    is_structure = True
    stage_type = ConditionalStage
    blueprint_type = ConditionalBlueprint
    summary = "`condition ? on_fail : on_pass|done`: run the checker, then on_fail when its check fails"
    dialect_help = (
        "- Add a conditional stage `C ? F : P`. The canvas runs the checker C; if the check FAILS it runs F, "
        "otherwise\n  it runs P, or nothing when P is `done`. In tags, <true> names F (run on failure) and <false> "
        "names P:\n  <action>add</action><structure>conditional</structure><condition>C</condition><true>F</true>"
        "<false>P or done</false>"
    )
    milestone_bonus = 0.15
    dsl_infix = "?"
    dsl_tokens = ("?", ":")
    # The released FlowSteer-8b policy saw the reference's conditional child ids; accept them as aliases.
    id_aliases: ClassVar[dict[str, str]] = {"_true": "_fail", "_false": "_pass"}

    def slots(self, blueprint: ConditionalBlueprint) -> list[Slot]:
        result = [
            Slot(suffix="_cond", role="check", operator=blueprint.check),
            Slot(suffix="_fail", role="on_fail", operator=blueprint.on_fail),
        ]
        if blueprint.on_pass is not None:
            result.append(Slot(suffix="_pass", role="on_pass", operator=blueprint.on_pass))
        return result

    def with_operators(self, blueprint: ConditionalBlueprint, names: list[str]) -> ConditionalBlueprint:
        on_pass = names[2] if len(names) > 2 else None
        return blueprint.model_copy(update={"check": names[0], "on_fail": names[1], "on_pass": on_pass})

    def build(self, blueprint: ConditionalBlueprint, stage_id: str, nodes: list[OperatorNode]) -> ConditionalStage:
        return ConditionalStage(
            id=stage_id, check=nodes[0], on_fail=nodes[1], on_pass=nodes[2] if len(nodes) > 2 else None
        )

    def children(self, stage: ConditionalStage) -> list[OperatorNode]:
        return [stage.check, stage.on_fail] + ([stage.on_pass] if stage.on_pass else [])

    def blueprint_of(self, stage: ConditionalStage) -> ConditionalBlueprint:
        return ConditionalBlueprint(
            check=stage.check.operator,
            on_fail=stage.on_fail.operator,
            on_pass=stage.on_pass.operator if stage.on_pass else None,
            prompts=[n.prompt for n in self.children(stage)],
        )

    def validate(self, blueprint: ConditionalBlueprint, rules: CanvasRules) -> None:
        spec = rules.registry.spec(blueprint.check)
        if spec.role.value != "checker":
            checkers = ", ".join(n for n in rules.allowed_names() if rules.registry.spec(n).role.value == "checker")
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"The condition of a conditional must be a checker ({checkers}); {blueprint.check} gives no verdict.",
            )

    def without_child(self, stage: ConditionalStage, child_id: str) -> ConditionalStage | None:
        if stage.on_pass is None or stage.on_pass.id != child_id:
            return None
        return stage.model_copy(update={"on_pass": None})

    def describe(self, blueprint: ConditionalBlueprint) -> str:
        return f"conditional {blueprint.check} ? {blueprint.on_fail} : {blueprint.on_pass or 'done'}"

    def planned_calls(self, stage: ConditionalStage) -> int:
        return 2  # the check plus at most one branch

    def render_dsl(self, stage: ConditionalStage) -> str:
        on_pass = stage.on_pass.operator if stage.on_pass else "done"
        return f"{stage.check.operator} ? {stage.on_fail.operator} : {on_pass}"

    def parse_dsl_infix(self, reader: DslReader, first: str, drawn: int) -> ConditionalBlueprint:
        if drawn != 1:
            raise DSLSyntaxError("samples ({k}) are not allowed on the check of a conditional")
        on_fail = reader.operator()
        reader.no_samples("inside a conditional")
        reader.expect(":")
        on_pass = reader.operator_or_done()
        if on_pass is not None:
            reader.no_samples("inside a conditional")
        return ConditionalBlueprint(check=first, on_fail=on_fail, on_pass=on_pass)

    def mermaid(self, stage: ConditionalStage, box: Box) -> MermaidPart:
        check = stage.check
        lines = [
            f'    {check.id}{{"{check.operator}?<br/><small>{check.id}</small>"}}',
            box(stage.on_fail),
            f"    {check.id} -- fail --> {stage.on_fail.id}",
        ]
        exits = [stage.on_fail.id]
        if stage.on_pass is not None:
            lines.append(box(stage.on_pass))
            lines.append(f"    {check.id} -- pass --> {stage.on_pass.id}")
            exits.append(stage.on_pass.id)
        else:
            lines.append(f'    {stage.id}_done(("done"))')
            lines.append(f"    {check.id} -- pass --> {stage.id}_done")
            exits.append(f"{stage.id}_done")
        return MermaidPart(lines=lines, entry=[check.id], exits=exits)

    def from_tags(self, tags: TagReader) -> ConditionalBlueprint:
        check = tags.operator(tags.required("condition", "a conditional needs the checker in <condition>"))
        on_fail = tags.operator(
            tags.required("true", "a conditional needs <true>, the branch run when the check fails")
        )
        false_raw = tags.get("false")
        on_pass = None if not false_raw or false_raw.lower() == "done" else tags.operator(false_raw)
        return ConditionalBlueprint(check=check, on_fail=on_fail, on_pass=on_pass)

    def to_tags(self, blueprint: ConditionalBlueprint, *, inline_prompt: bool = False) -> str:
        return (
            f"<structure>{self.name}</structure><condition>{blueprint.check}</condition>"
            f"<true>{blueprint.on_fail}</true><false>{blueprint.on_pass or 'done'}</false>"
        )

    def drawing(self, stage: ConditionalStage) -> Drawing:
        nodes = (stage.check, stage.on_fail) + ((stage.on_pass,) if stage.on_pass else ())
        straight = "if check passes" if stage.on_pass else "pass → continue"
        return Drawing(CHECK, nodes, caption=self.name, labels=(straight, "if check fails"))

    def from_tool(self, args: StructureArgs) -> ConditionalBlueprint:
        if not args.condition or not args.on_fail:
            raise StructureArgsError(
                "A conditional needs `condition` (a checker) and `on_fail` (run when the check fails)."
            )
        if args.operators:
            raise StructureArgsError("A conditional takes condition/on_fail/on_pass, not `operators`.")
        args.no_count()
        passed = None if args.on_pass is None or args.on_pass.strip().lower() == "done" else args.on_pass
        return ConditionalBlueprint(check=args.condition, on_fail=args.on_fail, on_pass=passed, prompts=args.prompts)


CONDITIONAL = ConditionalKind()
