"""The evaluation harness behind `flowsteer eval` (docs/design/evaluation.md, "flowsteer eval").

    report = await evaluate(problems, directors, make_client=..., concurrency=8)
    write_report(report, "out/")        # report.json + report.md (one table per dataset)

Modules: `runner` (concurrent graded episodes), `results` (item and report models), `report` (aggregates,
JSON, Markdown), `stats` (Wilson and Student-t intervals), `paired` (exact McNemar on shared problems),
`journal` (the resumable item log), `recording` / `policy_recording` (record and replay), `directors`
(directors by name), `tasks` (Problem -> TaskSpec without hidden material).
"""

from flowsteer_mcp.director.graded import ItemResult
from training.evaluate.report import aggregate, markdown_report, report_json, write_report
from training.evaluate.results import EvalConfig, EvalReport
from training.evaluate.runner import evaluate, run_episode
from training.evaluate.tasks import task_for

__all__ = [
    "EvalConfig",
    "EvalReport",
    "ItemResult",
    "aggregate",
    "evaluate",
    "markdown_report",
    "report_json",
    "run_episode",
    "task_for",
    "write_report",
]
