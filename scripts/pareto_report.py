"""Accuracy against executor tokens for evaluation runs: a Markdown table and an SVG plot, with the Pareto winner.

Why: a workflow that samples eight answers buys its accuracy with tokens, so "which director is best" is a
question about a trade-off. The issue settles it with a rule: the winner is the cheapest director (fewest
executor tokens per episode) whose accuracy is within one point of the most accurate director's. This script
applies that rule per dataset and pooled over the datasets, next to what the rule rests on: the accuracy's 95%
Wilson interval, the exact McNemar test against the current default on the same problems, and what each
director spends (tokens, LLM calls, wall time).

Several runs: `--report` may be given once per dataset (say a HumanEval run and an MBPP run made back to back
with the same commit and config); their items are merged into one set, so each dataset gets its table and the
datasets are pooled as if one run had made them. The runs must be comparable, so reports whose
`config.executor` or `config.engine` differ are refused, and so is an item (director, source, problem) that two
reports both hold: pooling would count that problem twice.

`--alias OLD=NEW` renames a director before anything else: per-dataset peers (`template:aflow-humaneval`, run
only on HumanEval, and `template:aflow-mbpp`, only on MBPP) become one director `aflow` with one pooled row.
A pooled row is only ever computed over every dataset of the pool: a director missing from one of them is left
out of the pooled table and named under it, not averaged over the problems it happened to run.

Wall time: an engine that shares identical node calls across workflows (`config.engine.memo_scope` "charged" or
"server") lets a workflow reuse calls another workflow made, so it finishes sooner than it would alone; the
wall column is then labelled as not comparable between workflows, and a footnote says why. Reports without
that setting (older runs, a remote server) are taken as unshared.

    .venv/bin/python scripts/pareto_report.py --report runs/screen34-code-train/report.json \
        --baseline template:direct8-exec --out /tmp/pareto-code
    .venv/bin/python scripts/pareto_report.py --report runs/he/report.json --report runs/mbpp/report.json \
        --alias template:aflow-humaneval=aflow --alias template:aflow-mbpp=aflow \
        --baseline template:direct8-exec --out /tmp/pareto-code
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from flowsteer_mcp.director.graded import ItemResult
from training.evaluate.paired import PairedComparison, paired_comparisons
from training.evaluate.report import oracle_share, per_1k_tokens
from training.evaluate.results import EvalConfig, EvalReport
from training.evaluate.stats import Interval, wilson_interval

if TYPE_CHECKING:
    from matplotlib.axes import Axes

CONFIDENCE = 0.95
WITHIN_POINTS = Fraction(1)  # the tolerance: a director this close to the best accuracy counts as tied
LOG_SCALE_RANGE = 10.0  # token axes spanning more than this factor are drawn on a log scale
SHARED_MEMO_SCOPES = frozenset({"charged", "server"})  # engine memo scopes whose workflows reuse each other's calls
SVG_HASH_SALT = "pareto-report"  # fixed so the SVG's element ids, and so its bytes, repeat across runs
_PANEL_WIDTH_IN = 5.2
_PANEL_HEIGHT_IN = 4.2


@dataclass(frozen=True)
class Scope:
    """A set of items that gets one table and one panel: a dataset, or all datasets pooled."""

    label: str
    items: list[ItemResult]
    # pooled scope only: directors not on every dataset (left out of it) -> the datasets they did run on
    left_out: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """One director's numbers within one scope."""

    director: str
    n: int
    correct: int
    ci: Interval
    tokens: float  # mean executor tokens per episode
    token_ratio: float | None  # tokens / the reference director's tokens; None: no reference here
    llm_calls: float
    wall_s: float
    per_1k: float | None  # accuracy (fraction) per 1000 tokens; None when no tokens were spent
    oracle: float | None  # share of oracle True among items with a known oracle; None: nothing sampled
    oracle_gap: float | None  # oracle minus accuracy on the same (oracle-known) items, in points
    failures: int  # failed episodes, counted as wrong (only with --allow-failures)
    pair: PairedComparison | None  # against the baseline; None for the baseline itself or when it is absent

    @property
    def accuracy(self) -> Fraction:
        """Exact, so the one-point rule never hinges on float rounding (49.0 vs 48.999...)."""
        return Fraction(100 * self.correct, self.n)


@dataclass(frozen=True)
class ScopeSummary:
    """A scope's rows plus which of them are on the Pareto front and which one wins."""

    scope: Scope
    rows: list[Row]
    front: set[str]
    winner: str


