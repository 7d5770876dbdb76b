"""Edit validation: operator names, structure rules and limits, checked before anything changes.

Also the task, the workflow's options and the finish answer: every piece of user text the canvas stores is
bounded and valid Unicode, and every operator name it stores is one the library knows.
"""

from __future__ import annotations

import keyword

from flowsteer_mcp.canvas.blueprint import StageBlueprint, slot_prompts, slots, with_operators, with_prompts
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds import kind_of
from flowsteer_mcp.canvas.model import MAX_SAMPLES, WorkflowGraph
from flowsteer_mcp.canvas.numbers import show_int
from flowsteer_mcp.canvas.options import CanvasLimits, CanvasOptions, FinishPolicy
from flowsteer_mcp.canvas.text import excerpt, require_unicode
from operators.registry import OperatorRegistry

SHOWN_UNKNOWN_NAMES = 5  # unknown operator names quoted in one error; the rest are counted


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
            raise CanvasError(
                ErrorCode.UNKNOWN_OPERATOR, f"Unknown operator {excerpt(name)}. Valid operators: {valid}."
            )
        if canonical.lower() in self._disabled:
            raise CanvasError(
                ErrorCode.DISABLED_OPERATOR,
                f"Operator {canonical!r} is disabled for this workflow. Valid operators: {valid}.",
            )
        return canonical

    def prompt(self, text: str | None) -> str | None:
        if text is None:
            return None
        require_unicode(text, "The prompt")
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

    def samples(self, value: int, where: str = "") -> int:
        """A node's number of draws: 1..MAX_SAMPLES, with an error that says what samples are for."""
        if not 1 <= value <= MAX_SAMPLES:
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"samples{where} must be between 1 and {MAX_SAMPLES}; got {show_int(value)}. samples: k runs the "
                "node k times (the first greedy, the rest sampled) and passes the k answers as candidates to the "
                "next stage; use 3 to 5 before an ensemble such as ScEnsemble.",
            )
        return value

    def stop_rule(self, until: str | None, samples: int) -> None:
        """A stopping rule needs draws to stop (samples > 1)."""
        if until is not None and samples < 2:
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"until={until} stops a node's samples early, so it needs samples >= 2 (got {samples}); e.g. "
                "Programmer{8|tests} draws the greedy program and 7 more only when it fails the public tests.",
            )

    def answer(self, text: str | None) -> str | None:
        """A finish answer to record: valid Unicode and at most `max_answer_chars`."""
        if text is None:
            return None
        require_unicode(text, "The answer")
        if len(text) > self.limits.max_answer_chars:
            raise CanvasError(
                ErrorCode.LIMIT_EXCEEDED,
                f"The answer is {len(text)} characters; the limit is {self.limits.max_answer_chars}. "
                "Send only the final answer (the executed output is what counts).",
            )
        return text

    def blueprint(self, blueprint: StageBlueprint, graph: WorkflowGraph) -> StageBlueprint:
        """Validate a stage to add; returns it with canonical operator names and cleaned prompts."""
        names = [self.operator(slot.operator) for slot in slots(blueprint)]
        kind = kind_of(blueprint)
        canonical = with_operators(blueprint, names)
        kind.validate(canonical, self)
        prompts = kind.given_prompts(blueprint)
        if len(prompts) > len(names):
            raise CanvasError(
                ErrorCode.INVALID_STRUCTURE,
                f"Got {len(prompts)} prompts for {len(names)} operators; give at most one per operator.",
            )
        canonical = with_prompts(canonical, [self.prompt(p) for p in slot_prompts(canonical)])
        kind.validate_samples(canonical, self)
        total = sum(1 for _ in graph.iter_operator_nodes()) + len(names)
        if total > self.limits.max_operators:
            raise CanvasError(
                ErrorCode.LIMIT_EXCEEDED,
                f"This would make {total} operators; a workflow holds at most {self.limits.max_operators}.",
            )
        return canonical

    def position(self, position: int | None, graph: WorkflowGraph) -> int:
        """Index to insert a new stage at (None = append)."""
        size = len(graph.stages)
        if position is None:
            return size
        if not 0 <= position <= size:
            raise CanvasError(
                ErrorCode.INVALID_POSITION,
                f"Position {show_int(position)} is out of range; use 0..{size} (0 = first stage, {size} = append) or omit it.",
            )
        return position


