"""scripts/pareto_report.py: the Pareto front, the one-point winner rule, McNemar against the baseline, the
refusal of failed runs, a byte-identical SVG, several reports merged (and refused when they overlap or differ
in executor or engine), aliases, the pooled scope's partial directors, and the wall column under shared calls.
Reports are written by the harness's own models and writer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowsteer_mcp.director.graded import ItemResult
from tests.support.scripts import load_module
from training.evaluate.report import report_json
from training.evaluate.results import EvalConfig, EvalReport

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "pareto_report.py"


pareto = load_module(SCRIPT, "pareto_report")


def episode(
    director: str,
    problem: int,
    correct: bool,
    tokens: int,
    source: str = "mbpp",
    oracle: bool | None = None,
    **extra: object,
) -> ItemResult:
    return ItemResult.model_validate(
        {
            "director": director,
            "problem_id": f"{source}/{problem}",
            "source": source,
            "problem_type": "code",
            "answer": "def f(): pass",
            "score": float(correct),
            "correct": correct,
            "oracle": oracle,
            "finished": True,
            "tokens": tokens,
            "llm_calls": 2,
            "wall_s": 1.5,
            **extra,
        }
    )


def director_items(director: str, solved: int, tokens: int, n: int = 100, source: str = "mbpp") -> list[ItemResult]:
    """`solved` of `n` problems right (the first ones), each episode spending `tokens`."""
    return [episode(director, i, i < solved, tokens, source) for i in range(n)]


def write_report(path: Path, items: list[ItemResult], **config: Any) -> Path:
    directors = list(dict.fromkeys(item.director for item in items))
    path.parent.mkdir(parents=True, exist_ok=True)
    report = EvalReport(
        config=EvalConfig(directors=directors, concurrency=1, **config),
        started_at="2025-01-01T00:00:00Z",
        wall_s=1.0,
        items=items,
    )
    path.write_text(json.dumps(report_json(report)), encoding="utf-8")
    return path


# the constructed trade-off: "close" is one point below "best" for about half the tokens, "two-points" is cheaper
# still but two points off, and "dominated" is beaten by "best" on both axes
TRADE_OFF = [
    ("direct", 40, 100),
    ("two-points", 58, 300),
    ("close", 59, 500),
    ("best", 60, 900),
    ("dominated", 50, 1000),
]


def trade_off_summary() -> Any:
    items = [item for name, solved, tokens in TRADE_OFF for item in director_items(name, solved, tokens)]
    (scope,) = pareto.scopes(items)
    return pareto.summarise(scope, [name for name, _, _ in TRADE_OFF], "best", "direct")


def test_front_holds_the_undominated_and_the_winner_is_the_cheapest_within_one_point() -> None:
    summary = trade_off_summary()
    assert summary.front == {"direct", "two-points", "close", "best"}
    assert summary.winner == "close"  # exactly one point below the best counts; two points does not
    ratios = {row.director: row.token_ratio for row in summary.rows}
    assert ratios["direct"] == 1.0 and ratios["best"] == 9.0


def test_equal_directors_share_the_front_and_the_tie_goes_to_the_more_accurate() -> None:
    items = director_items("a", 5, 100, n=10) + director_items("b", 5, 100, n=10) + director_items("c", 6, 100, n=10)
    rows = pareto.scope_rows(pareto.Scope("mbpp", items), ["a", "b", "c"], "a", "a")
    assert pareto.pareto_front(rows) == {"c"}
    assert pareto.pareto_front(rows[:2]) == {"a", "b"}
    assert pareto.pareto_winner(rows, within=pareto.WITHIN_POINTS * 20) == "c"  # same tokens: the more accurate


def test_mcnemar_against_the_baseline_matches_the_hand_computed_split(tmp_path: Path) -> None:
    # 10 problems: both right on 0-1, only the director on 2-7, only the baseline on 8, neither on 9
    baseline = [episode("base", i, i in (0, 1, 8), 100) for i in range(10)]
    director = [episode("new", i, i < 8, 200) for i in range(10)]
    rows = pareto.scope_rows(pareto.Scope("mbpp", baseline + director), ["base", "new"], "base", "base")
    pair = rows[1].pair
    assert (pair.n, pair.better, pair.worse) == (10, 6, 1)
    assert pair.p_value == pytest.approx(0.125)  # 2 * (C(7,0) + C(7,1)) / 2**7
    assert rows[0].pair is None

    report = write_report(tmp_path / "report.json", baseline + director)
    pareto.main(["--report", str(report), "--baseline", "base", "--reference", "base", "--out", str(tmp_path / "out")])
    table = (tmp_path / "out" / "pareto.md").read_text(encoding="utf-8")
    assert "| new | 80.0 (8/10) |" in table and "| 6 / 1 (n=10) | 0.125 |" in table


def test_pooled_scope_micro_averages_items_and_pairs_across_datasets(tmp_path: Path) -> None:
    items = director_items("direct", 2, 100, n=4, source="humaneval") + director_items("direct", 1, 300, n=4)
    items += director_items("sc", 4, 400, n=4, source="humaneval") + director_items("sc", 1, 500, n=4)
    report = write_report(tmp_path / "report.json", items)
    pareto.main(["--report", str(report), "--baseline", "direct", "--out", str(tmp_path / "out")])
    table = (tmp_path / "out" / "pareto.md").read_text(encoding="utf-8")
    assert "### pooled (humaneval + mbpp)" in table
    pooled = table.split("### pooled")[1]
    assert "| sc | 62.5 (5/8) |" in pooled and "| 2 / 0 (n=8) |" in pooled
    assert "| 450 | 2.25 |" in pooled  # (400 + 500) / 2 tokens, over direct's (100 + 300) / 2


def test_oracle_share_and_gap_use_the_items_with_a_known_oracle() -> None:
    items = [episode("sc", i, i == 0, 100, oracle=i < 3 if i < 4 else None) for i in range(6)]
    (row,) = pareto.scope_rows(pareto.Scope("mbpp", items), ["sc"], "sc", "sc")
    assert row.oracle == pytest.approx(0.75)  # 3 of the 4 known
    assert row.oracle_gap == pytest.approx(50.0)  # 75% oracle - 25% right on those same 4


def failed_report(tmp_path: Path) -> Path:
    items = director_items("direct", 2, 100, n=4) + director_items("sc", 3, 400, n=4)
    items[5] = episode("sc", 1, True, 400, error="server down", score_method="episode_error")
    items[6] = episode("sc", 2, True, 400, finished=False)
    return write_report(tmp_path / "report.json", items)


def test_a_workflow_that_answers_nothing_is_a_scored_outcome_not_a_failed_run(tmp_path: Path) -> None:
    items = director_items("direct", 2, 100, n=4) + director_items("sc", 3, 400, n=4)
    items[6] = episode("sc", 2, False, 400, answer="", error="the workflow produced no answer", score_method="no_code")
    out = tmp_path / "out"
    pareto.main(
        ["--report", str(write_report(tmp_path / "report.json", items)), "--baseline", "direct", "--out", str(out)]
    )
    sc_row = next(
        line for line in (out / "pareto.md").read_text(encoding="utf-8").splitlines() if line.startswith("| sc |")
    )
    assert sc_row.startswith("| sc | 50.0 (2/4) |")


def test_failed_episodes_are_refused_without_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"2 failed episodes .* sc: 2.*--allow-failures"):
        pareto.main(["--report", str(failed_report(tmp_path)), "--baseline", "direct", "--out", str(out)])
    assert not out.exists() and capsys.readouterr().out == ""


def test_allowed_failures_count_as_wrong_and_are_shown(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--report", str(failed_report(tmp_path)), "--baseline", "direct", "--out", str(out), "--allow-failures"]
    pareto.main(args)
    table = (out / "pareto.md").read_text(encoding="utf-8")
    assert "| failures |" in table
    sc_row = next(line for line in table.splitlines() if line.startswith("| sc |"))
    assert sc_row.startswith("| sc | 25.0 (1/4) |") and "| 2 |" in sc_row


def test_unknown_directors_are_named(tmp_path: Path) -> None:
    report = write_report(tmp_path / "report.json", director_items("direct", 1, 100, n=2))
    with pytest.raises(SystemExit, match=r"--baseline 'template:nope' is not a director.*direct"):
        pareto.main(["--report", str(report), "--baseline", "template:nope", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match=r"--reference 'gone'"):
        pareto.main(["--report", str(report), "--baseline", "direct", "--reference", "gone", "--out", str(tmp_path)])


def test_the_cli_exits_non_zero_on_failures(tmp_path: Path) -> None:
    args = ["--report", str(failed_report(tmp_path)), "--baseline", "direct", "--out", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode != 0 and "refusing" in done.stderr and done.stdout == ""


def test_the_svg_is_written_and_byte_identical_across_runs(tmp_path: Path) -> None:
    items = [item for name, solved, tokens in TRADE_OFF for item in director_items(name, solved, tokens, n=20)]
    items += director_items("direct", 5, 150, n=20, source="humaneval")
    report = write_report(tmp_path / "report.json", items)
    svgs = []
    for run in ("first", "second"):
        pareto.main(["--report", str(report), "--baseline", "best", "--out", str(tmp_path / run), "--title", "t"])
        svgs.append((tmp_path / run / "pareto.svg").read_bytes())
    assert svgs[0].startswith(b"<?xml") and b"<svg" in svgs[0]
    assert svgs[0] == svgs[1]


# ---------------------------------------------------------------- several reports, aliases, shared calls

ENGINE = {"reasks": 2, "memo_scope": "workflow"}


def build(*argv: str) -> Any:
    """The script's Markdown and panels without writing files (the SVG is the slow part)."""
    return pareto.build(pareto.parse_args([*argv, "--out", "unused"]))


