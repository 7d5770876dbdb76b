"""The stage-kind contract: everything the canvas knows about one kind of stage, in one object.

Why: a kind (operator, parallel, conditional, loop, fallback) used to be spread over isinstance chains in a
dozen modules. A `StageKind` owns its blueprint <-> stage conversion, validation, node-id suffixes, DSL and
Mermaid forms, dialect tags (read and written) and their help line in the director's prompt, its drawing,
typed-tool arguments, call budget and reward bonus; the generic modules (blueprint, validate, dsl, export,
dialect, actions, stats, the viewer, the server's tools, the reward) only look a kind up by name in the
registry (`canvas/kinds/registry.py`). Execution stays in the engine (`flowsteer_mcp/engine/kinds/`, keyed by
the same name), so the canvas never imports the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from flowsteer_mcp.canvas.kinds.drawing import Drawing
from flowsteer_mcp.canvas.kinds.node import OperatorNode
from flowsteer_mcp.errors import FlowSteerError

if TYPE_CHECKING:
    from flowsteer_mcp.canvas.validate import CanvasRules

StageT = TypeVar("StageT", bound=BaseModel)
BlueprintT = TypeVar("BlueprintT", bound=BaseModel)


class Slot(BaseModel):
    """One operator position of a blueprint, with the id suffix its node will get."""

    suffix: str  # "" for a single operator stage
    role: str  # "operator" | "branch i/n" | "check" | "on_fail" | "on_pass" | "body i/n" | "try" | "else"
    operator: str


class KindBlueprint(BaseModel):
    """Base of every blueprint: a stage as requested, before it gets node ids. Each kind narrows `kind` to
    `Literal["<name>"] = "<name>"`, the name validation dispatches on."""

    model_config = ConfigDict(extra="forbid")

    kind: str


class DSLSyntaxError(FlowSteerError, ValueError):
    """Malformed DSL text; the message says where and what was expected."""


class DslReader(Protocol):
    """What the DSL parser offers a kind's parse hook (tokens are consumed in order)."""

    def at(self, text: str) -> bool: ...
    def expect(self, text: str) -> None: ...
    def operator(self) -> str: ...
    def operator_or_done(self) -> str | None: ...
    def samples(self) -> int: ...
    def no_samples(self, where: str) -> None: ...
    def bounded_int(self, label: str, advice: str = "") -> int: ...


class TagReader(Protocol):
    """What the dialect parser offers a kind's tag hook (operator names come back canonical)."""

    def get(self, name: str) -> str | None: ...
    def required(self, name: str, why: str) -> str: ...
    def operator(self, raw: str) -> str: ...
    def operators(self, name: str, why: str) -> list[str]: ...
    def integer(self, name: str) -> int | None: ...


class StructureArgsError(FlowSteerError, ValueError):
    """Typed-tool arguments that do not describe a structure of the requested kind (the server says why)."""


class StructureArgs(BaseModel):
    """The arguments of the typed `add_structure` tool, shared by every structure kind."""

    operators: list[str] | None = None
    condition: str | None = None
    on_fail: str | None = None
    on_pass: str | None = None
    count: int | None = None
    prompts: list[str | None] | None = None

    def operator_list(self, kind: str) -> list[str]:
        """The `operators` of a kind that takes a list, refusing the conditional-only fields."""
        if self.condition or self.on_fail or self.on_pass:
            raise StructureArgsError(f"condition/on_fail/on_pass only apply to conditionals, not to a {kind}.")
        if not self.operators:
            raise StructureArgsError(f"A {kind} needs `operators` (a list of operator names).")
        return self.operators

    def no_count(self) -> None:
        if self.count is not None:
            raise StructureArgsError("`count` only applies to loops.")


@dataclass
class MermaidPart:
    """A stage's Mermaid lines and the node ids edges enter it at and leave it from."""

    lines: list[str]
    entry: list[str]
    exits: list[str] = field(default_factory=list)


Box = Callable[[OperatorNode], str]  # renders an operator node as a Mermaid box line


