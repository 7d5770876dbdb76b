"""Edit validation: operator names, structure rules and limits, checked before anything changes."""

from __future__ import annotations

from flowsteer_mcp.canvas.blueprint import (
    ConditionalBlueprint,
    LoopBlueprint,
    OperatorBlueprint,
    ParallelBlueprint,
    StageBlueprint,
    slot_prompts,
    slots,
    with_operators,
    with_prompts,
)
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions
from operators.registry import OperatorRegistry


class CanvasRules:
    """Validates names, prompts and structures against the registry and the workflow's options."""

    def __init__(self, registry: OperatorRegistry, options: CanvasOptions) -> None:
        self.registry = registry
        self.options = options
        self.limits = options.limits
        self._disabled = {n.lower() for n in options.disabled_operators}

    def allowed_names(self) -> list[str]:
        return [n for n in self.registry.names() if n.lower() not in self._disabled]

    def operator(self, name: str) -> str:
        """Canonical spelling of an allowed operator name, or a CanvasError listing the valid names."""
        canonical = self.registry.canonical_name(name) if name.strip() else None
        valid = ", ".join(self.allowed_names())
        if canonical is None:
            raise CanvasError(ErrorCode.UNKNOWN_OPERATOR, f"Unknown operator {name!r}. Valid operators: {valid}.")
        if canonical.lower() in self._disabled:
            raise CanvasError(
                ErrorCode.DISABLED_OPERATOR,
                f"Operator {canonical!r} is disabled for this workflow. Valid operators: {valid}.",
            )
        return canonical

    def prompt(self, text: str | None) -> str | None:
        if text is None:
            return None
        cleaned = text.strip()
        if len(cleaned) < self.limits.min_prompt_chars:
            raise CanvasError(
                ErrorCode.INVALID_PROMPT,
                f"Prompt is too short ({len(cleaned)} characters); write at least {self.limits.min_prompt_chars} "
                "characters describing how the operator should handle this problem.",
            )
        if len(cleaned) > self.limits.max_prompt_chars:
            raise CanvasError(
                ErrorCode.INVALID_PROMPT,
                f"Prompt is too long ({len(cleaned)} characters); the limit is {self.limits.max_prompt_chars}.",
            )
        return cleaned

    def blueprint(self, blueprint: StageBlueprint, graph: WorkflowGraph) -> StageBlueprint:
        """Validate a stage to add; returns it with canonical operator names and cleaned prompts."""
        names = [self.operator(slot.operator) for slot in slots(blueprint)]
        canonical = with_operators(blueprint, names)
        self._structure(canonical)
        prompts = list(blueprint.prompts or []) if not isinstance(blueprint, OperatorBlueprint) else [blueprint.prompt]
        if len(prompts) > len(names):
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"Got {len(prompts)} prompts for {len(names)} operators; give at most one per operator.",
            )
        canonical = with_prompts(canonical, [self.prompt(p) for p in slot_prompts(canonical)])
        total = sum(1 for _ in graph.iter_operator_nodes()) + len(names)
        if total > self.limits.max_operators:
            raise CanvasError(
                ErrorCode.LIMIT_EXCEEDED,
                f"This would make {total} operators; a workflow holds at most {self.limits.max_operators}.",
            )
        return canonical

    def _structure(self, blueprint: StageBlueprint) -> None:
        limits = self.limits
        if isinstance(blueprint, ParallelBlueprint):
            if not 2 <= len(blueprint.operators) <= limits.max_branches:
                raise CanvasError(
                    ErrorCode.INVALID_STRUCTURE,
                    f"A parallel stage needs 2 to {limits.max_branches} branches; got {len(blueprint.operators)}.",
                )
            ensembles = [n for n in blueprint.operators if self.registry.spec(n).needs_candidates]
            if ensembles:
                raise CanvasError(
                    ErrorCode.INVALID_STRUCTURE,
                    f"{', '.join(sorted(set(ensembles)))} cannot be a parallel branch: ensemble operators combine the "
                    "candidates of a parallel stage, so add them as the stage after it.",
                )
        elif isinstance(blueprint, LoopBlueprint):
            if not 1 <= len(blueprint.operators) <= limits.max_loop_body:
                raise CanvasError(
                    ErrorCode.INVALID_STRUCTURE,
                    f"A loop body needs 1 to {limits.max_loop_body} operators; got {len(blueprint.operators)}.",
                )
            if not 1 <= blueprint.count <= limits.max_loop_count:
                raise CanvasError(
                    ErrorCode.INVALID_STRUCTURE,
                    f"Loop count must be between 1 and {limits.max_loop_count}; got {blueprint.count}.",
                )
        elif isinstance(blueprint, ConditionalBlueprint):
            spec = self.registry.spec(blueprint.check)
            if spec.role.value != "checker":
                checkers = ", ".join(n for n in self.allowed_names() if self.registry.spec(n).role.value == "checker")
                raise CanvasError(
                    ErrorCode.INVALID_STRUCTURE,
                    f"The condition of a conditional must be a checker ({checkers}); {blueprint.check} gives no verdict.",
                )

    def position(self, position: int | None, graph: WorkflowGraph) -> int:
        """Index to insert a new stage at (None = append)."""
        size = len(graph.stages)
        if position is None:
            return size
        if not 0 <= position <= size:
            raise CanvasError(
                ErrorCode.INVALID_POSITION,
                f"Position {position} is out of range; use 0..{size} (0 = first stage, {size} = append) or omit it.",
            )
        return position
