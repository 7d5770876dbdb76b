"""Workflow families: every library workflow lands where a reader expects, and the per-step family metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.stats import graph_stats
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.director.library import LIBRARY
from operators.registry import default_registry
from training.train.families import FAMILY_NAMES, families_of, family_metrics, operator_push
from training.train.plots import plot_metrics

EXEC_VOTE = {"sampling", "vote", "execution_selection"}
SAMPLED_VOTE = {"sampling", "vote"}
POT_VOTE = {"sampling", "vote", "program_of_thought"}
RULES = CanvasRules(default_registry(), CanvasOptions())

EXPECTED: dict[tuple[str, str], set[str]] = {
    ("code", "classic"): {"execution_selection", "revision", "structured", "instructed"},
    ("code", "greedy"): {"single_call", "instructed"},
    ("code", "direct1"): {"single_call"},
    ("code", "sample4-exec"): EXEC_VOTE | {"instructed"},
    ("code", "sample8-exec"): EXEC_VOTE | {"instructed"},
    ("code", "direct4-exec"): EXEC_VOTE,
    ("code", "direct8-exec"): EXEC_VOTE,
    ("code", "direct8-tests"): EXEC_VOTE,
    ("code", "direct8-passes"): EXEC_VOTE,
    ("code", "direct8-redraw"): EXEC_VOTE,
    ("code", "direct7-passes"): EXEC_VOTE,
    ("code", "direct4-passes"): EXEC_VOTE,
    ("code", "aflow-humaneval"): {"execution_selection", "structured", "instructed"},
    ("code", "aflow-mbpp"): EXEC_VOTE | {"structured", "instructed"},
    ("code", "codet8"): {"sampling", "execution_selection"},
    ("code", "exec-repair"): EXEC_VOTE | {"revision", "structured", "instructed"},
    ("code", "plan-sample-exec"): EXEC_VOTE | {"instructed"},
    ("code", "custom+programmer-exec"): EXEC_VOTE | {"structured", "instructed"},
    ("math", "classic"): {"vote", "program_of_thought", "revision", "structured", "long", "instructed"},
    ("math", "greedy-cot"): {"single_call", "instructed"},
    ("math", "direct1"): {"single_call"},
    ("math", "pot"): {"single_call", "program_of_thought", "instructed"},
    ("math", "pot4-vote"): POT_VOTE | {"instructed"},
    ("math", "cot4-vote"): SAMPLED_VOTE | {"instructed"},
    ("math", "pot2+cot2-vote"): POT_VOTE | {"structured", "instructed"},
    ("math", "direct-sc4"): SAMPLED_VOTE,
    ("math", "direct-sc8"): SAMPLED_VOTE,
    ("math", "direct-sc8-vote"): SAMPLED_VOTE,
    ("math", "aflow-gsm8k"): POT_VOTE | {"instructed"},
    ("math", "direct-sc4+pot4"): POT_VOTE | {"structured", "instructed"},
    ("math", "pot4-vote-format"): POT_VOTE | {"instructed"},
    ("qa", "classic"): {"revision", "structured", "instructed"},
    ("qa", "greedy"): {"single_call", "instructed"},
    ("qa", "vote5"): SAMPLED_VOTE | {"instructed"},
    ("qa", "custom-vote"): SAMPLED_VOTE | {"instructed"},
    ("qa", "direct-sc5"): SAMPLED_VOTE,
    ("qa", "direct-sc5-vote"): SAMPLED_VOTE,
    ("qa", "greedy-format"): {"instructed"},  # otherwise a plain two-step chain belongs to no named family
    ("qa", "vote5-format"): SAMPLED_VOTE | {"instructed"},
    ("qa", "mixed-vote"): SAMPLED_VOTE | {"structured", "instructed"},
    ("general", "classic"): {"revision", "structured", "long", "instructed"},
}


def test_every_library_workflow_has_an_expectation() -> None:
    listed = {(task_type, name) for task_type, entries in LIBRARY.items() for name in entries}
    assert listed == set(EXPECTED)


@pytest.mark.parametrize(("task_type", "name"), sorted(EXPECTED))
def test_library_workflow_lands_in_the_expected_families(task_type: str, name: str) -> None:
    workflow = LIBRARY[task_type][name]
    stats = graph_stats(workflow.graph(), default_registry()).model_dump(mode="json")
    assert families_of(stats, task_type) == frozenset(EXPECTED[(task_type, name)])


def test_a_failed_trajectory_without_stats_is_an_empty_workflow() -> None:
    assert families_of({}, "code") == {"no_workflow"}
    assert families_of({"total_operators": 0, "unique_types": 0}, "math") == {"no_workflow"}


def test_stats_from_before_sampling_was_counted_read_as_single_draws() -> None:
    old = {"total_operators": 2, "operators": ["Programmer", "ScEnsemble"], "structures": []}
    assert families_of(old, "code") == {"vote"}


def test_program_of_thought_and_execution_selection_depend_on_the_problem_type() -> None:
    stats = {"total_operators": 2, "operators": ["Programmer", "ScEnsemble"], "max_samples": 4, "structures": []}
    assert "execution_selection" in families_of(stats, "code")
    assert "program_of_thought" not in families_of(stats, "code")
    assert "program_of_thought" in families_of(stats, "math")
    assert "execution_selection" not in families_of(stats, "math")


def test_family_metrics_give_shares_and_member_rewards() -> None:
    metrics = family_metrics([{"vote", "sampling"}, {"single_call"}, {"vote"}, set()], [1.0, 0.0, 0.5, -1.0])
    assert metrics["family/vote"] == 0.5
    assert metrics["family_reward/vote"] == 0.75
    assert metrics["family/single_call"] == 0.25
    assert metrics["family_reward/single_call"] == 0.0
    assert metrics["family/revision"] == 0.0
    assert "family_reward/revision" not in metrics
    assert [key.removeprefix("family/") for key in metrics if key.startswith("family/")] == list(FAMILY_NAMES)


def test_family_metrics_refuse_mismatched_lengths_and_skip_empty_steps() -> None:
    with pytest.raises(ValueError, match="membership sets"):
        family_metrics([{"vote"}], [])
    assert family_metrics([], []) == {}


async def test_rollouts_carry_the_final_graph_stats_and_problem_type_for_the_families() -> None:
    from tests.support.openai_stub import OpenAIStub
    from tests.training.test_rollout_worker import ScriptedVllmPolicy, collect, problem

    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        batch = await collect(stub, [problem("p0")], group_size=2)
    first, second = batch.episodes  # even seed: Custom; odd seed: Custom -> Format
    assert first.problem_type == second.problem_type == "math"
    assert first.stats["operators"] == ["Custom"] and first.stats["max_samples"] == 1
    # the scripted policy answers the prompt turn, so its Custom is instructed
    assert families_of(first.stats, first.problem_type) == {"single_call", "instructed"}
    assert second.stats["operators"] == ["Custom", "Format"]


def test_family_shares_get_their_own_plot(tmp_path: Path) -> None:
    rows = [
        {"step": s, "reward/total": 0.1 * s, "family/vote": s / 4, "family/single_call": 1 - s / 4} for s in range(4)
    ]
    paths = plot_metrics(rows, tmp_path)
    assert [p.name for p in paths] == ["rewards.png", "summary.png", "families.png"]
    assert (tmp_path / "families.png").read_bytes().startswith(b"\x89PNG")
    plot_metrics([{"step": 1, "reward/total": 0.0}], tmp_path)
    assert not (tmp_path / "families.png").exists()  # a stale copy goes when the run has no family shares


def test_a_padded_workflow_is_long() -> None:
    padded = ["Programmer", "ScEnsemble", "ScEnsemble", "ScEnsemble", "Format"]
    stats = {"total_operators": 5, "operators": padded, "max_samples": 8, "structures": []}
    assert "long" in families_of(stats, "code")
    assert "long" not in families_of({**stats, "total_operators": 4, "operators": padded[:4]}, "code")


def test_operator_push_is_the_mean_advantage_weighted_operator_count_of_kept_trajectories() -> None:
    # group g: 2 operators won (+0.5), 1 lost (-0.5) -> 2*0.5 + 1*(-0.5) = 0.5; the dropped group counts nothing
    rows = [
        {"operators": ["Custom", "ScEnsemble"], "advantage": 0.5, "kept": True},
        {"operators": ["Custom"], "advantage": -0.5, "kept": True},
        {"operators": ["Custom", "Format", "Format"], "advantage": 0.0, "kept": False},
    ]
    assert operator_push(rows) == pytest.approx(0.25)
    assert operator_push([{**rows[0], "advantage": -0.5}, {**rows[1], "advantage": 0.5}]) == pytest.approx(-0.25)
    assert operator_push([rows[2]]) is None and operator_push([]) is None


def test_a_solver_with_a_written_instruction_is_instructed_and_the_direct_call_is_not() -> None:
    graph = import_dsl("Custom{4} -> ScEnsemble", RULES)
    direct = graph_stats(graph, default_registry()).model_dump(mode="json")
    assert direct["prompted_solvers"] == 0
    assert "instructed" not in families_of(direct, "math")
    solver = next(graph.iter_operator_nodes())
    selector = list(graph.iter_operator_nodes())[1]
    selector.prompt = "Choose the answer most candidates agree on."  # a selector's prompt does not count
    assert "instructed" not in families_of(graph_stats(graph, default_registry()).model_dump(mode="json"), "math")
    solver.prompt = "Reason step by step and state the final number."
    stats = graph_stats(graph, default_registry()).model_dump(mode="json")
    assert stats["prompted_solvers"] == 1
    assert "instructed" in families_of(stats, "math")
    solver.prompt = "   "  # blank is no instruction: the operator still makes the direct call
    assert graph_stats(graph, default_registry()).prompted_solvers == 0