def validate_task(
    limits: CanvasLimits, *, problem: str, entry_point: str | None = None, public_tests: str | None = None
) -> None:
    """Check a task before a workflow is created for it: valid Unicode, bounded fields, an identifier entry point."""
    require_unicode(problem, "The task")
    if public_tests is not None:
        require_unicode(public_tests, "public_tests")
        if len(public_tests) > limits.max_public_tests_chars:
            raise CanvasError(
                ErrorCode.LIMIT_EXCEEDED,
                f"public_tests is {len(public_tests)} characters; the limit is {limits.max_public_tests_chars}. "
                "Pass a few representative tests, not a whole test suite.",
            )
    if entry_point is not None:
        if len(entry_point) > limits.max_entry_point_chars:
            raise CanvasError(
                ErrorCode.LIMIT_EXCEEDED,
                f"entry_point is {len(entry_point)} characters; the limit is {limits.max_entry_point_chars}.",
            )
        if not entry_point.isidentifier() or keyword.iskeyword(entry_point):
            raise CanvasError(
                ErrorCode.INVALID_TEXT,
                "entry_point must be a Python identifier (the name of the function to implement, e.g. solve); "
                f"got {excerpt(entry_point)}.",
            )


def validate_options(registry: OperatorRegistry, options: CanvasOptions) -> CanvasOptions:
    """Options as a client set them, made safe to store: every operator name known to the library, in its
    registered spelling and listed once, and a finish gate that some workflow within the limits could pass.

    Why: a name the library lacks was stored as given (any size) and then never matched, and a lower-case
    checker name made `require_checker` unreachable."""
    disabled = known_operators(registry, options.disabled_operators, "disabled_operators")
    finish = options.finish
    if isinstance(finish, FinishPolicy):
        finish = _reachable_policy(registry, finish, options.limits)
    return options.model_copy(update={"disabled_operators": disabled, "finish": finish})


def known_operators(registry: OperatorRegistry, names: list[str], where: str) -> list[str]:
    """`names` in their registered spelling, each once; CanvasError naming (as excerpts) those it lacks."""
    canonical = [registry.canonical_name(name) for name in names]
    unknown = [excerpt(name) for name, found in zip(names, canonical, strict=True) if found is None]
    if unknown:
        shown = ", ".join(unknown[:SHOWN_UNKNOWN_NAMES])
        more = f" and {len(unknown) - SHOWN_UNKNOWN_NAMES} more" if len(unknown) > SHOWN_UNKNOWN_NAMES else ""
        raise CanvasError(
            ErrorCode.UNKNOWN_OPERATOR,
            f"Unknown operators in {where}: {shown}{more}. Valid: {', '.join(registry.names())}.",
        )
    return list(dict.fromkeys(name for name in canonical if name is not None))


def _reachable_policy(registry: OperatorRegistry, policy: FinishPolicy, limits: CanvasLimits) -> FinishPolicy:
    require_unicode(policy.preset, "finish.preset")
    if policy.min_operators > limits.max_operators:
        raise CanvasError(
            ErrorCode.INVALID_OPTIONS,
            f"finish.min_operators is {show_int(policy.min_operators)}, but a workflow holds at most "
            f"{limits.max_operators} operators here, so none could finish; use 0..{limits.max_operators}.",
        )
    solvers = _role_names(registry, policy.solver_operators, "solver", required=policy.require_solver)
    checkers = _role_names(registry, policy.checker_operators, "checker", required=policy.require_checker)
    return policy.model_copy(update={"solver_operators": solvers, "checker_operators": checkers})


def _role_names(registry: OperatorRegistry, names: list[str] | None, role: str, *, required: bool) -> list[str] | None:
    """The operators a policy says count as `role` (None: those the specs declare), or a CanvasError."""
    if names is None:
        return None
    where = f"finish.{role}_operators"
    if not names and required:
        raise CanvasError(
            ErrorCode.INVALID_OPTIONS,
            f"finish.require_{role} is true but {where} is empty, so no workflow could finish; name the operators "
            f"that count as a {role}, or omit the list to use those the library declares.",
        )
    return known_operators(registry, names, where)
