"""The oracle of a sampled workflow: some draw of its first sampled node was right (its selection's ceiling)."""

from __future__ import annotations

from typing import Any

from tests.training.test_evaluate_report import item
from training.data import Problem
from training.evaluate import EvalConfig, EvalReport, aggregate
from training.evaluate.oracle import oracle_correct, sampled_draws
from training.evaluate.report import dataset_table
from training.scoring import ScoreResult

PROBLEM = Problem(id="gsm8k/1", source="gsm8k", problem_type="math", problem="What is 6 * 7?", ground_truth="42")


def row(node_id: str, output: str, *, ok: bool = True, **extra: Any) -> dict[str, Any]:
    return {"node_id": node_id, "operator": "Custom", "ok": ok, "output": output, **extra}


async def exact(problem: Problem, answer: str | None) -> ScoreResult:
    correct = (answer or "").strip() == problem.ground_truth
    return ScoreResult(score=float(correct), correct=correct, method="exact", extracted=(answer or "").strip())


def test_the_draws_are_the_successful_outputs_of_the_first_node_called_more_than_once() -> None:
    trace = [row("node_1", "41"), row("node_1", "", ok=False), row("node_1", "42"), row("node_2", "41")]
    assert sampled_draws(trace) == ["41", "42"]
    assert sampled_draws([row("node_1", "41"), row("node_2", "41")]) == [], "nothing sampled"
    looped = [row("node_1", "1", iteration=1), row("node_1", "2", iteration=2)]
    assert sampled_draws(looped) == [], "a loop's iterations are not draws"
    stopped = [row("node_1", "42", note="sampled draw: greedy; until tests after 1 of 8 draws: ..."), row("node_2", "")]
    assert sampled_draws(stopped) == ["42"], "a stopping rule's single draw is still the node's draws"


async def test_the_oracle_is_true_when_some_draw_is_right_and_none_without_draws() -> None:
    assert await oracle_correct(exact, PROBLEM, [row("node_1", "41"), row("node_1", "42"), row("node_2", "41")])
    assert await oracle_correct(exact, PROBLEM, [row("node_1", "41"), row("node_1", "40")]) is False
    assert await oracle_correct(exact, PROBLEM, [row("node_1", "42")]) is None


def test_the_report_shows_the_oracle_share_beside_the_score() -> None:
    items = [
        item("direct", "gsm8k", "math", 0, 1.0),
        item("direct", "gsm8k", "math", 1, 0.0),
        item("template:direct-sc8", "gsm8k", "math", 0, 1.0, oracle=True),
        item("template:direct-sc8", "gsm8k", "math", 1, 0.0, oracle=True),
    ]
    report = EvalReport(
        config=EvalConfig(directors=["direct", "template:direct-sc8"], concurrency=1),
        started_at="2026-12-06T00:00:00+00:00",
        wall_s=1.0,
        items=items,
    )
    cells = aggregate(report)
    assert [cell.oracle for cell in cells] == [None, 1.0]
    table = dataset_table(cells)
    assert "| director | score (%) | 95% CI | oracle (%) |" in table
    assert "| template:direct-sc8 | 50.0 |" in table and "| 100.0 |" in table
