"""Reward with conditional release: every S term, both schedules, the release boundary, the cap, the
unfinished penalty and the config contract. Expected values are worked out by hand in the comments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.finish import structural_violations
from flowsteer_mcp.canvas.kinds import KINDS, STRUCTURES, structure_kinds
from flowsteer_mcp.canvas.model import LoopStage, OperatorNode, WorkflowGraph
from flowsteer_mcp.canvas.options import FINISH_PRESETS, CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.stats import GraphStats, graph_stats
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import default_registry
from training.reward import FlowSteerV4Weights, RewardConfig, compute_reward
from training.train.config import load_train_config

CATEGORY_OF = {
    "Plan": "planning",
    "Decompose": "planning",
    "Custom": "solving",
    "AnswerGenerate": "solving",
    "Programmer": "solving",
    "Test": "verification",
    "Review": "verification",
    "Verify": "verification",
    "Revise": "revision",
    "ScEnsemble": "ensemble",
    "Aggregate": "ensemble",
    "Format": "formatting",
}
CHECKERS = {"Test", "Review", "Verify"}


def stats_for(operators: list[str], **structure: bool) -> dict[str, Any]:
    """The dict the canvas returns for a graph with these operator nodes (stage order) and structures."""
    categories: dict[str, int] = dict.fromkeys(sorted(set(CATEGORY_OF.values())), 0)
    for name in operators:
        categories[CATEGORY_OF[name]] += 1
    return {
        "total_operators": len(operators),
        "unique_types": len(set(operators)),
        "operators": operators,
        "stage_count": len(operators),
        "structures": [kind.name for kind in STRUCTURES if structure.get(kind.name, False)],
        "has_parallel": structure.get("parallel", False),
        "has_conditional": structure.get("conditional", False),
        "has_loop": structure.get("loop", False),
        "category_counts": categories,
        "has_checker": any(name in CHECKERS for name in operators),
    }


V4 = RewardConfig()
MILESTONES = RewardConfig(schedule="milestones")


# ---------------------------------------------------------------- flowsteer-v4 terms, one at a time


def test_v4_empty_workflow_earns_nothing_and_gets_the_base() -> None:
    result = compute_reward(stats_for([]), correctness=1.0, finished=True)
    assert result.terms == {"checker": 0.0, "format": 0.0, "min_operators": 0.0, "structure": 0.0}
    assert result.structure == 0.0
    assert not result.released
    assert result.total == -1.0


def test_v4_checker_term() -> None:
    result = compute_reward(stats_for(["Custom", "Verify"]), correctness=0.0, finished=True)
    assert result.terms["checker"] == 0.2
    assert sum(result.terms.values()) == pytest.approx(0.2)
    assert result.total == pytest.approx(-0.8)


def test_v4_format_term_from_the_formatting_category() -> None:
    result = compute_reward(stats_for(["Custom", "Format"]), correctness=0.0, finished=True)
    assert result.terms["format"] == 0.2
    assert result.terms["checker"] == 0.0
    assert result.structure == pytest.approx(0.2)


def test_v4_format_term_from_the_operator_list_when_categories_are_absent() -> None:
    stats = stats_for(["Custom", "Format"])
    stats["category_counts"] = {}
    assert compute_reward(stats, correctness=0.0, finished=True).terms["format"] == 0.2


@pytest.mark.parametrize(("n_ops", "expected"), [(5, 0.0), (6, 0.2), (9, 0.2)])
def test_v4_min_operators_term_threshold(n_ops: int, expected: float) -> None:
    result = compute_reward(stats_for(["Custom"] * n_ops), correctness=0.0, finished=True)
    assert result.terms["min_operators"] == expected


@pytest.mark.parametrize("kind", ["parallel", "conditional", "loop", "fallback"])
def test_v4_each_structure_kind_earns_the_structure_term(kind: str) -> None:
    result = compute_reward(stats_for(["Custom"], **{kind: True}), correctness=0.0, finished=True)
    assert result.terms["structure"] == 0.4
    assert result.structure == pytest.approx(0.4)


def test_v4_loop_only_workflow_scores_structure() -> None:
    # Programmer -> (Test -> Revise) * 3 -> Review -> Format: 5 ops, checker, format, loop.
    # S = 0.2 + 0.2 + 0 + 0.4 = 0.8 (the reference's regex misses the loop and gives 0.4), R = -1 + 0.8 = -0.2.
    stats = stats_for(["Programmer", "Test", "Revise", "Review", "Format"], loop=True)
    result = compute_reward(stats, correctness=1.0, finished=True)
    assert result.terms == {"checker": 0.2, "format": 0.2, "min_operators": 0.0, "structure": 0.4}
    assert result.structure == pytest.approx(0.8)
    assert not result.released
    assert result.total == pytest.approx(-0.2)


def test_loop_in_a_real_canvas_graph_is_detected_and_rewarded() -> None:
    graph = WorkflowGraph(
        stages=[
            OperatorNode(id="n1", operator="Programmer"),
            LoopStage(
                id="n2",
                body=[OperatorNode(id="n3", operator="Test"), OperatorNode(id="n4", operator="Revise")],
                count=3,
            ),
            OperatorNode(id="n5", operator="Review"),
            OperatorNode(id="n6", operator="Format"),
        ]
    )
    stats = graph_stats(graph, default_registry())
    assert stats.has_loop
    for given in (stats, stats.model_dump(mode="json")):  # the model itself or its JSON form over MCP
        result = compute_reward(given, correctness=0.0, finished=True)
        assert result.terms["structure"] == 0.4
        assert result.structure == pytest.approx(0.8)


def test_v4_full_marks_release_correctness() -> None:
    # Plan -> [Programmer, Custom] -> Aggregate -> Verify ? Revise -> Format: 7 ops, all four terms.
    # S = 0.2 + 0.2 + 0.2 + 0.4 = 1.0 >= release 1.0, so R = -1 + 1 + C = C.
    stats = stats_for(
        ["Plan", "Programmer", "Custom", "Aggregate", "Verify", "Revise", "Format"], parallel=True, conditional=True
    )
    result = compute_reward(stats, correctness=0.75, finished=True)
    assert result.structure == 1.0
    assert result.released
    assert result.total == pytest.approx(0.75)


def test_v4_recommended_five_op_workflow_is_not_released() -> None:
    # Plan -> Programmer -> Verify ? Revise -> Format: 5 ops: S = 0.8, C is withheld: R = -0.2 whatever C is.
    stats = stats_for(["Plan", "Programmer", "Verify", "Revise", "Format"], conditional=True)
    for correctness in (0.0, 1.0):
        result = compute_reward(stats, correctness=correctness, finished=True)
        assert result.structure == pytest.approx(0.8)
        assert not result.released
        assert result.total == pytest.approx(-0.2)


def test_v4_weights_are_configurable() -> None:
    config = RewardConfig.model_validate(
        {"flowsteer_v4": {"checker": 0.5, "format": 0.1, "min_operators": 0.1, "min_operators_threshold": 2}}
    )
    result = compute_reward(stats_for(["Custom", "Verify"]), correctness=0.0, finished=True, config=config)
    # checker 0.5 + min_operators 0.1 (2 >= 2) = 0.6
    assert result.terms == {"checker": 0.5, "format": 0.0, "min_operators": 0.1, "structure": 0.0}
    assert result.structure == pytest.approx(0.6)


# ---------------------------------------------------------------- structures come from the stage-kind contract

REPO = Path(__file__).resolve().parents[2]
RULES = CanvasRules(default_registry(), CanvasOptions())
MATH_TASK = TaskSpec(problem="What is 6*7?", task_type="math")
# One small graph per structure kind. A kind registered with `is_structure` but missing here fails
# `test_every_structure_kind_is_counted_by_stats_gate_and_reward_alike`, so a new kind cannot be skipped.
STRUCTURE_EXAMPLES = {
    "parallel": "[Programmer, Custom]",
    "conditional": "Verify ? Revise : done",
    "loop": "(Test -> Revise) * 2",
    "fallback": "Programmer ?? Custom",
}


def canvas_stats(dsl: str) -> dict[str, Any]:
    """The statistics of a real canvas graph, in the JSON form the reward receives over MCP."""
    return graph_stats(import_dsl(dsl, RULES), RULES.registry).model_dump(mode="json")


def test_the_structure_kinds_are_the_kinds_whose_contract_says_so() -> None:
    assert not KINDS["operator"].is_structure
    names = [kind.name for kind in structure_kinds()]
    assert names == [name for name, kind in KINDS.items() if kind.is_structure]
    assert [kind.name for kind in STRUCTURES] == names  # the live view the add_structure tool offers
    assert set(names) == {"parallel", "conditional", "loop", "fallback"}  # the built-ins; no other is registered


def test_every_structure_kind_is_counted_by_stats_gate_and_reward_alike() -> None:
    """Stats list the kind, the paper gate accepts it as the workflow's structure, both reward schedules score
    it; an operator-only graph gets none of the three."""
    assert set(STRUCTURE_EXAMPLES) == {kind.name for kind in STRUCTURES}, "add an example of the new kind"
    paper = FINISH_PRESETS["paper"]
    for name, dsl in [("operator", "Custom"), *STRUCTURE_EXAMPLES.items()]:
        stats = canvas_stats(dsl)
        counted = KINDS[name].is_structure
        assert stats["structures"] == ([name] if counted else []), name
        gate = {
            v.constraint for v in structural_violations(paper, GraphStats(**stats), MATH_TASK, registry=RULES.registry)
        }
        assert ("structure" not in gate) is counted, name
        assert compute_reward(stats, correctness=0.0, finished=True).terms["structure"] == (0.4 if counted else 0.0)
        # the milestones count every structure kind towards multi-structure, paired here with a conditional
        paired = canvas_stats(f"{dsl} -> Review ? Revise : done")
        multi = compute_reward(paired, correctness=0.0, finished=True, config=MILESTONES).terms["multi_structure"]
        assert multi == (0.15 if counted and name != "conditional" else 0.0), name


def test_paper_reward_of_a_correct_fallback_workflow_equals_the_conditional_one() -> None:
    """Under configs/paper.yaml a finished, correct workflow whose only structure is a fallback used to get
    R = -0.4 (no structure term, S = 0.6, C withheld) while its conditional twin got 1.0."""
    config = load_train_config(REPO / "configs" / "paper.yaml")
    assert config.rollout.canvas.finish == "paper"
    paper = FINISH_PRESETS["paper"]
    rewards = {}
    for name, dsl in {
        "fallback": "Plan -> Programmer ?? Custom -> Verify -> Revise -> Format",
        "conditional": "Plan -> Programmer -> Custom -> Verify ? Revise : done -> Format",
    }.items():
        stats = canvas_stats(dsl)
        assert stats["structures"] == [name]
        assert structural_violations(paper, GraphStats(**stats), MATH_TASK, registry=RULES.registry) == []
        rewards[name] = compute_reward(stats, correctness=1.0, finished=True, config=config.reward)
    assert rewards["fallback"].terms == rewards["conditional"].terms
    assert rewards["fallback"].total == rewards["conditional"].total == pytest.approx(1.0)


# ---------------------------------------------------------------- milestones


def test_milestones_hand_computed_example() -> None:
    # Types {Plan, Programmer, Custom, ScEnsemble, Verify} = 5 unique -> 3, 4, 5 reached: 0.3.
    # 7 ops -> >=6 reached, >=8 not: 0.1. Parallel 0.2 + loop 0.1, two kinds -> multi 0.15.
    # S = 0.3 + 0.1 + 0.2 + 0.1 + 0.15 = 0.85.
    stats = stats_for(
        ["Plan", "Programmer", "Custom", "Programmer", "ScEnsemble", "Verify", "Custom"], parallel=True, loop=True
    )
    result = compute_reward(stats, correctness=1.0, finished=True, config=MILESTONES)
    assert result.terms == {
        "unique_types>=3": 0.1,
        "unique_types>=4": 0.1,
        "unique_types>=5": 0.1,
        "unique_types>=6": 0.0,
        "total_operators>=6": 0.1,
        "total_operators>=8": 0.0,
        "parallel": 0.2,
        "conditional": 0.0,
        "loop": 0.1,
        "multi_structure": 0.15,
    }
    assert result.structure == 0.85
    assert not result.released
    assert result.total == pytest.approx(-0.15)


def test_milestones_single_structure_earns_no_multi_bonus() -> None:
    # 3 unique types (0.1) over 3 ops, conditional only (0.15): S = 0.25.
    stats = stats_for(["Custom", "Verify", "Revise"], conditional=True)
    result = compute_reward(stats, correctness=0.0, finished=True, config=MILESTONES)
    assert result.terms["multi_structure"] == 0.0
    assert result.terms["loop"] == 0.0
    assert result.structure == 0.25


def test_milestones_loop_only_scores_loop() -> None:
    stats = stats_for(["Programmer", "Test"], loop=True)
    result = compute_reward(stats, correctness=0.0, finished=True, config=MILESTONES)
    assert result.terms["loop"] == 0.1
    assert result.structure == 0.1


def test_milestones_full_schedule_is_capped_at_one() -> None:
    # Everything: 0.4 + 0.2 + 0.2 + 0.15 + 0.1 + 0.15 = 1.2 uncapped -> S = 1.0 and released.
    stats = stats_for(
        ["Plan", "Decompose", "Programmer", "Custom", "ScEnsemble", "Verify", "Revise", "Format"],
        parallel=True,
        conditional=True,
        loop=True,
    )
    result = compute_reward(stats, correctness=0.5, finished=True, config=MILESTONES)
    assert result.structure_uncapped == 1.2
    assert result.structure == 1.0
    assert result.released
    assert result.total == pytest.approx(0.5)


def test_cap_applies_to_the_v4_schedule_too() -> None:
    config = RewardConfig.model_validate({"flowsteer_v4": {"structure": 0.9}})
    stats = stats_for(["Plan", "Programmer", "Custom", "Verify", "Revise", "Format"], parallel=True)
    result = compute_reward(stats, correctness=1.0, finished=True, config=config)
    assert result.structure_uncapped == 1.5
    assert result.structure == 1.0
    assert result.total == pytest.approx(1.0)


# ---------------------------------------------------------------- the release boundary


def test_release_at_exactly_one_despite_binary_rounding() -> None:
    # Weights 0.7 + 0.1 + 0.1 + 0.1 are 1.0 on paper, but a naive float sum gives 0.9999999999999999.
    assert 0.7 + 0.1 + 0.1 + 0.1 < 1.0
    config = RewardConfig.model_validate(
        {"flowsteer_v4": {"checker": 0.7, "format": 0.1, "min_operators": 0.1, "structure": 0.1}}
    )
    stats = stats_for(["Plan", "Programmer", "Custom", "Verify", "Revise", "Format"], conditional=True)
    result = compute_reward(stats, correctness=0.4, finished=True, config=config)
    assert result.structure == 1.0
    assert result.released
    assert result.total == pytest.approx(0.4)


def test_milestones_exactly_one_is_released() -> None:
    # 5 unique types (0.3) + 6 ops (0.1) + parallel 0.2 + conditional 0.15 + loop 0.1 + multi 0.15 = 1.0.
    stats = stats_for(
        ["Plan", "Programmer", "Custom", "Verify", "Revise", "Custom"], parallel=True, conditional=True, loop=True
    )
    result = compute_reward(stats, correctness=1.0, finished=True, config=MILESTONES)
    assert result.structure_uncapped == 1.0
    assert result.released
    assert result.total == pytest.approx(1.0)
    # Without the loop: 0.9 and multi still earned (two kinds): not released.
    stats = stats_for(["Plan", "Programmer", "Custom", "Verify", "Revise", "Custom"], parallel=True, conditional=True)
    below = compute_reward(stats, correctness=1.0, finished=True, config=MILESTONES)
    assert below.structure == 0.9
    assert not below.released
    assert below.total == pytest.approx(-0.1)


def test_release_boundary_at_and_just_below_a_configured_threshold() -> None:
    stats = stats_for(["Custom", "Verify", "Format"], loop=True)  # v4: 0.2 + 0.2 + 0.4 = 0.8
    at = compute_reward(stats, correctness=0.5, finished=True, config=RewardConfig(release=0.8))
    assert at.structure == 0.8
    assert at.released
    assert at.total == pytest.approx(-1.0 + 0.8 + 0.5)
    above = compute_reward(stats, correctness=0.5, finished=True, config=RewardConfig(release=0.8 + 1e-6))
    assert not above.released
    assert above.total == pytest.approx(-0.2)


def test_just_below_default_release_is_not_released() -> None:
    config = RewardConfig.model_validate({"flowsteer_v4": {"structure": 0.4 - 1e-6}})
    stats = stats_for(["Plan", "Programmer", "Custom", "Verify", "Revise", "Format"], loop=True)
    result = compute_reward(stats, correctness=1.0, finished=True, config=config)
    assert result.structure == pytest.approx(1.0 - 1e-6)
    assert not result.released
    assert result.total == pytest.approx(-1e-6)


def test_base_is_configurable() -> None:
    result = compute_reward(stats_for(["Custom"]), correctness=0.0, finished=True, config=RewardConfig(base=0.0))
    assert result.total == 0.0


# ---------------------------------------------------------------- unfinished penalty


def test_unfinished_penalty_applies_only_when_not_finished() -> None:
    config = RewardConfig(unfinished_penalty=0.5)
    stats = stats_for(["Custom", "Verify"])  # S = 0.2
    finished = compute_reward(stats, correctness=0.0, finished=True, config=config)
    unfinished = compute_reward(stats, correctness=0.0, finished=False, config=config)
    assert finished.penalty == 0.0
    assert finished.total == pytest.approx(-0.8)
    assert unfinished.penalty == -0.5
    assert not unfinished.finished
    assert unfinished.total == pytest.approx(-1.3)


def test_default_has_no_unfinished_penalty() -> None:
    result = compute_reward(stats_for(["Custom", "Verify"]), correctness=0.0, finished=False)
    assert result.penalty == 0.0
    assert str(result.penalty) == "0.0"  # not -0.0 in logs
    assert result.total == pytest.approx(-0.8)


# ---------------------------------------------------------------- operator cost

NO_STRUCTURE = FlowSteerV4Weights(checker=0.0, format=0.0, min_operators=0.0, structure=0.0)  # outcomes only


def test_operator_cost_charges_only_operators_beyond_the_free_ones() -> None:
    config = RewardConfig(release=0.0, operator_cost=0.05, free_operators=2, flowsteer_v4=NO_STRUCTURE)
    vote = compute_reward(stats_for(["Programmer", "ScEnsemble"]), correctness=1.0, finished=True, config=config)
    padded = compute_reward(
        stats_for(["Programmer", "ScEnsemble", "ScEnsemble", "ScEnsemble", "Format"]),
        correctness=1.0,
        finished=True,
        config=config,
    )
    assert vote.operator_cost == 0.0
    assert vote.total == pytest.approx(0.0)
    assert padded.operator_cost == pytest.approx(-0.15)
    assert padded.total == pytest.approx(vote.total - 0.15)


def test_operator_cost_adds_to_the_unfinished_penalty() -> None:
    config = RewardConfig(
        release=0.0, unfinished_penalty=0.5, operator_cost=0.1, free_operators=1, flowsteer_v4=NO_STRUCTURE
    )
    result = compute_reward(
        stats_for(["Custom", "ScEnsemble", "Format"]), correctness=0.0, finished=False, config=config
    )
    assert result.penalty == -0.5
    assert result.operator_cost == pytest.approx(-0.2)
    assert result.total == pytest.approx(-1.7)
    assert result.flat()["reward/operator_cost"] == pytest.approx(-0.2)


def test_default_has_no_operator_cost() -> None:
    result = compute_reward(stats_for(["Custom"] * 9), correctness=0.0, finished=True)
    assert result.operator_cost == 0.0
    assert str(result.operator_cost) == "0.0"


def test_negative_operator_cost_is_rejected() -> None:
    with pytest.raises(ValidationError, match="operator_cost"):
        RewardConfig(operator_cost=-0.1)


# ---------------------------------------------------------------- executor token cost


def test_token_cost_gives_a_tie_in_outcome_to_the_cheaper_workflow() -> None:
    config = RewardConfig(release=0.0, executor_token_cost=0.02, unfinished_penalty=0.2, flowsteer_v4=NO_STRUCTURE)
    shape = stats_for(["Custom", "ScEnsemble"])
    greedy = compute_reward(shape, correctness=1.0, finished=True, config=config, executor_tokens=400)
    voted = compute_reward(shape, correctness=1.0, finished=True, config=config, executor_tokens=2600)
    assert greedy.token_cost == pytest.approx(-0.008)
    assert voted.token_cost == pytest.approx(-0.052)
    assert greedy.total > voted.total
    assert voted.flat()["reward/token_cost"] == pytest.approx(-0.052)


def test_a_correct_answer_outweighs_the_tokens_it_cost() -> None:
    config = RewardConfig(release=0.0, executor_token_cost=0.02, unfinished_penalty=0.2, flowsteer_v4=NO_STRUCTURE)
    shape = stats_for(["Programmer", "ScEnsemble"])
    cheap_wrong = compute_reward(shape, correctness=0.0, finished=True, config=config, executor_tokens=200)
    dear_right = compute_reward(shape, correctness=1.0, finished=True, config=config, executor_tokens=10_000)
    assert dear_right.total > cheap_wrong.total


def test_a_token_cost_without_an_unfinished_penalty_is_refused() -> None:
    # R would rank an episode that built nothing (0 tokens, C = 0) above a workflow that ran and failed
    with pytest.raises(ValidationError, match="unfinished_penalty"):
        RewardConfig(executor_token_cost=0.02)
    config = RewardConfig(release=0.0, executor_token_cost=0.02, unfinished_penalty=0.2, flowsteer_v4=NO_STRUCTURE)
    nothing = compute_reward({"total_operators": 0, "unique_types": 0}, correctness=0.0, finished=False, config=config)
    ran = compute_reward(stats_for(["Custom"]), correctness=0.0, finished=True, config=config, executor_tokens=3000)
    assert ran.total > nothing.total


def test_tokens_are_not_read_without_a_token_cost() -> None:
    result = compute_reward(stats_for(["Custom"]), correctness=1.0, finished=True, executor_tokens=50_000)
    assert result.token_cost == 0.0
    assert result == compute_reward(stats_for(["Custom"]), correctness=1.0, finished=True)


def test_negative_tokens_and_token_cost_are_rejected() -> None:
    with pytest.raises(ValueError, match="executor_tokens"):
        compute_reward(stats_for(["Custom"]), correctness=1.0, finished=True, executor_tokens=-1)
    with pytest.raises(ValidationError, match="executor_token_cost"):
        RewardConfig(executor_token_cost=-0.01, unfinished_penalty=0.2)


# ---------------------------------------------------------------- breakdown and input validation


def test_breakdown_flat_logs_every_component() -> None:
    stats = stats_for(["Custom", "Verify"], loop=True)
    flat = compute_reward(stats, correctness=0.3, finished=False).flat()
    assert flat["reward/S/checker"] == 0.2
    assert flat["reward/S/structure"] == 0.4
    assert flat["reward/S/format"] == 0.0
    assert flat["reward/S"] == pytest.approx(0.6)
    assert flat["reward/C"] == 0.3
    assert flat["reward/released"] == 0.0
    assert flat["reward/finished"] == 0.0
    assert flat["reward/total"] == pytest.approx(-0.4)


@pytest.mark.parametrize("correctness", [-0.1, 1.5, float("nan"), float("inf")])
def test_correctness_outside_unit_interval_is_rejected(correctness: float) -> None:
    with pytest.raises(ValueError, match="correctness"):
        compute_reward(stats_for(["Custom"]), correctness=correctness, finished=True)


def test_malformed_stats_are_rejected() -> None:
    stats = stats_for(["Custom"])
    del stats["total_operators"]
    with pytest.raises(ValidationError):
        compute_reward(stats, correctness=0.0, finished=True)
    with pytest.raises(ValidationError):
        compute_reward({**stats_for(["Custom"]), "total_operators": -1}, correctness=0.0, finished=True)


def test_graph_stats_model_is_accepted_directly() -> None:
    stats = GraphStats.model_validate(stats_for(["Custom", "Verify", "Format"], parallel=True))
    assert compute_reward(stats, correctness=0.0, finished=True).structure == pytest.approx(0.8)


# ---------------------------------------------------------------- config contract


def test_unknown_config_keys_are_errors() -> None:
    with pytest.raises(ValidationError):
        RewardConfig.model_validate({"relase": 1.0})
    with pytest.raises(ValidationError):
        RewardConfig.model_validate({"milestones": {"paralel": 0.2}})
    with pytest.raises(ValidationError):
        RewardConfig.model_validate({"schedule": "progressive"})


def test_release_above_cap_is_rejected() -> None:
    with pytest.raises(ValidationError, match="never be released"):
        RewardConfig(release=1.5)


def test_milestone_thresholds_accept_yaml_or_json_keys() -> None:
    config = RewardConfig.model_validate({"schedule": "milestones", "milestones": {"unique_types": {"2": 0.5}}})
    result = compute_reward(stats_for(["Custom", "Verify"]), correctness=0.0, finished=True, config=config)
    assert result.terms["unique_types>=2"] == 0.5
    assert "unique_types>=3" not in result.terms


def test_negative_milestone_bonus_is_rejected() -> None:
    with pytest.raises(ValidationError):
        RewardConfig.model_validate({"milestones": {"total_operators": {6: -0.1}}})
