"""The evaluation report: per (director, dataset) aggregates, the JSON file and one Markdown table per dataset.

Which interval: problem types whose scorer grades pass/fail (math accuracy, code pass@1; `ScorerSpec.binary`)
use the Wilson interval; QA is scored by token F1, a fraction, so it uses a Student-t interval on the mean, as
does any graded plug-in type. The choice follows the problem type, not the observed values, so every director
in one table gets the same kind of interval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from flowsteer_mcp.director.graded import ItemResult
from training.evaluate.family_breakdown import family_rows, family_tables
from training.evaluate.paired import PairedComparison, paired_comparisons, pooled_comparisons
from training.evaluate.results import EvalReport
from training.evaluate.stats import METHOD_DESCRIPTIONS, Interval, IntervalMethod, score_interval
from training.scoring.registry import scorers

CONFIDENCE = 0.95
_SCORE_MEANING: dict[str, str] = {
    "math": "accuracy (final answer equivalent to the gold: math-verify or exact numbers)",
    "code": "pass@1 (the final program run on the hidden tests in the sandbox)",
    "qa": "token F1 (SQuAD normalisation, best over gold alternatives)",
}


class CellSummary(BaseModel):
    """One director on one dataset."""

    model_config = ConfigDict(frozen=True)

    director: str
    source: str
    problem_type: str
    n: int
    score_mean: float
    ci: Interval
    correct: int  # strictly correct items (QA: exact match)
    mean_turns: float
    mean_tokens: float
    score_per_1k_tokens: float | None  # score_mean per 1000 mean executor tokens; None when no tokens were used
    mean_policy_tokens: float
    mean_llm_calls: float
    mean_wall_s: float
    failures: int  # episodes with an error or without an answer
    # share of the items whose sampled draws held a correct one (evaluate/oracle.py); None: nothing sampled
    oracle: float | None = None


def interval_method(problem_type: str) -> IntervalMethod:
    """Wilson where the type's scorer grades pass/fail; Student-t otherwise (QA's F1, a plug-in's partial credit,
    or a type whose scorer is not installed here: that interval holds for any scores in [0, 1])."""
    registry = scorers()
    binary = problem_type in registry and registry.get(problem_type).binary
    return "wilson" if binary else "student_t"


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def per_1k_tokens(score_mean: float, mean_tokens: float) -> float | None:
    """Score bought per 1000 executor tokens (the selection rule: a cheaper workflow within a point of the best wins)."""
    return 1000 * score_mean / mean_tokens if mean_tokens > 0 else None


def summarise(director: str, source: str, items: Sequence[ItemResult]) -> CellSummary:
    if not items:
        raise ValueError(f"no items for director {director!r} on {source!r}")
    problem_type = items[0].problem_type
    scores = [item.score for item in items]
    score_mean, mean_tokens = _mean(scores), _mean([item.tokens for item in items])
    return CellSummary(
        director=director,
        source=source,
        problem_type=problem_type,
        n=len(items),
        score_mean=score_mean,
        ci=score_interval(scores, interval_method(problem_type), CONFIDENCE),
        correct=sum(item.correct for item in items),
        mean_turns=_mean([item.turns for item in items]),
        mean_tokens=mean_tokens,
        score_per_1k_tokens=per_1k_tokens(score_mean, mean_tokens),
        mean_policy_tokens=_mean([item.policy_tokens for item in items]),
        mean_llm_calls=_mean([item.llm_calls for item in items]),
        mean_wall_s=_mean([item.wall_s for item in items]),
        failures=sum(item.failed for item in items),
        oracle=oracle_share(items),
    )


def oracle_share(items: Sequence[ItemResult]) -> float | None:
    """Of the items a sampled workflow ran, the share where some draw was right; None when none sampled."""
    known = [item.oracle for item in items if item.oracle is not None]
    return sum(known) / len(known) if known else None


def aggregate(report: EvalReport) -> list[CellSummary]:
    """Cells ordered by dataset (first appearance), then by the configured director order."""
    groups: dict[tuple[str, str], list[ItemResult]] = {}
    for item in report.items:
        groups.setdefault((item.source, item.director), []).append(item)
    sources = list(dict.fromkeys(item.source for item in report.items))
    directors = list(dict.fromkeys([*report.config.directors, *(item.director for item in report.items)]))
    return [
        summarise(director, source, groups[(source, director)])
        for source in sources
        for director in directors
        if (source, director) in groups
    ]


def report_json(report: EvalReport) -> dict[str, Any]:
    """The JSON document: config, timing, aggregates and every item."""
    return {
        "config": report.config.model_dump(mode="json"),
        "started_at": report.started_at,
        "wall_s": report.wall_s,
        "resumed_items": report.resumed_items,
        "aggregates": [cell.model_dump(mode="json") for cell in aggregate(report)],
        "paired": [pair.model_dump(mode="json") for pair in paired_comparisons(report.items, report.config.directors)],
        "pooled": [pair.model_dump(mode="json") for pair in pooled_comparisons(report.items, report.config.directors)],
        "families": [row.model_dump(mode="json") for row in family_rows(report.items, report.config.directors)],
        "items": [item.model_dump(mode="json") for item in report.items],
    }


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def _ci_text(interval: Interval) -> str:
    if interval.low is None or interval.high is None:
        return "n/a"
    return f"[{_percent(interval.low)}, {_percent(interval.high)}]"


def paired_text(pairs: Sequence[PairedComparison]) -> str:
    """One line per comparison: how many shared problems went each way, and how surprising that split is."""
    return "\n".join(
        f"{pair.director} vs {pair.baseline}, paired on the same {pair.n} problems: {pair.better} solved only by "
        f"{pair.director}, {pair.worse} only by {pair.baseline}; exact McNemar p = {pair.p_value:.3f}."
        for pair in pairs
    )


def dataset_table(cells: Sequence[CellSummary]) -> str:
    """The Markdown table of one dataset: directors side by side, with a footer naming metric and interval."""
    if not cells:
        raise ValueError("a dataset table needs at least one cell")
    first = cells[0]
    show_policy = any(cell.mean_policy_tokens for cell in cells)
    show_oracle = any(cell.oracle is not None for cell in cells)
    header = ["director", "score (%)", "95% CI"] + (["oracle (%)"] if show_oracle else [])
    header += ["score (%) per 1k tokens", "mean turns", "mean tokens"]
    header += ["mean policy tokens"] if show_policy else []
    header += ["mean LLM calls", "mean wall s", "failures", "n"]
    lines = [
        f"### {first.source} ({first.problem_type})",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for cell in cells:
        row = [
            cell.director,
            _percent(cell.score_mean),
            _ci_text(cell.ci),
            *([_percent(cell.oracle)] if show_oracle else []),
            _percent(cell.score_per_1k_tokens),
            f"{cell.mean_turns:.1f}",
            f"{cell.mean_tokens:.0f}",
        ]
        row += [f"{cell.mean_policy_tokens:.0f}"] if show_policy else []
        row += [f"{cell.mean_llm_calls:.1f}", f"{cell.mean_wall_s:.1f}", str(cell.failures), str(cell.n)]
        lines.append("| " + " | ".join(row) + " |")
    meaning = _SCORE_MEANING.get(first.problem_type, "mean score")
    lines += [
        "",
        f"Score: {meaning}. 95% CI: {METHOD_DESCRIPTIONS[first.ci.method]}. Per 1k tokens: the score divided by "
        "the mean executor tokens per episode, times 1000. Tokens: executor tokens per episode"
        + ("; policy tokens are the director model's." if show_policy else ".")
        + " Failures: episodes with an error or no answer (scored 0)."
        + (
            " Oracle: problems where some draw of the workflow's sampled node was correct (pass@k of its own "
            "draws, the ceiling of its selection); n/a where it samples nothing."
            if show_oracle
            else ""
        ),
    ]
    return "\n".join(lines)


def markdown_report(report: EvalReport) -> str:
    cells = aggregate(report)
    by_source: dict[str, list[CellSummary]] = {}
    for cell in cells:
        by_source.setdefault(cell.source, []).append(cell)
    config = report.config
    heading = [
        "## FlowSteer evaluation",
        "",
        f"Directors: {', '.join(config.directors)}; episodes: {len(report.items)}; concurrency: "
        f"{config.concurrency}; seed: {config.seed if config.seed is not None else 'none'}; "
        f"executor: {config.executor or 'n/a'}; started {report.started_at}, took {report.wall_s:.1f} s"
        + (f" (plus {report.resumed_items} episodes graded before a resume)." if report.resumed_items else "."),
    ]
    if len(config.mcp_urls) > 1:
        servers = ", ".join(config.mcp_urls)
        heading.append(
            f"Canvas: the MCP servers at {servers}, sharing the episodes (their executors run the workflows)."
        )
    elif config.mcp_url:
        heading.append(f"Canvas: the MCP server at {config.mcp_url} (its own executor runs the workflows).")
    if len(config.executor_urls) > 1:
        heading.append(f"Executor replicas: {', '.join(config.executor_urls)}.")
    if len(config.policy_urls) > 1:
        heading.append(f"Policy replicas: {', '.join(config.policy_urls)}.")
    if config.replay:
        heading.append(f"Replayed offline from {config.replay}.")
    if not cells:
        return "\n".join([*heading, "", "No episodes were run."]) + "\n"
    pairs: dict[str, list[PairedComparison]] = {}
    for pair in paired_comparisons(report.items, config.directors):
        pairs.setdefault(pair.source, []).append(pair)
    sections = [
        dataset_table(group) + (f"\n\n{paired_text(pairs[source])}" if source in pairs else "")
        for source, group in by_source.items()
    ]
    pooled = pooled_comparisons(report.items, config.directors)
    if pooled:
        sections.append(
            "### Pooled by task type\n\n" + "\n".join(f"{pair.source}: {paired_text([pair])}" for pair in pooled)
        )
    families = family_tables(family_rows(report.items, config.directors))
    if families:
        sections.append(families)
    return "\n\n".join(["\n".join(heading), *sections]) + "\n"


def write_report(report: EvalReport, folder: str | Path) -> tuple[Path, Path]:
    """Write `report.json` and `report.md` into `folder` (created if needed); returns both paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    json_path, markdown_path = out / "report.json", out / "report.md"
    json_path.write_text(json.dumps(report_json(report), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    markdown_path.write_text(markdown_report(report), encoding="utf-8")
    return json_path, markdown_path