def per_dataset_reports(tmp_path: Path, humaneval: list[ItemResult], mbpp: list[ItemResult]) -> list[str]:
    first = write_report(tmp_path / "he" / "report.json", humaneval, executor="qwen", engine=ENGINE)
    second = write_report(tmp_path / "mbpp" / "report.json", mbpp, executor="qwen", engine=ENGINE)
    return ["--report", str(first), "--report", str(second)]


def row_of(text: str, director: str, scope: str) -> str:
    """The director's table line in the scope whose label starts with `scope`; "" when it has none."""
    section = text.split(f"### {scope}")[1].split("###")[0]
    return next((line for line in section.splitlines() if line.startswith(f"| {director} |")), "")


def test_reports_of_two_datasets_merge_into_their_scopes_and_the_pool(tmp_path: Path) -> None:
    humaneval = director_items("direct", 2, 100, n=4, source="humaneval")
    humaneval += director_items("sc", 4, 400, n=4, source="humaneval")
    mbpp = director_items("direct", 1, 300, n=4) + director_items("sc", 1, 500, n=4)
    outcome = build(*per_dataset_reports(tmp_path, humaneval, mbpp), "--baseline", "direct")
    assert outcome.title == "he + mbpp"
    assert [summary.scope.label for summary in outcome.summaries] == ["humaneval", "mbpp", "pooled (humaneval + mbpp)"]
    assert row_of(outcome.text, "sc", "humaneval").startswith("| sc | 100.0 (4/4) |")
    pooled = row_of(outcome.text, "sc", "pooled")
    assert pooled.startswith("| sc | 62.5 (5/8) |") and "| 2 / 0 (n=8) |" in pooled and "| 450 | 2.25 |" in pooled
    assert "| wall s/ep |" in outcome.text and "not comparable" not in outcome.text


