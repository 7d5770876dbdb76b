"""Seeded variations of library workflows: the same task-type family, reshaped at random.

Why: a warm start on the library's entries alone would teach a handful of fixed shapes; the policy has to propose
many workflow styles (good and bad) before reinforcement can move it toward what scores. Each variation applies one
or two mutations (swap an operator for another of the same role, change a stage's `samples`, choose another
prompt, add or drop a stage) and is kept only when the canvas rules accept every stage, so every variation can be
built through `act`. The random stream depends only on (seed, workflow name, variation index): the same seed gives
the same variations on every machine and in every order of collection.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from flowsteer_mcp.api import (
    CanvasError,
    ConditionalBlueprint,
    OperatorBlueprint,
    StageBlueprint,
    graph_of,
    kind_of,
    slot_prompts,
    slot_samples,
    slots,
    with_operators,
    with_prompts,
    with_samples,
)
from flowsteer_mcp.director.library import LibraryWorkflow
from operators.registry import default_registry

# Operators that can stand in for each other in a slot, per task type (same role, sensible for the task).
SWAPS: dict[str, list[frozenset[str]]] = {
    "code": [frozenset({"Programmer", "Custom"}), frozenset({"Test", "Review"}), frozenset({"Plan", "Decompose"})],
    "math": [
        frozenset({"Programmer", "Custom"}),
        frozenset({"Verify", "Review"}),
        frozenset({"ScEnsemble", "Aggregate"}),
        frozenset({"Plan", "Decompose"}),
    ],
    "qa": [
        frozenset({"AnswerGenerate", "Custom"}),
        frozenset({"Review", "Verify"}),
        frozenset({"ScEnsemble", "Aggregate"}),
        frozenset({"Plan", "Decompose"}),
    ],
}
SAMPLE_CHOICES = (1, 2, 3, 4, 6, 8)
# Alternative instructions per task type and operator; a prompt mutation picks one the slot does not already have.
_PLAN = "Outline how to answer this task in a few steps."
PROMPT_CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "code": {
        "Programmer": (
            "Write the complete function with the exact signature.",
            "Implement the function carefully; handle edge cases and keep the signature.",
            "Write a short, correct Python solution with the exact signature.",
        ),
        "Custom": (
            "Write the complete Python function in a ```python block.",
            "Think about edge cases, then write the complete function.",
        ),
        "ScEnsemble": ("Pick the program that passes the public tests.", "Choose the most reliable program."),
        "Plan": ("Outline the algorithm in a few short steps and name the edge cases; no code.", _PLAN),
    },
    "math": {
        "Programmer": (
            "Compute the answer exactly in solve() and return it.",
            "Write solve() that returns the number.",
        ),
        "Custom": (
            "Reason step by step and state the final number.",
            "Solve the problem carefully and give the final number at the end.",
        ),
        "ScEnsemble": ("Choose the answer most candidates agree on.", "Choose the best supported answer."),
        "Format": ("Output only the final number.", "Output only the final answer."),
        "Plan": ("List the quantities and the steps needed to compute the answer; do not compute it.", _PLAN),
    },
    "qa": {
        "AnswerGenerate": (
            "Answer the question from the given information in a few words.",
            "Think briefly, then give only the short answer.",
        ),
        "Custom": (
            "Answer the question from the given information in a few words.",
            "Give the shortest answer span that answers the question.",
        ),
        "ScEnsemble": ("Choose the short answer most candidates agree on.", "Choose the best supported short answer."),
        "Format": ("Output only the short answer span.", "Output only the final answer."),
        "Plan": (_PLAN,),
    },
}
SAMPLED = frozenset({"Programmer", "Custom", "AnswerGenerate"})  # the drafting operators worth several draws
# The check-and-repair stage a structure mutation may append, per task type.
REPAIR: dict[str, ConditionalBlueprint] = {
    "code": ConditionalBlueprint(
        check="Test", on_fail="Revise", prompts=["Run the public tests.", "Fix the function so the failing tests pass."]
    ),
    "math": ConditionalBlueprint(
        check="Verify",
        on_fail="Revise",
        prompts=["Solve independently and compare with the answer.", "Correct the answer using the check's feedback."],
    ),
    "qa": ConditionalBlueprint(
        check="Review",
        on_fail="Revise",
        prompts=["Check that the answer is supported and short.", "Give a corrected short answer."],
    ),
}
MAX_TRIES = 32

Stages = list[StageBlueprint]
Mutation = Callable[[Stages, str, random.Random], tuple[Stages, str] | None]


def _partner(operator: str, task_type: str, rng: random.Random) -> str | None:
    for group in SWAPS.get(task_type, []):
        if operator in group:
            return rng.choice(sorted(group - {operator}))
    return None


def swap_operator(stages: Stages, task_type: str, rng: random.Random) -> tuple[Stages, str] | None:
    """One slot's operator replaced by another of its role."""
    places = [(i, j) for i, stage in enumerate(stages) for j, _ in enumerate(slots(stage))]
    i, j = rng.choice(places)
    names = [slot.operator for slot in slots(stages[i])]
    partner = _partner(names[j], task_type, rng)
    if partner is None:
        return None
    old, names[j] = names[j], partner
    changed = list(stages)
    changed[i] = with_operators(stages[i], names)
    return changed, f"stage {i + 1}: {old} -> {partner}"