class StageKind(ABC, Generic[StageT, BlueprintT]):
    """One kind of stage. Subclasses set the class attributes and implement the abstract methods."""

    name: ClassVar[str]
    stage_type: ClassVar[type[BaseModel]]
    blueprint_type: ClassVar[type[BaseModel]]
    summary: ClassVar[str]  # one line for tool descriptions and docs
    # Whether a stage of this kind is a control structure (it arranges several operator nodes), as opposed to a
    # single operator. No default, so every kind must decide: graph statistics, the finish gate's "use a
    # structure" rule and the reward's structure terms all read this one flag (via `STRUCTURES` and
    # `GraphStats.structures`), so a new kind cannot count as a structure in one place and not in another.
    is_structure: ClassVar[bool]
    dsl_opener: ClassVar[str | None] = None  # a stage starting with this punctuation is of this kind
    dsl_infix: ClassVar[str | None] = None  # `OP <infix> ...` is of this kind
    dsl_tokens: ClassVar[tuple[str, ...]] = ()  # punctuation the kind's DSL form uses
    child_samples: ClassVar[bool] = False  # whether its children may draw more than once
    offers_candidates: ClassVar[bool] = False  # whether its outputs are candidates for the next stage
    id_aliases: ClassVar[dict[str, str]] = {}  # child-id suffix aliases accepted from policies
    # How to write an add of this kind in the dialect: its line(s) of the director's system prompt
    # (`$stage_actions` in `canvas/templates/director_system.txt`), without a trailing newline.
    dialect_help: ClassVar[str]
    # The bonus the reward's `milestones` schedule gives a workflow using this kind, unless the config sets its
    # own (`reward.milestones.kinds`). None: no per-kind term (a structure still counts towards multi-structure).
    milestone_bonus: ClassVar[float | None] = None

    # --- blueprint <-> stage ---
    @abstractmethod
    def slots(self, blueprint: BlueprintT) -> list[Slot]: ...

    def given_prompts(self, blueprint: BlueprintT) -> list[str | None]:
        """The prompts as given (may be fewer than the slots)."""
        return list(getattr(blueprint, "prompts", None) or [])

    def slot_prompts(self, blueprint: BlueprintT) -> list[str | None]:
        count = len(self.slots(blueprint))
        return (self.given_prompts(blueprint) + [None] * count)[:count]

    def slot_samples(self, blueprint: BlueprintT) -> list[int]:
        return [1] * len(self.slots(blueprint))

    def with_prompts(self, blueprint: BlueprintT, prompts: list[str | None]) -> BlueprintT:
        return blueprint.model_copy(update={"prompts": list(prompts)})

    def with_samples(self, blueprint: BlueprintT, samples: list[int]) -> BlueprintT:
        """The blueprint with these draws per slot; only a kind whose children sample (`child_samples`) takes
        any, so the default refuses."""
        raise NotImplementedError(f"{self.name} stages do not take samples per slot")

    @abstractmethod
    def with_operators(self, blueprint: BlueprintT, names: list[str]) -> BlueprintT: ...

    @abstractmethod
    def build(self, blueprint: BlueprintT, stage_id: str, nodes: list[OperatorNode]) -> StageT:
        """The stage with id `stage_id` whose children are `nodes` (aligned with `slots`)."""

    @abstractmethod
    def children(self, stage: StageT) -> list[OperatorNode]: ...

    @abstractmethod
    def blueprint_of(self, stage: StageT) -> BlueprintT: ...

    # --- validation and edits ---
    def validate(self, blueprint: BlueprintT, rules: CanvasRules) -> None:
        """Structure rules beyond operator names, prompts and limits (raise CanvasError)."""

    def validate_samples(self, blueprint: BlueprintT, rules: CanvasRules) -> None:
        """Draw counts; only kinds whose children sample check anything."""

    def without_child(self, stage: StageT, child_id: str) -> StageT | None:
        """`stage` minus one child, or None when it would no longer be a valid stage of this kind."""
        return None

    @abstractmethod
    def describe(self, blueprint: BlueprintT) -> str:
        """Human words for an added stage, e.g. `parallel [A, B]`."""

    @abstractmethod
    def planned_calls(self, stage: StageT) -> int:
        """Upper bound of operator calls of one run of the stage."""

    # --- text forms ---
    @abstractmethod
    def render_dsl(self, stage: StageT) -> str: ...

    def parse_dsl_prefix(self, reader: DslReader) -> BlueprintT:
        """Parse the stage after its `dsl_opener` was consumed."""
        raise NotImplementedError

    def parse_dsl_infix(self, reader: DslReader, first: str, drawn: int) -> BlueprintT:
        """Parse the stage after `first{drawn}` and its `dsl_infix` were consumed."""
        raise NotImplementedError

    @abstractmethod
    def mermaid(self, stage: StageT, box: Box) -> MermaidPart: ...

    def from_tags(self, tags: TagReader) -> BlueprintT:
        """The blueprint of `<structure>name</structure>` and the kind's other tags."""
        raise NotImplementedError

    @abstractmethod
    def to_tags(self, blueprint: BlueprintT, *, inline_prompt: bool = False) -> str:
        """The dialect tags that add `blueprint` (what follows `<action>add</action>`), the inverse of `from_tags`:
        scripted directors write their turns with it. Prompts follow in prompt turns; `inline_prompt` lets a kind
        that can carry one in the add (an operator) do so."""

    @abstractmethod
    def drawing(self, stage: StageT) -> Drawing:
        """How the viewer draws the stage (a generic layout, its nodes and caption)."""

    def from_tool(self, args: StructureArgs) -> BlueprintT:
        """The blueprint of an `add_structure` call (raise StructureArgsError when the arguments do not fit)."""
        raise NotImplementedError


AnyKind = StageKind[Any, Any]