def test_an_item_in_two_reports_is_refused(tmp_path: Path) -> None:
    items = director_items("direct", 1, 100, n=2)
    args = per_dataset_reports(tmp_path, items, items[1:])
    with pytest.raises(SystemExit, match=r"'direct' has two items for mbpp problem 'mbpp/1', in .*he.* and in .*mbpp"):
        build(*args, "--baseline", "direct")


@pytest.mark.parametrize("differs", [{"executor": "llama"}, {"engine": {**ENGINE, "reasks": 0}}, {"engine": None}])
def test_reports_of_other_executors_or_engines_are_refused(tmp_path: Path, differs: dict[str, Any]) -> None:
    first = write_report(tmp_path / "a.json", director_items("direct", 1, 100, n=2), executor="qwen", engine=ENGINE)
    config = {"executor": "qwen", "engine": ENGINE, **differs}
    second = write_report(tmp_path / "b.json", director_items("direct", 1, 100, n=2, source="humaneval"), **config)
    with pytest.raises(SystemExit, match=rf"differ in config\.{next(iter(differs))}, so their runs are not comparable"):
        build("--report", str(first), "--report", str(second), "--baseline", "direct")


def peers(tmp_path: Path) -> list[str]:
    """`direct` on both datasets, each aflow variant on its own dataset only."""
    humaneval = director_items("direct", 1, 100, n=4, source="humaneval")
    humaneval += director_items("template:aflow-humaneval", 3, 600, n=4, source="humaneval")
    mbpp = director_items("direct", 1, 100, n=4) + director_items("template:aflow-mbpp", 2, 800, n=4)
    return per_dataset_reports(tmp_path, humaneval, mbpp)


