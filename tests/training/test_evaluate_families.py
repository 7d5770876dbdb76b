"""The report's workflow-family breakdown: which kinds of workflow a canvas director built, against `direct`."""

from __future__ import annotations

from typing import Any

from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.stats import graph_stats
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.director.graded import ItemResult
from operators.registry import default_registry
from training.evaluate.family_breakdown import family_rows, family_tables
from training.evaluate.paired import paired_comparisons

RULES = CanvasRules(default_registry(), CanvasOptions())


def stats(dsl: str, *, instructed: bool = False) -> dict[str, Any]:
    graph = import_dsl(dsl, RULES)
    if instructed:
        next(graph.iter_operator_nodes()).prompt = "Answer with the number only."
    return graph_stats(graph, default_registry()).model_dump(mode="json")


def item(director: str, pid: str, correct: bool, graph: dict[str, Any] | None = None) -> ItemResult:
    return ItemResult(
        director=director,
        problem_id=pid,
        source="gsm8k",
        problem_type="math",
        correct=correct,
        score=float(correct),
        stats=graph or {},
    )


def test_families_split_the_directors_episodes_and_count_the_baseline_on_the_same_problems() -> None:
    items = [
        item("direct", "p1", True),
        item("direct", "p2", True),
        item("direct", "p3", False),
        item("policy", "p1", False, stats("Custom{4} -> ScEnsemble", instructed=True)),
        item("policy", "p2", True, stats("Custom{4} -> ScEnsemble")),
        item("policy", "p3", True, stats("Custom")),
    ]
    rows = {row.family: row for row in family_rows(items, ["direct", "policy"])}
    assert {(row.director, row.baseline) for row in rows.values()} == {("policy", "direct")}
    assert (rows["vote"].episodes, rows["vote"].solved, rows["vote"].baseline_solved) == (2, 1, 2)
    assert (rows["instructed"].episodes, rows["instructed"].solved, rows["instructed"].baseline_solved) == (1, 0, 1)
    assert (rows["single_call"].episodes, rows["single_call"].solved, rows["single_call"].baseline_solved) == (1, 1, 0)
    assert "program_of_thought" not in rows  # families without members get no row
    table = family_tables(family_rows(items, ["direct", "policy"]))
    assert "#### policy on gsm8k" in table and "| instructed | 1 | 0 | 1 |" in table
    assert "direct solved, same problems" in table


def test_the_baseline_is_the_runs_first_director_as_in_the_paired_comparisons() -> None:
    items = [
        item("template:direct-sc8", "p1", True, stats("Custom{8} -> ScEnsemble")),
        item("policy", "p1", False, stats("Custom")),
    ]
    rows = family_rows(items, ["direct", "template:direct-sc8", "policy"])  # direct did not run
    assert {(row.director, row.baseline, row.baseline_solved) for row in rows} == {("policy", "template:direct-sc8", 1)}
    assert "template:direct-sc8 solved, same problems" in family_tables(rows)


def test_the_baseline_is_chosen_per_dataset_like_the_paired_comparisons() -> None:
    """A director that ran on one dataset only is no baseline on the others, in either section of the report."""
    items = [
        item("direct", "p1", True),
        item("template:direct-sc8", "p1", False, stats("Custom{8} -> ScEnsemble")),
        item("policy", "p1", True, stats("Custom")),
        item("template:direct-sc8", "q1", True, stats("Custom{8} -> ScEnsemble")).model_copy(
            update={"source": "svamp"}
        ),
        item("policy", "q1", False, stats("Custom")).model_copy(update={"source": "svamp"}),
    ]
    directors = ["direct", "template:direct-sc8", "policy"]
    baselines = {(row.director, row.source): row.baseline for row in family_rows(items, directors)}
    paired = {(pair.director, pair.source): pair.baseline for pair in paired_comparisons(items, directors)}
    assert baselines[("policy", "gsm8k")] == "direct"
    assert baselines[("policy", "svamp")] == "template:direct-sc8"
    assert ("template:direct-sc8", "svamp") not in baselines  # the baseline gets no rows of its own
    assert {key: name for key, name in paired.items() if key in baselines} == baselines


def test_without_direct_or_without_stats_the_breakdown_says_so() -> None:
    rows = family_rows([item("direct", "p2", True), item("policy", "p1", True, stats("Custom"))], ["direct", "policy"])
    assert rows[0].baseline_solved is None and "| n/a |" in family_tables(rows)
    assert family_rows([item("direct", "p1", True)], ["direct"]) == [] and family_tables([]) == ""