@dataclass(frozen=True)
class Columns:
    """What the tables show besides the rows: the baseline, the ratio's reference, the failures column, and
    whether the engine shared calls across workflows (its memo_scope, or None), which makes wall time moot."""

    baseline: str
    reference: str
    show_failures: bool = False
    shared_calls: str | None = None


# ---------------------------------------------------------------- loading and failures


def load_report(path: Path) -> EvalReport:
    """The report's config and items through the harness's own models, so a schema drift fails loudly here.

    report.json also holds derived sections (aggregates, paired, ...); they are recomputed, never trusted.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"cannot read {path}: {error}") from error
    return EvalReport.model_validate({key: data[key] for key in EvalReport.model_fields if key in data})


def director_order(report: EvalReport) -> list[str]:
    """Configured order first, then any director that only appears in the items: rows keep a stable order."""
    return list(dict.fromkeys([*report.config.directors, *(item.director for item in report.items)]))


def check_comparable(loaded: Sequence[tuple[Path, EvalReport]]) -> None:
    """Runs pooled into one table must have used the same executor and engine settings (re-asks, timeouts, memo
    scope): otherwise a director's rows would mix two set-ups."""
    first_path, first = loaded[0]
    for path, report in loaded[1:]:
        for name in ("executor", "engine"):
            mine, theirs = getattr(first.config, name), getattr(report.config, name)
            if mine != theirs:
                raise SystemExit(
                    f"refusing: the reports differ in config.{name}, so their runs are not comparable - "
                    f"{first_path}: {json.dumps(mine, sort_keys=True)}; {path}: {json.dumps(theirs, sort_keys=True)}."
                )


def parse_alias(text: str) -> tuple[str, str]:
    """`OLD=NEW` (split at the first `=`), both sides non-empty."""
    old, sep, new = text.partition("=")
    if not sep or not old.strip() or not new.strip():
        raise argparse.ArgumentTypeError(f"expected OLD=NEW, got {text!r}")
    return old.strip(), new.strip()


def alias_map(pairs: Sequence[tuple[str, str]], directors: Sequence[str]) -> dict[str, str]:
    """The renames as a mapping; an OLD given two NEW names, or no director of the reports, is refused."""
    mapping: dict[str, str] = {}
    for old, new in pairs:
        if mapping.setdefault(old, new) != new:
            raise SystemExit(f"--alias {old!r} is given two new names: {mapping[old]!r} and {new!r}")
    unknown = [old for old in mapping if old not in directors]
    if unknown:
        raise SystemExit(
            f"--alias {unknown[0]!r} is not a director in the reports; their directors: {', '.join(directors)}"
        )
    return mapping


def merge(loaded: Sequence[tuple[Path, EvalReport]], aliases: dict[str, str]) -> tuple[list[str], list[ItemResult]]:
    """The directors (renamed, in order) and the items of all reports, each (director, source, problem) once.

    Why refuse a repeat: two items of one director on one problem would count that problem twice in its row
    and pair it twice in McNemar; it means two runs overlap, or an alias joined two directors of one dataset.
    """
    order: list[str] = []
    items: list[ItemResult] = []
    seen: dict[tuple[str, str, str], str] = {}
    for path, report in loaded:
        order += [aliases.get(name, name) for name in director_order(report)]
        for item in report.items:
            director = aliases.get(item.director, item.director)
            key = (director, item.source, item.problem_id)
            origin = f"{path} (as {item.director})"
            if key in seen:
                raise SystemExit(
                    f"refusing: director {director!r} has two items for {item.source} problem {item.problem_id!r}, "
                    f"in {seen[key]} and in {origin}. Give each dataset's run once, and alias only directors "
                    "that ran on different datasets."
                )
            seen[key] = origin
            items.append(item if director == item.director else item.model_copy(update={"director": director}))
    return list(dict.fromkeys(order)), items


def shared_calls(config: EvalConfig) -> str | None:
    """The engine's memo_scope when it let workflows reuse each other's calls; None when it did not, or when the
    report does not say (older reports, a remote server: `engine` absent or without memo_scope)."""
    scope = (config.engine or {}).get("memo_scope")
    return scope if isinstance(scope, str) and scope in SHARED_MEMO_SCOPES else None


def is_failed(item: ItemResult) -> bool:
    """A run failure (the harness's own rule: the episode could not run or be graded, through no act of the
    workflow) or an episode that never finished is no measurement of the director's accuracy. A workflow that
    ends without an answer is an outcome: it is already scored 0 and counts as a measurement."""
    return item.run_failure or not item.finished


