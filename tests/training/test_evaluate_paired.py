"""Paired director comparison: the exact McNemar p-value and which problems count."""

from __future__ import annotations

import pytest

from flowsteer_mcp.director.graded import ItemResult
from training.evaluate.paired import mcnemar_exact, paired_comparisons, pooled_comparisons


@pytest.mark.parametrize(
    ("better", "worse", "expected"),
    [
        (0, 0, 1.0),
        (0, 5, 2 / 32),  # all five discordant problems one way
        (5, 0, 2 / 32),
        (5, 4, 1.0),  # the most balanced split of nine
        (1, 9, 2 * 11 / 1024),
        (3, 3, 1.0),
    ],
)
def test_mcnemar_exact_matches_the_binomial_tail(better: int, worse: int, expected: float) -> None:
    assert mcnemar_exact(better, worse) == pytest.approx(expected)


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        mcnemar_exact(-1, 2)


def item(director: str, source: str, pid: str, correct: bool) -> ItemResult:
    return ItemResult(
        director=director, problem_id=pid, source=source, problem_type="math", correct=correct, score=float(correct)
    )


def test_only_problems_both_directors_ran_are_paired() -> None:
    items = [
        item("direct", "gsm8k", "a", True),
        item("template", "gsm8k", "a", False),
        item("direct", "gsm8k", "b", True),
        item("template", "gsm8k", "b", True),
        item("direct", "gsm8k", "c", False),
        item("template", "gsm8k", "c", True),
        item("direct", "gsm8k", "d", True),  # template never ran d
        item("template", "mbpp", "x", True),  # direct never ran mbpp: nothing to pair there
    ]
    (pair,) = paired_comparisons(items, ["direct", "template"])
    assert (pair.source, pair.director, pair.baseline) == ("gsm8k", "template", "direct")
    assert (pair.n, pair.better, pair.worse) == (3, 1, 1)
    assert pair.p_value == 1.0


def code_item(director: str, source: str, pid: str, correct: bool) -> ItemResult:
    return item(director, source, pid, correct).model_copy(update={"problem_type": "code"})


def test_pooled_comparison_pairs_all_datasets_of_a_task_type() -> None:
    """Six wins out of six are significant pooled (p = 0.031) though neither dataset's three are (p = 0.25)."""
    items = [
        code_item(director, source, f"{source}/{n}", director == "template")
        for source in ("humaneval", "mbpp")
        for n in range(3)
        for director in ("direct", "template")
    ] + [item("direct", "gsm8k", "g", True), item("template", "gsm8k", "g", False)]
    per_source = {pair.source: pair for pair in paired_comparisons(items, ["direct", "template"])}
    assert per_source["humaneval"].p_value == pytest.approx(0.25)
    (pooled,) = pooled_comparisons(items, ["direct", "template"])  # gsm8k is one dataset: nothing to pool
    assert pooled.source == "code pooled (humaneval + mbpp)"
    assert (pooled.n, pooled.better, pooled.worse) == (6, 6, 0)
    assert pooled.p_value == pytest.approx(2 / 64)