def change_samples(stages: Stages, task_type: str, rng: random.Random) -> tuple[Stages, str] | None:
    """Another number of draws for an operator stage or a child of a kind whose children sample (a parallel
    branch)."""
    del task_type
    i = rng.randrange(len(stages))
    stage = stages[i]
    value = rng.choice(SAMPLE_CHOICES)
    changed = list(stages)
    if isinstance(stage, OperatorBlueprint) and stage.operator in SAMPLED and stage.samples != value:
        # one draw leaves nothing for a stopping rule to stop
        changed[i] = stage.model_copy(update={"samples": value, "until": stage.until if value > 1 else None})
        return changed, f"stage {i + 1}: {stage.operator} samples {stage.samples} -> {value}"
    if kind_of(stage).child_samples:
        draws = slot_samples(stage)
        branch = rng.randrange(len(draws))
        if draws[branch] == value or slots(stage)[branch].operator not in SAMPLED:
            return None
        old, draws[branch] = draws[branch], value
        changed[i] = with_samples(stage, draws)
        return changed, f"stage {i + 1} branch {branch + 1}: samples {old} -> {value}"
    return None


def change_prompt(stages: Stages, task_type: str, rng: random.Random) -> tuple[Stages, str] | None:
    """Another instruction for one slot that has a prompt choice list."""
    i = rng.randrange(len(stages))
    names = [slot.operator for slot in slots(stages[i])]
    prompts = slot_prompts(stages[i])
    j = rng.randrange(len(names))
    options = [p for p in PROMPT_CHOICES.get(task_type, {}).get(names[j], ()) if p != prompts[j]]
    if not options:
        return None
    prompts[j] = rng.choice(options)
    changed = list(stages)
    changed[i] = with_prompts(stages[i], prompts)
    return changed, f"stage {i + 1}: {names[j]} prompt -> {prompts[j]!r}"


def change_structure(stages: Stages, task_type: str, rng: random.Random) -> tuple[Stages, str] | None:
    """Drop a stage, or add a plan, a check-and-repair or a format stage."""
    choice = rng.choice(("drop", "plan", "repair", "format"))
    if choice == "drop" and len(stages) > 1:
        i = rng.randrange(len(stages))
        return [s for k, s in enumerate(stages) if k != i], f"dropped stage {i + 1}"
    if choice == "plan" and not (isinstance(stages[0], OperatorBlueprint) and stages[0].operator == "Plan"):
        plan = OperatorBlueprint(
            operator="Plan", prompt=rng.choice(PROMPT_CHOICES.get(task_type, {}).get("Plan", (_PLAN,)))
        )
        return [plan, *stages], "added a Plan stage first"
    if choice == "repair" and task_type in REPAIR and not any(s.kind == REPAIR[task_type].kind for s in stages):
        return [*stages, REPAIR[task_type]], "added a check-and-repair stage"
    formats = PROMPT_CHOICES.get(task_type, {}).get("Format")
    if (
        choice == "format"
        and formats
        and not (isinstance(stages[-1], OperatorBlueprint) and stages[-1].operator == "Format")
    ):
        last = OperatorBlueprint(operator="Format", prompt=rng.choice(formats))
        return [*stages, last], "added a Format stage last"
    return None


MUTATIONS: tuple[Mutation, ...] = (swap_operator, change_samples, change_prompt, change_structure)


def is_valid(stages: Stages) -> bool:
    """Whether the canvas accepts every stage in order (the checks an `act` add makes, an ensemble's need for
    candidates included)."""
    if not stages:
        return False
    try:
        graph_of(stages, default_registry())
    except CanvasError:
        return False
    return True


def variation(base: LibraryWorkflow, index: int, seed: int) -> LibraryWorkflow:
    """Variation `index` (1-based) of `base`: one or two mutations, valid and different from `base`."""
    if index < 1:
        raise ValueError(f"variation index must be at least 1, got {index}")
    rng = random.Random(f"{seed}:{base.task_type}:{base.name}:{index}")
    for _ in range(MAX_TRIES):
        stages, notes = list(base.stages), []
        for _ in range(rng.choice((1, 2))):
            changed = rng.choice(MUTATIONS)(stages, base.task_type, rng)
            if changed is not None:
                stages, note = changed
                notes.append(note)
        if notes and stages != list(base.stages) and is_valid(stages):
            return LibraryWorkflow(
                name=f"{base.name}~{index}",
                task_type=base.task_type,
                rationale=f"variation of {base.name}: " + "; ".join(notes),
                stages=tuple(stages),
            )
    raise ValueError(f"no valid variation {index} of {base.name!r} found in {MAX_TRIES} tries (seed {seed})")


def variations(base: LibraryWorkflow, count: int, seed: int) -> list[LibraryWorkflow]:
    """`count` seeded variations of `base` (they may coincide with each other, never with `base`)."""
    return [variation(base, index, seed) for index in range(1, count + 1)]