def failure_counts(items: Sequence[ItemResult]) -> Counter[str]:
    return Counter(item.director for item in items if is_failed(item))


def check_failures(items: Sequence[ItemResult], allow: bool) -> list[ItemResult]:
    """Refuse a run with failed episodes unless told to score them as wrong (then they are)."""
    counts = failure_counts(items)
    if not counts:
        return list(items)
    if not allow:
        detail = ", ".join(f"{director}: {count}" for director, count in sorted(counts.items()))
        raise SystemExit(
            f"refusing: the report(s) hold {sum(counts.values())} failed episodes (run failure or not finished) - {detail}. "
            "Resume the run to finish them, or pass --allow-failures to count them as wrong."
        )
    return [item.model_copy(update={"correct": False, "score": 0.0}) if is_failed(item) else item for item in items]


def check_director(name: str, flag: str, directors: Sequence[str]) -> None:
    """A typo in --baseline or --reference would silently drop a column; name the directors instead."""
    if name not in directors:
        raise SystemExit(f"{flag} {name!r} is not a director in the report(s); directors: {', '.join(directors)}")


# ---------------------------------------------------------------- scopes and rows


def scopes(items: Sequence[ItemResult]) -> list[Scope]:
    """Each dataset in order of appearance, then, when there are several, all of them pooled (micro average).

    The pool holds only the directors that ran on every dataset: a director's pooled accuracy over part of the
    datasets would sit in one column with others' over all of them. The rest are listed in `left_out`.
    """
    sources = list(dict.fromkeys(item.source for item in items))
    found = [Scope(source, [item for item in items if item.source == source]) for source in sources]
    if len(sources) > 1:
        ran_on: dict[str, set[str]] = {}
        for item in items:
            ran_on.setdefault(item.director, set()).add(item.source)
        left_out = {
            director: [source for source in sources if source in ran]
            for director, ran in ran_on.items()
            if len(ran) < len(sources)
        }
        pooled = [
            item.model_copy(update={"problem_id": f"{item.source}:{item.problem_id}"})
            for item in items
            if item.director not in left_out
        ]
        found.append(Scope(f"pooled ({' + '.join(sources)})", pooled, left_out))
    return found


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0


def baseline_pairs(scope: Scope, directors: Sequence[str], baseline: str) -> dict[str, PairedComparison]:
    """McNemar against the baseline on the problems both ran, via the harness's paired module (one label)."""
    if not any(item.director == baseline for item in scope.items):
        return {}
    relabelled = [item.model_copy(update={"source": scope.label}) for item in scope.items]
    order = [baseline, *(name for name in directors if name != baseline)]
    return {pair.director: pair for pair in paired_comparisons(relabelled, order)}


def oracle_gap(items: Sequence[ItemResult]) -> float | None:
    """Oracle minus accuracy on the items whose oracle is known, in points.

    Why the same items: a workflow that samples on only some problems has its oracle measured on those alone;
    subtracting its accuracy over all problems would compare two different sets.
    """
    known = [item for item in items if item.oracle is not None]
    if not known:
        return None
    return 100 * (sum(bool(item.oracle) for item in known) - sum(item.correct for item in known)) / len(known)


def director_row(director: str, items: Sequence[ItemResult], pair: PairedComparison | None) -> Row:
    """The row of one director's items in one scope (token ratio filled in later, once the reference is known)."""
    correct = sum(item.correct for item in items)
    tokens = _mean([item.tokens for item in items])
    return Row(
        director=director,
        n=len(items),
        correct=correct,
        ci=wilson_interval(correct, len(items), CONFIDENCE),
        tokens=tokens,
        token_ratio=None,
        llm_calls=_mean([item.llm_calls for item in items]),
        wall_s=_mean([item.wall_s for item in items]),
        per_1k=per_1k_tokens(correct / len(items), tokens),
        oracle=oracle_share(items),
        oracle_gap=oracle_gap(items),
        failures=sum(is_failed(item) for item in items),
        pair=pair,
    )


def with_ratios(rows: Sequence[Row], reference: str) -> list[Row]:
    """Each row's tokens as a multiple of the reference director's in the same scope."""
    base = next((row.tokens for row in rows if row.director == reference), None)
    if not base:
        return list(rows)
    return [replace(row, token_ratio=row.tokens / base) for row in rows]


