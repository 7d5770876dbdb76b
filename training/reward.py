"""Trajectory reward with conditional release (docs/design/training.md, "Reward").

    R = base + S + 1[S >= release] * C  (+ penalty when the episode did not finish)
                                        (- operator_cost per operator beyond free_operators)
                                        (- executor_token_cost per 1,000 executor tokens)

S is a structural score in [0, cap] computed from the canvas graph statistics (the dict that the
canvas's `GraphStats` serialises to), never from workflow text: the reference regex-matched its DSL
string and its loop pattern could never fire. C in [0, 1] is answer correctness from the shared scorer;
the caller passes it in so that this module stays pure and cheap to test.

S's terms come from the schedule `reward.schedule` names in the schedule registry
(`training/reward_schedules.py`, open to plug-ins). Two are built in:
- `flowsteer-v4`: verification + final formatting + enough operators + any control structure.
- `milestones`: the progressive schedule of the reference FlowSteer implementation's interactive-training
  config, which is not part of this repository (diversity and size thresholds plus structure bonuses).
  "Multi-structure" means at least `multi_structure_min_kinds` distinct structure kinds, our reading of it.

What counts as a control structure is the canvas's decision, not this module's: the statistics list the kinds
used whose stage-kind contract says `is_structure` (`GraphStats.structures`), and both schedules read that list.
A kind the canvas adds (e.g. `fallback`) therefore earns the structure term and counts towards multi-structure
exactly where the finish gate accepts it as a structure. The milestones' per-kind bonuses default to each kind's
`milestone_bonus` (the reference's parallel, conditional and loop have one; fallback has none).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from flowsteer_mcp.api import structure_kinds
from operators.base import Category
from operators.specs import BUILTIN_SPECS
from training.reward_schedules import reward_schedules

# Sums of decimal weights are inexact in binary (0.1 + 0.2 != 0.3). S is rounded to this many digits so that
# a workflow earning exactly `release` on paper is released, and logs show 1.0 rather than 0.9999999999999999.
SCORE_DIGITS = 12

_FORMATTING = Category.FORMATTING.value


class _StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlowSteerV4Weights(_StrictModel):
    """Weights of the four-term schedule described by the FlowSteer v4 README."""

    checker: float = Field(default=0.2, ge=0.0)
    format: float = Field(default=0.2, ge=0.0)
    min_operators: float = Field(default=0.2, ge=0.0)
    min_operators_threshold: int = Field(default=6, ge=1)
    structure: float = Field(default=0.4, ge=0.0)


class MilestoneWeights(_StrictModel):
    """Weights of the progressive milestone schedule (`reward.schedule: milestones`), with the defaults of the
    reference FlowSteer implementation's interactive-training config (docs/design/training.md, "Reward").

    `unique_types` / `total_operators` map a threshold to the bonus earned when the count reaches it. `kinds` maps
    a structure kind to the bonus earned when the workflow uses it; a config sets it as `kinds: {loop: 0.1}` or,
    as configs always did, as a top-level `loop: 0.1` (dumps keep that flat form, so run fingerprints do not
    change). Unset kinds take their stage kind's `milestone_bonus`; a kind without one earns no per-kind term.
    """

    unique_types: dict[int, float] = Field(default_factory=lambda: {3: 0.1, 4: 0.1, 5: 0.1, 6: 0.1})
    total_operators: dict[int, float] = Field(default_factory=lambda: {6: 0.1, 8: 0.1})
    kinds: dict[str, float] = Field(default_factory=dict)
    multi_structure: float = Field(default=0.15, ge=0.0)
    multi_structure_min_kinds: int = Field(default=2, ge=2, le=3)

    @model_validator(mode="before")
    @classmethod
    def _per_kind_bonuses(cls, data: Any) -> Any:
        """Gather the per-kind bonuses (top-level kind keys and `kinds`) over the registered kinds' defaults."""
        if not isinstance(data, Mapping) or not isinstance(data.get("kinds", {}), Mapping):
            return data  # pydantic reports the wrong type
        structures = {kind.name: kind for kind in structure_kinds()}
        flat = {key: value for key, value in data.items() if key in structures}
        nested = dict(data.get("kinds", {}))
        unknown = sorted(set(nested) - set(structures))
        if unknown:
            raise ValueError(f"milestones.kinds names no structure kind: {unknown}; known: {sorted(structures)}")
        if set(flat) & set(nested):
            raise ValueError(f"milestone bonus of {sorted(set(flat) & set(nested))} given twice (top level and kinds)")
        defaults = {name: kind.milestone_bonus for name, kind in structures.items() if kind.milestone_bonus is not None}
        rest = {key: value for key, value in data.items() if key not in structures}
        return {**rest, "kinds": {**defaults, **flat, **nested}}

    @model_serializer(mode="wrap")
    def _flat_kinds(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The per-kind bonuses as top-level keys, where configs and dumps have always had them."""
        flat: dict[str, Any] = {}
        for key, value in handler(self).items():
            if key == "kinds":
                flat.update(value)
            else:
                flat[key] = value
        return flat

    @model_validator(mode="after")
    def _non_negative_bonuses(self) -> MilestoneWeights:
        for table in (self.unique_types, self.total_operators, self.kinds):
            if any(weight < 0 for weight in table.values()):
                raise ValueError("milestone bonuses must be >= 0")
        return self


class RewardConfig(_StrictModel):
    """Reward settings; unknown keys are errors so a typo in a preset cannot silently do nothing."""

    schedule: str = Field(
        default="flowsteer-v4",
        description="A registered reward schedule (training/reward_schedules.py): flowsteer-v4, milestones or a "
        "plug-in's.",
    )
    base: float = -1.0
    release: float = Field(default=1.0, ge=0.0)
    cap: float = Field(default=1.0, gt=0.0)
    unfinished_penalty: float = Field(
        default=0.0, ge=0.0, description="Magnitude subtracted from R when the episode ended without `finish`."
    )
    operator_cost: float = Field(
        default=0.0,
        ge=0.0,
        description="Subtracted per operator of the final workflow beyond `free_operators`. With outcomes alone an "
        "extra stage is free, and a policy can drift into padding the workflow until the round budget runs out.",
    )
    free_operators: int = Field(default=2, ge=0, description="Operators the operator cost does not count.")
    executor_token_cost: float = Field(
        default=0.0,
        ge=0.0,
        description="Subtracted per 1,000 executor tokens the episode was charged. With outcomes alone two "
        "workflows that solve a problem earn the same whatever they spend; this term gives the tie to the cheaper "
        "one, while a correct answer still outweighs 1/cost thousand tokens.",
    )
    flowsteer_v4: FlowSteerV4Weights = Field(default_factory=FlowSteerV4Weights)
    milestones: MilestoneWeights = Field(default_factory=MilestoneWeights)
    weights: dict[str, Any] = Field(
        default_factory=dict,
        # Left out of dumps while empty: configs (and run fingerprints) from before plug-in schedules are unchanged.
        exclude_if=lambda weights: not weights,
        description="A plug-in schedule's weights, validated by its weights model (the built-in schedules keep "
        "theirs under flowsteer_v4 and milestones).",
    )

    @model_validator(mode="after")
    def _schedule_registered(self) -> RewardConfig:
        reward_schedules().get(self.schedule).weights_for(self)  # an unknown name or bad weights fail at load time
        return self

    @model_validator(mode="after")
    def _spending_nothing_is_not_a_way_out(self) -> RewardConfig:
        if self.executor_token_cost and not self.unfinished_penalty:
            raise ValueError(
                "executor_token_cost needs an unfinished_penalty (e.g. 0.2): without one, an episode that built "
                "nothing and spent no tokens earns more than one whose workflow ran and answered wrongly"
            )
        return self

    @model_validator(mode="after")
    def _release_reachable(self) -> RewardConfig:
        if self.release > self.cap:
            raise ValueError(
                f"release ({self.release}) is above the structure cap ({self.cap}): correctness could never be "
                "released; lower `release` or raise `cap`"
            )
        return self


class WorkflowShape(BaseModel):
    """The subset of the canvas graph statistics that the reward reads.

    Extra keys are ignored on purpose: the canvas may add statistics without breaking rewards.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    total_operators: int = Field(ge=0)
    unique_types: int = Field(ge=0)
    operators: list[str] = Field(default_factory=list)
    structures: list[str] = Field(default_factory=list)  # the structure kinds used, as the canvas's contract says
    category_counts: dict[str, int] = Field(default_factory=dict)
    has_checker: bool = False

    @property
    def has_format(self) -> bool:
        """A formatting operator is present: by the canvas's category counts (which cover plug-ins); statistics
        without them fall back to the built-in specs' categories of the listed operators."""
        if self.category_counts:
            return self.category_counts.get(_FORMATTING, 0) > 0
        return any(
            name in BUILTIN_SPECS and BUILTIN_SPECS[name].category is Category.FORMATTING for name in self.operators
        )

    @property
    def has_structure(self) -> bool:
        return bool(self.structures)

    @property
    def structure_kinds(self) -> int:
        return len(set(self.structures))

    def uses(self, kind: str) -> bool:
        """Whether the workflow uses the structure kind `kind` (for the per-kind milestone bonuses)."""
        return kind in self.structures


class RewardBreakdown(BaseModel):
    """Every component of one trajectory's reward, for per-trajectory logging."""

    model_config = ConfigDict(frozen=True)

    schedule: str
    terms: dict[str, float]  # each S term by name (zero when not earned)
    structure_uncapped: float
    structure: float  # S, after the cap
    correctness: float  # C as given
    released: bool
    finished: bool
    base: float
    penalty: float  # signed amount added to R (<= 0) for not finishing
    operator_cost: float = 0.0  # signed amount added to R (<= 0) for the operators beyond the free ones
    token_cost: float = 0.0  # signed amount added to R (<= 0) for the executor tokens spent
    total: float

    def flat(self, prefix: str = "reward") -> dict[str, float]:
        """A flat name -> number mapping for JSONL / TensorBoard logging."""
        out = {f"{prefix}/S/{name}": value for name, value in self.terms.items()}
        out.update(
            {
                f"{prefix}/S": self.structure,
                f"{prefix}/C": self.correctness,
                f"{prefix}/released": float(self.released),
                f"{prefix}/finished": float(self.finished),
                f"{prefix}/penalty": self.penalty,
                f"{prefix}/operator_cost": self.operator_cost,
                f"{prefix}/token_cost": self.token_cost,
                f"{prefix}/total": self.total,
            }
        )
        return out


def workflow_shape(stats: Mapping[str, Any] | BaseModel) -> WorkflowShape:
    """Validate the canvas statistics (a dict, or any pydantic model such as `GraphStats`)."""
    data = stats.model_dump() if isinstance(stats, BaseModel) else dict(stats)
    return WorkflowShape.model_validate(data)


def flowsteer_v4_terms(shape: WorkflowShape, weights: FlowSteerV4Weights) -> dict[str, float]:
    return {
        "checker": weights.checker if shape.has_checker else 0.0,
        "format": weights.format if shape.has_format else 0.0,
        "min_operators": weights.min_operators if shape.total_operators >= weights.min_operators_threshold else 0.0,
        "structure": weights.structure if shape.has_structure else 0.0,
    }


def milestone_terms(shape: WorkflowShape, weights: MilestoneWeights) -> dict[str, float]:
    terms: dict[str, float] = {}
    for threshold, bonus in sorted(weights.unique_types.items()):
        terms[f"unique_types>={threshold}"] = bonus if shape.unique_types >= threshold else 0.0
    for threshold, bonus in sorted(weights.total_operators.items()):
        terms[f"total_operators>={threshold}"] = bonus if shape.total_operators >= threshold else 0.0
    for kind in structure_kinds():  # read now: a kind registered after the config was made has its default
        kind_bonus = weights.kinds.get(kind.name, kind.milestone_bonus)
        if kind_bonus is not None:
            terms[kind.name] = kind_bonus if shape.uses(kind.name) else 0.0
    multi = shape.structure_kinds >= weights.multi_structure_min_kinds
    terms["multi_structure"] = weights.multi_structure if multi else 0.0
    return terms


def structure_terms(shape: WorkflowShape, config: RewardConfig) -> dict[str, float]:
    """S's terms under the schedule `config` names, as registered (built-in or plug-in)."""
    schedule = reward_schedules().get(config.schedule)
    return {name: float(value) for name, value in schedule.terms(shape, schedule.weights_for(config)).items()}


def compute_reward(
    stats: Mapping[str, Any] | BaseModel,
    *,
    correctness: float,
    finished: bool,
    config: RewardConfig | None = None,
    executor_tokens: int = 0,
) -> RewardBreakdown:
    """Reward of one trajectory from its final graph statistics, the scorer's correctness C and the executor
    tokens the episode was charged (read only when `executor_token_cost` is set).

    Raises `ValueError` for malformed statistics, a correctness outside [0, 1] or negative tokens.
    """
    config = config or RewardConfig()
    if not (math.isfinite(correctness) and 0.0 <= correctness <= 1.0):
        raise ValueError(f"correctness must be a finite number in [0, 1], got {correctness!r}")
    if executor_tokens < 0:
        raise ValueError(f"executor_tokens must be >= 0, got {executor_tokens!r}")
    shape = workflow_shape(stats)
    terms = structure_terms(shape, config)
    uncapped = round(math.fsum(terms.values()), SCORE_DIGITS)
    structure = min(config.cap, uncapped)
    released = structure >= config.release
    penalty = -config.unfinished_penalty if (not finished and config.unfinished_penalty) else 0.0
    extra_operators = max(0, shape.total_operators - config.free_operators)
    operator_cost = -config.operator_cost * extra_operators if (config.operator_cost and extra_operators) else 0.0
    token_cost = -config.executor_token_cost * executor_tokens / 1000 if config.executor_token_cost else 0.0
    total = config.base + structure + (correctness if released else 0.0) + penalty + operator_cost + token_cost
    return RewardBreakdown(
        schedule=config.schedule,
        terms=terms,
        structure_uncapped=uncapped,
        structure=structure,
        correctness=correctness,
        released=released,
        finished=finished,
        base=config.base,
        penalty=penalty,
        operator_cost=operator_cost,
        token_cost=token_cost,
        total=total,
    )