def test_an_alias_joins_per_dataset_peers_into_one_pooled_row(tmp_path: Path) -> None:
    aliases = ["--alias", "template:aflow-humaneval=aflow", "--alias", "template:aflow-mbpp=aflow"]
    outcome = build(*peers(tmp_path), *aliases, "--baseline", "direct")
    assert row_of(outcome.text, "aflow", "humaneval").startswith("| aflow | 75.0 (3/4) |")
    pooled = row_of(outcome.text, "aflow", "pooled")
    assert pooled.startswith("| aflow | 62.5 (5/8) |") and "| 700 | 7.00 |" in pooled
    assert "template:aflow" not in outcome.text and "Not on every dataset" not in outcome.text


def test_a_director_missing_from_a_dataset_is_left_out_of_the_pool_and_named(tmp_path: Path) -> None:
    outcome = build(*peers(tmp_path), "--baseline", "direct")
    assert row_of(outcome.text, "template:aflow-mbpp", "mbpp")
    assert not row_of(outcome.text, "template:aflow-mbpp", "pooled")
    assert row_of(outcome.text, "direct", "pooled").startswith("| direct | 25.0 (2/8) |")
    assert (
        "Not on every dataset, so not in this pooled table: template:aflow-humaneval (only humaneval), "
        "template:aflow-mbpp (only mbpp)." in outcome.text.split("### pooled")[1]
    )
    assert [row.director for row in outcome.summaries[-1].rows] == ["direct"]


def test_a_pool_no_director_covers_gets_no_table(tmp_path: Path) -> None:
    args = per_dataset_reports(
        tmp_path, director_items("a", 1, 100, n=2, source="humaneval"), director_items("b", 1, 100, n=2)
    )
    outcome = build(*args, "--baseline", "a", "--reference", "a")
    assert len(outcome.summaries) == 2
    assert "No director ran on every dataset, so there is no pooled table." in outcome.text


def test_bad_aliases_are_refused(tmp_path: Path) -> None:
    args = peers(tmp_path)
    with pytest.raises(
        SystemExit, match=r"two items for mbpp problem 'mbpp/0', .*\(as direct\) .*\(as template:aflow-mbpp\)"
    ):
        build(*args, "--alias", "template:aflow-mbpp=direct", "--baseline", "direct")
    with pytest.raises(SystemExit, match=r"--alias 'template:nope' is not a director in the reports"):
        build(*args, "--alias", "template:nope=x", "--baseline", "direct")
    with pytest.raises(SystemExit, match=r"two new names"):
        build(*args, "--alias", "direct=a", "--alias", "direct=b", "--baseline", "a")
    with pytest.raises(SystemExit):  # argparse: not OLD=NEW
        build(*args, "--alias", "direct", "--baseline", "direct")


@pytest.mark.parametrize(("engine", "shared"), [({"memo_scope": "charged"}, True), (ENGINE, False), (None, False)])
def test_the_wall_column_is_marked_when_workflows_shared_calls(
    tmp_path: Path, engine: dict[str, Any] | None, shared: bool
) -> None:
    items = director_items("direct", 1, 100, n=2) + director_items("sc", 2, 300, n=2)
    report = write_report(tmp_path / "report.json", items, engine=engine)
    text = build("--report", str(report), "--baseline", "direct").text
    assert ("| wall s/ep (shared calls: not comparable) |" in text) is shared
    assert ("memo_scope 'charged'" in text and "finished sooner than it would alone" in text) is shared
    assert ("| wall s/ep |" in text) is not shared