def scope_rows(scope: Scope, directors: Sequence[str], baseline: str, reference: str) -> list[Row]:
    pairs = baseline_pairs(scope, directors, baseline)
    rows = []
    for director in directors:
        mine = [item for item in scope.items if item.director == director]
        if mine:
            rows.append(director_row(director, mine, pairs.get(director)))
    return with_ratios(rows, reference)


# ---------------------------------------------------------------- the Pareto front and the winner


def dominates(a: Row, b: Row) -> bool:
    """`a` is at least as accurate and at most as costly as `b`, and strictly better in one of the two."""
    no_worse = a.accuracy >= b.accuracy and a.tokens <= b.tokens
    return no_worse and (a.accuracy > b.accuracy or a.tokens < b.tokens)


def pareto_front(rows: Sequence[Row]) -> set[str]:
    """The directors no other director dominates: the only ones worth their tokens."""
    return {row.director for row in rows if not any(dominates(other, row) for other in rows)}


def pareto_winner(rows: Sequence[Row], within: Fraction = WITHIN_POINTS) -> str:
    """The issue's winner: the fewest tokens among directors within `within` points of the best accuracy.

    Ties on tokens go to the more accurate director (so the winner is always on the front), then to run order.
    """
    if not rows:
        raise ValueError("no directors to choose from")
    best = max(row.accuracy for row in rows)
    close = [row for row in rows if row.accuracy >= best - within]
    return min(close, key=lambda row: (row.tokens, -row.accuracy)).director


def summarise(scope: Scope, directors: Sequence[str], baseline: str, reference: str) -> ScopeSummary:
    rows = scope_rows(scope, directors, baseline, reference)
    return ScopeSummary(scope=scope, rows=rows, front=pareto_front(rows), winner=pareto_winner(rows))


# ---------------------------------------------------------------- Markdown


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}"


def _ci_text(interval: Interval) -> str:
    if interval.low is None or interval.high is None:
        return ""
    return f"[{_pct(interval.low)}, {_pct(interval.high)}]"


def _pair_cells(row: Row, baseline: str) -> list[str]:
    if row.director == baseline:
        return ["baseline", ""]
    if row.pair is None:
        return ["", ""]
    return [f"{row.pair.better} / {row.pair.worse} (n={row.pair.n})", f"{row.pair.p_value:.3g}"]


def _pareto_cell(row: Row, summary: ScopeSummary) -> str:
    marks = (["front"] if row.director in summary.front else []) + (
        ["winner"] if row.director == summary.winner else []
    )
    return ", ".join(marks)


def table_row(row: Row, summary: ScopeSummary, columns: Columns) -> list[str]:
    ratio = "" if row.token_ratio is None else f"{row.token_ratio:.2f}"
    gap = "" if row.oracle_gap is None else f"{row.oracle_gap:+.1f}"
    cells = [
        row.director,
        f"{float(row.accuracy):.1f} ({row.correct}/{row.n})",
        _ci_text(row.ci),
        *_pair_cells(row, columns.baseline),
        f"{row.tokens:.0f}",
        ratio,
        f"{row.llm_calls:.1f}",
        f"{row.wall_s:.1f}",
        _pct(row.per_1k),
        _pct(row.oracle),
        gap,
    ]
    cells += [str(row.failures)] if columns.show_failures else []
    return [*cells, _pareto_cell(row, summary)]


def winner_line(summary: ScopeSummary) -> str:
    best = max(summary.rows, key=lambda row: row.accuracy)
    winner = next(row for row in summary.rows if row.director == summary.winner)
    line = (
        f"Pareto winner: **{winner.director}** ({float(winner.accuracy):.1f}% at {winner.tokens:.0f} tokens per "
        f"episode): the cheapest director within {WITHIN_POINTS} point of the best accuracy"
    )
    if best.director == winner.director or best.accuracy == winner.accuracy:
        return line + "."
    return line + f" ({best.director}, {float(best.accuracy):.1f}% at {best.tokens:.0f} tokens)."


def wall_header(columns: Columns) -> str:
    return "wall s/ep (shared calls: not comparable)" if columns.shared_calls else "wall s/ep"


def left_out_line(scope: Scope) -> str:
    """The directors a pooled scope leaves out, with the datasets each did run on ("" when none)."""
    if not scope.left_out:
        return ""
    names = ", ".join(f"{director} (only {' + '.join(ran)})" for director, ran in scope.left_out.items())
    return f"Not on every dataset, so not in this pooled table: {names}."


