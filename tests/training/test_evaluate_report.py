"""Report aggregates, the JSON document and the Markdown tables, on hand-built items with known numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.evaluate import EvalConfig, EvalReport, ItemResult, aggregate, markdown_report, write_report
from training.evaluate.report import dataset_table
from training.evaluate.stats import t_interval, wilson_interval


def item(director: str, source: str, problem_type: str, index: int, score: float, **extra: object) -> ItemResult:
    fields: dict[str, object] = {
        "director": director,
        "problem_id": f"{source}/{index}",
        "source": source,
        "problem_type": problem_type,
        "answer": "x",
        "score": score,
        "correct": score == 1.0,
        "turns": 4,
        "llm_calls": 6,
        "tokens": 300,
        "wall_s": 2.0,
    }
    fields.update(extra)
    return ItemResult.model_validate(fields)


@pytest.fixture
def report() -> EvalReport:
    items = [
        # gsm8k: direct 3/4 (one of them a failure with no answer), template 4/4
        item("direct", "gsm8k", "math", 0, 1.0, turns=1, llm_calls=1, tokens=100),
        item("direct", "gsm8k", "math", 1, 1.0, turns=1, llm_calls=1, tokens=200),
        item("direct", "gsm8k", "math", 2, 1.0, turns=1, llm_calls=1, tokens=300),
        item("direct", "gsm8k", "math", 3, 0.0, turns=1, llm_calls=1, tokens=400, answer=None),
        *(item("template", "gsm8k", "math", i, 1.0) for i in range(4)),
        # squad: fractional F1 scores, one episode error
        item("template", "squad_v2", "qa", 0, 0.5),
        item("template", "squad_v2", "qa", 1, 1.0),
        item("template", "squad_v2", "qa", 2, 0.0, error="TimeoutError: too slow"),
    ]
    return EvalReport(
        config=EvalConfig(directors=["template", "direct"], concurrency=2, seed=7, executor="ScriptedBackend:s"),
        started_at="2026-12-02T12:00:00+00:00",
        wall_s=12.5,
        items=items,
    )


def test_aggregates_per_director_and_dataset(report: EvalReport) -> None:
    cells = {(c.source, c.director): c for c in aggregate(report)}
    # dataset order of appearance, then configured director order
    assert list(cells) == [("gsm8k", "template"), ("gsm8k", "direct"), ("squad_v2", "template")]
    direct = cells[("gsm8k", "direct")]
    assert (direct.n, direct.score_mean, direct.failures, direct.correct) == (4, 0.75, 1, 3)
    assert (direct.mean_tokens, direct.mean_turns, direct.mean_llm_calls) == (250.0, 1.0, 1.0)
    assert direct.ci == wilson_interval(3, 4)
    squad = cells[("squad_v2", "template")]
    assert squad.score_mean == pytest.approx(0.5)
    assert squad.ci == t_interval([0.5, 1.0, 0.0])
    assert squad.failures == 1


def test_markdown_table_compares_directors_side_by_side(report: EvalReport) -> None:
    cells = [c for c in aggregate(report) if c.source == "gsm8k"]
    table = dataset_table(cells).splitlines()
    wilson = wilson_interval(3, 4)
    assert table[0] == "### gsm8k (math)"
    assert table[2] == (
        "| director | score (%) | 95% CI | score (%) per 1k tokens | mean turns | mean tokens | mean LLM calls "
        "| mean wall s | failures | n |"
    )
    # per 1k tokens, by hand: template 100% / 0.300k tokens = 333.3; direct 75% / 0.250k tokens = 300.0
    assert table[4] == "| template | 100.0 | [51.0, 100.0] | 333.3 | 4.0 | 300 | 6.0 | 2.0 | 0 | 4 |"
    assert table[5] == (
        f"| direct | 75.0 | [{100 * (wilson.low or 0):.1f}, {100 * (wilson.high or 0):.1f}] | 300.0 | 1.0 | 250 "
        "| 1.0 | 2.0 | 1 | 4 |"
    )
    assert "Per 1k tokens: the score divided by the mean executor tokens" in table[-1]
    assert "Wilson score interval" in table[-1] and "accuracy" in table[-1]


def test_score_per_1k_executor_tokens_is_in_the_aggregates_and_json(report: EvalReport, tmp_path: Path) -> None:
    cells = {(c.source, c.director): c for c in aggregate(report)}
    assert cells[("gsm8k", "direct")].score_per_1k_tokens == pytest.approx(3.0)  # 0.75 / 250 tokens * 1000
    assert cells[("gsm8k", "template")].score_per_1k_tokens == pytest.approx(1 / 0.3)  # 1.0 / 300 tokens * 1000
    assert cells[("squad_v2", "template")].score_per_1k_tokens == pytest.approx(0.5 / 0.3)  # mean F1 0.5
    json_path, _ = write_report(report, tmp_path)
    aggregates = json.loads(json_path.read_text(encoding="utf-8"))["aggregates"]
    assert aggregates[1]["director"] == "direct" and aggregates[1]["score_per_1k_tokens"] == pytest.approx(3.0)


def test_score_per_1k_tokens_is_undefined_without_executor_tokens() -> None:
    free = EvalReport(
        config=EvalConfig(directors=["direct"], concurrency=1),
        started_at="t",
        wall_s=0.0,
        items=[item("direct", "gsm8k", "math", 0, 1.0, tokens=0)],
    )
    (cell,) = aggregate(free)
    assert cell.score_per_1k_tokens is None
    assert "| direct | 100.0 | [20.7, 100.0] | n/a |" in markdown_report(free)


def test_qa_table_names_the_t_interval(report: EvalReport) -> None:
    cells = [c for c in aggregate(report) if c.source == "squad_v2"]
    footer = dataset_table(cells).splitlines()[-1]
    assert "Student-t interval" in footer and "token F1" in footer


def test_policy_token_column_appears_only_when_used(report: EvalReport) -> None:
    assert "policy tokens" not in markdown_report(report)
    with_policy = report.model_copy(
        update={"items": [*report.items, item("policy", "gsm8k", "math", 0, 1.0, policy_tokens=900)]}
    )
    text = markdown_report(with_policy)
    assert "| mean policy tokens |" in text
    assert "| policy | 100.0 |" in text and "| 900 |" in text


def test_markdown_report_has_a_table_per_dataset(report: EvalReport) -> None:
    text = markdown_report(report)
    assert text.count("### ") == 2
    assert "seed: 7" in text and "ScriptedBackend:s" in text


def test_write_report_round_trips_json(report: EvalReport, tmp_path: Path) -> None:
    json_path, markdown_path = write_report(report, tmp_path / "out")
    document = json.loads(json_path.read_text(encoding="utf-8"))
    assert set(document) == {
        "config",
        "started_at",
        "wall_s",
        "aggregates",
        "items",
        "paired",
        "pooled",
        "families",
        "resumed_items",
    }
    assert len(document["items"]) == len(report.items)
    assert document["items"][3]["answer"] is None
    assert document["aggregates"][1]["director"] == "direct" and document["aggregates"][1]["failures"] == 1
    assert EvalReport.model_validate({k: document[k] for k in ("config", "started_at", "wall_s", "items")}) == report
    assert markdown_path.read_text(encoding="utf-8") == markdown_report(report)


def test_empty_report_says_so() -> None:
    empty = EvalReport(config=EvalConfig(directors=["direct"], concurrency=1), started_at="t", wall_s=0.0, items=[])
    assert "No episodes were run." in markdown_report(empty)


def test_markdown_report_pools_the_datasets_of_one_task_type() -> None:
    items = [
        item(director, source, "code", i, 1.0 if director == "template" else 0.0)
        for source in ("humaneval", "mbpp")
        for i in range(3)
        for director in ("direct", "template")
    ]
    text = markdown_report(_report_of(items))
    assert (
        "### Pooled by task type\n\ncode pooled (humaneval + mbpp): template vs direct, paired on the same 6 "
        "problems: 6 solved only by template, 0 only by direct; exact McNemar p = 0.031." in text
    )
    assert "Pooled" not in markdown_report(_report_of(items[:6]))  # one dataset: nothing to pool


def _report_of(items: list[ItemResult]) -> EvalReport:
    config = EvalConfig(directors=["direct", "template"], concurrency=1)
    return EvalReport(config=config, started_at="t", wall_s=1.0, items=items)