def scope_table(summary: ScopeSummary, columns: Columns) -> str:
    """One scope's Markdown table, with the winner named below it (and, pooled, who was left out)."""
    header = ["director", "accuracy %", "95% CI", f"vs {columns.baseline} W / L", "McNemar p", "tokens/ep"]
    header += [f"x {columns.reference}", "LLM calls/ep", wall_header(columns), "acc pts per 1k tok", "oracle %"]
    header += ["oracle gap pts"]
    header += ["failures"] if columns.show_failures else []
    header += ["Pareto"]
    lines = [
        f"### {summary.scope.label}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|",
    ]
    lines += ["| " + " | ".join(table_row(row, summary, columns)) + " |" for row in summary.rows]
    below = [winner_line(summary)] + ([left_out_line(summary.scope)] if summary.scope.left_out else [])
    return "\n".join([*lines, "", *below])


def empty_scope_text(scope: Scope) -> str:
    """A pooled scope no director ran all of: no table, only who ran what."""
    return f"### {scope.label}\n\nNo director ran on every dataset, so there is no pooled table. {left_out_line(scope)}"


def wall_note(shared: str) -> str:
    """Why a shared-call engine's wall times are no workflow's own cost (and, unless charged, nor its tokens)."""
    text = (
        f"Wall s/ep: the engine shared identical node calls across workflows (memo_scope {shared!r}), so a workflow "
        "that reused calls another workflow had made waited less and finished sooner than it would alone: its wall "
        "time is not comparable between workflows"
    )
    if shared == "charged":
        return text + " (tokens and LLM calls are still charged in full)."
    return text + ", and nor are its tokens and LLM calls, which leave out the calls it reused."


def footnote(columns: Columns) -> str:
    """What each column means, once below the tables: the numbers are only as good as their definitions."""
    baseline, reference = columns.baseline, columns.reference
    text = (
        "Accuracy: strictly correct episodes (code pass@1, math answer, QA exact match); pooled rows pool items. "
        "95% CI: Wilson score interval. W / L: problems solved only by the director / only by "
        f"{baseline}, on the problems both ran; McNemar p: exact two-sided. Tokens: executor tokens per episode; "
        f"x {reference}: that as a multiple of {reference}'s. Acc pts per 1k tok: accuracy points per 1000 tokens. "
        "Oracle: share of problems where some draw of the workflow's sampled node was correct, among those where it "
        "sampled (blank: never sampled); oracle gap: oracle minus accuracy on those same problems. "
        "Front: no other director is at least as accurate for at most as many tokens (one strictly)."
    )
    if columns.shared_calls:
        text += " " + wall_note(columns.shared_calls)
    if columns.show_failures:
        text += " Failures: run failures or unfinished episodes, counted as wrong (--allow-failures)."
    return text


# ---------------------------------------------------------------- the plot


def _label_above(row: Row, rows: Sequence[Row]) -> bool:
    """Label above unless the director closest in cost is more accurate: two close points then split their
    labels up and down instead of printing over each other."""
    others = [other for other in rows if other.director != row.director]
    if not others:
        return True
    nearest = min(others, key=lambda other: abs(math.log1p(other.tokens) - math.log1p(row.tokens)))
    return row.accuracy >= nearest.accuracy


def _draw_points(axes: Axes, summary: ScopeSummary) -> None:
    """Each director as a point with its 95% interval, labelled; the winner ringed."""
    for row in summary.rows:
        y = float(row.accuracy)
        low = y if row.ci.low is None else 100 * row.ci.low
        high = y if row.ci.high is None else 100 * row.ci.high
        color = "tab:blue" if row.director in summary.front else "tab:gray"
        axes.errorbar([row.tokens], [y], yerr=[[y - low], [high - y]], fmt="o", color=color, capsize=3, markersize=5)
        offset = (5, 5) if _label_above(row, summary.rows) else (5, -11)
        axes.annotate(row.director, (row.tokens, y), textcoords="offset points", xytext=offset, fontsize="x-small")
        if row.director == summary.winner:
            axes.scatter(
                [row.tokens],
                [y],
                s=220,
                facecolors="none",
                edgecolors="tab:red",
                linewidths=1.5,
                zorder=3,
                label="winner",
            )


def _draw_front(axes: Axes, summary: ScopeSummary) -> None:
    """The front as a step line: the best accuracy reachable at each token budget."""
    front = sorted((row for row in summary.rows if row.director in summary.front), key=lambda row: row.tokens)
    xs = [row.tokens for row in front]
    ys = [float(row.accuracy) for row in front]
    axes.step(xs, ys, where="post", color="tab:blue", linewidth=1.0, alpha=0.6, label="Pareto front")


def _set_scale(axes: Axes, rows: Sequence[Row]) -> None:
    """Log tokens when they span more than a factor of ten, where a linear axis would crowd the cheap points.

    Log ticks are plain numbers at 1, 2 and 5 per decade: the default minor labels (2x10^2 ...) overprint.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    tokens = [row.tokens for row in rows]
    if min(tokens) > 0 and max(tokens) / min(tokens) > LOG_SCALE_RANGE:
        axes.set_xscale("log")
        axes.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:g}"))
        axes.xaxis.set_minor_formatter(NullFormatter())
    else:
        axes.set_xlim(left=0)


def draw_panel(axes: Axes, summary: ScopeSummary) -> None:
    _draw_front(axes, summary)
    _draw_points(axes, summary)
    axes.margins(x=0.25, y=0.1)
    _set_scale(axes, summary.rows)
    axes.set_title(f"{summary.scope.label} - winner: {summary.winner}", fontsize="small")
    axes.set_xlabel("executor tokens per episode")
    axes.set_ylabel("accuracy % (95% Wilson CI)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="x-small", loc="best")


def write_svg(summaries: Sequence[ScopeSummary], title: str, path: Path) -> None:
    """All panels in a row, one SVG; the hash salt and an empty date make reruns byte-identical."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with rc_context({"svg.hashsalt": SVG_HASH_SALT, "svg.fonttype": "path"}):
        figure = Figure(figsize=(_PANEL_WIDTH_IN * len(summaries), _PANEL_HEIGHT_IN), layout="constrained")
        FigureCanvasAgg(figure)
        for index, summary in enumerate(summaries):
            draw_panel(figure.add_subplot(1, len(summaries), index + 1), summary)
        figure.suptitle(title, fontsize="medium")
        figure.savefig(path, format="svg", metadata={"Date": None})


# ---------------------------------------------------------------- CLI


def markdown(summaries: Sequence[ScopeSummary], empty: Sequence[Scope], title: str, columns: Columns) -> str:
    """The tables in scope order, then any scope without rows (a pool no director covered), then the footnote."""
    tables = [scope_table(summary, columns) for summary in summaries]
    tables += [empty_scope_text(scope) for scope in empty]
    return "\n\n".join([f"## {title}", *tables, footnote(columns)]) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--report",
        type=Path,
        action="append",
        required=True,
        help="report.json of one evaluation run; repeat for runs of other datasets (same executor and engine)",
    )
    parser.add_argument(
        "--alias",
        type=parse_alias,
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="rename director OLD to NEW before anything else, e.g. to join per-dataset peers; repeatable",
    )
    parser.add_argument("--baseline", required=True, help="the current default director, e.g. template:direct8-exec")
    parser.add_argument("--reference", default="direct", help="the director the token ratio divides by")
    parser.add_argument("--out", type=Path, required=True, help="folder for pareto.md and pareto.svg")
    parser.add_argument(
        "--title", help="heading of the table and plot (default: the reports' folder names, joined by +)"
    )
    parser.add_argument("--allow-failures", action="store_true", help="count failed episodes as wrong")
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Outcome:
    """What a run of the script produces, before anything is written."""

    title: str
    text: str  # the Markdown
    summaries: list[ScopeSummary]  # one SVG panel each


def build(args: argparse.Namespace) -> Outcome:
    """Load, check, merge and summarise the reports; refusals raise SystemExit before anything is written."""
    loaded = [(path, load_report(path)) for path in args.report]
    check_comparable(loaded)
    named = list(dict.fromkeys(name for _, report in loaded for name in director_order(report)))
    directors, items = merge(loaded, alias_map(args.alias, named))
    check_director(args.baseline, "--baseline", directors)
    check_director(args.reference, "--reference", directors)
    items = check_failures(items, args.allow_failures)
    found = scopes(items)
    summaries = [summarise(scope, directors, args.baseline, args.reference) for scope in found if scope.items]
    columns = Columns(args.baseline, args.reference, args.allow_failures, shared_calls(loaded[0][1].config))
    title = args.title or " + ".join(dict.fromkeys(path.resolve().parent.name for path in args.report))
    text = markdown(summaries, [scope for scope in found if not scope.items], title, columns)
    return Outcome(title, text, summaries)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    outcome = build(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pareto.md").write_text(outcome.text, encoding="utf-8")
    write_svg(outcome.summaries, outcome.title, args.out / "pareto.svg")
    print(outcome.text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
