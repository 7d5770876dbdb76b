"""HTML of the episode browser (`#summary`, `#episodes`, `#plots`; per episode `#graph`, `#trace`, `#answer`, `#score`).

Everything a run recorded is untrusted (model answers, programs, prompts, errors), so every value goes through
`text()` (html.escape with quotes) and names in URLs are percent-encoded too. No inline script or style: only
viewer.css is linked, as the CSP demands. Links are relative, so the app works under any mount point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from pydantic import BaseModel

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.viewer.graph_svg import render_dsl_svg
from flowsteer_mcp.viewer.pages import clipped, text, trace_table

if TYPE_CHECKING:
    from flowsteer_mcp.viewer.episodes import EpisodeView, MetricSummary, SummaryRow

DSL_PREVIEW_CHARS = 120  # DSL column of the episode list
RESULTS = ("all", "pass", "fail")


class Filters(BaseModel):
    """The index page's GET form: dataset (source), director, pass/fail; an empty choice means all."""

    dataset: str = ""
    director: str = ""
    result: Literal["all", "pass", "fail"] = "all"

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filters:
        result = query.get("result", "all")
        return cls(
            dataset=query.get("dataset", ""),
            director=query.get("director", ""),
            result=result if result in RESULTS else "all",
        )

    def keeps(self, episode: EpisodeView) -> bool:
        return (
            (not self.dataset or episode.source == self.dataset)
            and (not self.director or episode.director == self.director)
            and (self.result == "all" or episode.result == self.result)
        )


def document(title: str, body: str, *, root: str) -> str:
    """A whole page; `root` is the relative way back to the app's root ("" or "../")."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(title)}</title>"
        f'<link rel="stylesheet" href="{root}static/viewer.css"></head>'
        f'<body data-page="episodes"><header><a href="{root or "./"}">FlowSteer episodes</a></header>'
        f"{body}</body></html>"
    )


# ----- index -----------------------------------------------------------------------------------------------
def _summary_html(rows: Sequence[SummaryRow], source: str, steps: int, metrics: Sequence[MetricSummary]) -> str:
    parts = ['<section id="summary"><h2>Summary</h2>']
    if rows:
        head = (
            "<thead><tr><th>director</th><th>dataset</th><th>n</th><th>correct</th><th>mean score</th>"
            "<th>95% CI</th><th>failures</th></tr></thead>"
        )
        body = "".join(
            f'<tr data-director="{text(row.director)}" data-source="{text(row.source)}">'
            f"<td>{text(row.director)}</td><td>{text(row.source)}</td><td>{row.n}</td><td>{row.correct}</td>"
            f"<td>{row.score_mean:.3f}</td><td>{_interval(row)}</td><td>{row.failures}</td></tr>"
            for row in rows
        )
        parts.append(
            f'<table class="accuracy"><caption>from {text(source)}</caption>{head}<tbody>{body}</tbody></table>'
        )
    if steps:
        head = "<thead><tr><th>metric</th><th>first</th><th>last</th><th>min</th><th>max</th></tr></thead>"
        body = "".join(
            f'<tr data-metric="{text(m.name)}"><td>{text(m.name)}</td><td>{m.first:.4g}</td><td>{m.last:.4g}</td>'
            f"<td>{m.low:.4g}</td><td>{m.high:.4g}</td></tr>"
            for m in metrics
        )
        parts.append(
            f'<table id="metrics"><caption>training run: {steps} steps (metrics.jsonl)</caption>'
            f"{head}<tbody>{body}</tbody></table>"
        )
    if not rows and not steps:
        parts.append("<p>Nothing summarised yet.</p>")
    return "".join(parts) + "</section>"


def _interval(row: SummaryRow) -> str:
    if row.ci_low is None or row.ci_high is None:
        return ""
    return f"{row.ci_low:.3f}–{row.ci_high:.3f}"


def _select(name: str, label: str, values: Sequence[str], chosen: str, *, all_label: str) -> str:
    options = [f'<option value=""{" selected" if not chosen else ""}>{text(all_label)}</option>']
    options += [
        f'<option value="{text(value)}"{" selected" if value == chosen else ""}>{text(value)}</option>'
        for value in values
    ]
    return f'<label>{label} <select name="{name}">{"".join(options)}</select></label>'


def _filters_html(episodes: Sequence[EpisodeView], chosen: Filters) -> str:
    results = "".join(
        f'<option value="{value}"{" selected" if value == chosen.result else ""}>{value}</option>' for value in RESULTS
    )
    return (
        '<form id="filters" method="get" action="">'
        + _select("dataset", "dataset", sorted({e.source for e in episodes}), chosen.dataset, all_label="all datasets")
        + _select(
            "director", "director", sorted({e.director for e in episodes}), chosen.director, all_label="all directors"
        )
        + f'<label>result <select name="result">{results}</select></label>'
        + '<button type="submit">filter</button></form>'
    )


def _episode_row(number: int, episode: EpisodeView) -> str:
    return (
        f'<tr class="episode {episode.result}" data-director="{text(episode.director)}" '
        f'data-source="{text(episode.source)}" data-problem-id="{text(episode.problem_id)}">'
        f'<td><a href="episode/{number}">{number}</a></td><td>{text(episode.director)}</td>'
        f"<td>{text(episode.source)}</td><td>{text(episode.problem_id)}</td><td>{episode.result}</td>"
        f"<td>{episode.score:.2f}</td><td>{text(episode.score_method)}</td><td>{episode.turns}</td>"
        f"<td>{episode.tokens}</td><td>{episode.wall_s:.1f}</td>"
        f"<td><code>{text(clipped(episode.dsl, DSL_PREVIEW_CHARS))}</code></td></tr>"
    )


def _episodes_html(episodes: Sequence[tuple[int, EpisodeView]], chosen: Filters) -> str:
    kept = [(number, episode) for number, episode in episodes if chosen.keeps(episode)]
    head = (
        "<thead><tr><th>#</th><th>director</th><th>dataset</th><th>problem</th><th>result</th><th>score</th>"
        "<th>method</th><th>turns</th><th>tokens</th><th>wall s</th><th>DSL</th></tr></thead>"
    )
    rows = "".join(_episode_row(number, episode) for number, episode in kept)
    return (
        f'<section id="browse"><h2>Episodes</h2>{_filters_html([e for _, e in episodes], chosen)}'
        f'<p id="count">{len(kept)} of {len(episodes)} episodes</p>'
        f'<table id="episodes">{head}<tbody>{rows}</tbody></table></section>'
    )


def _plots_html(names: Sequence[str]) -> str:
    figures = "".join(
        f'<figure><img src="plots/{text(quote(name, safe=""))}" alt="{text(name)}">'
        f"<figcaption>{text(name)}</figcaption></figure>"
        for name in names
    )
    return f'<section id="plots"><h2>Plots</h2>{figures or "<p>No plots in this run.</p>"}</section>'


def index_page(
    title: str,
    episodes: Sequence[tuple[int, EpisodeView]],
    chosen: Filters,
    *,
    summary: Sequence[SummaryRow],
    summary_from: str,
    steps: int,
    metrics: Sequence[MetricSummary],
    plots: Sequence[str],
) -> str:
    body = (
        f"<main><h1>Run {text(title)}</h1>{_summary_html(summary, summary_from, steps, metrics)}"
        f"{_episodes_html(episodes, chosen)}{_plots_html(plots)}</main>"
    )
    return document(f"FlowSteer run {title}", body, root="")


# ----- one episode -----------------------------------------------------------------------------------------
def graph_html(dsl: str, trace: Sequence[NodeTrace]) -> str:
    """`#graph`: the recorded DSL drawn with the final run's trace (graph_svg says so when it is not drawable)."""
    if not dsl.strip():
        return '<div id="graph"><p class="empty">No workflow was recorded.</p></div>'
    return f'<div id="graph">{render_dsl_svg(dsl, trace)}</div>'


def episode_trace(trace: Sequence[NodeTrace]) -> str:
    """The live viewer's trace table, with a note when the journal recorded no trace (older runs)."""
    empty = "" if trace else '<p class="empty">No trace was recorded for this episode.</p>'
    return empty + trace_table(trace)


def score_html(episode: EpisodeView) -> str:
    """`#score`: correct, score and method, plus only the allow-listed grading facts (never test text)."""
    details = "".join(
        f'<dt>{text(name)}</dt><dd data-detail="{text(name)}">{text(value)}</dd>'
        for name, value in episode.shown_score_details().items()
    )
    return (
        f'<section id="score" class="{episode.result}"><h2>Score</h2><dl>'
        f"<dt>correct</dt><dd>{'yes' if episode.correct else 'no'}</dd>"
        f"<dt>score</dt><dd>{episode.score:.3f}</dd><dt>method</dt><dd>{text(episode.score_method)}</dd>"
        f"{details}</dl></section>"
    )


def _facts_html(episode: EpisodeView) -> str:
    facts = {
        "director": episode.director,
        "dataset": episode.source,
        "problem": episode.problem_id,
        "type": episode.problem_type,
        "finished": "yes" if episode.finished else "no",
        "end reason": episode.end_reason or "",
        "turns": episode.turns,
        "executor LLM calls": episode.llm_calls,
        "executor tokens": episode.tokens,
        "policy tokens": episode.policy_tokens,
        "wall time": f"{episode.wall_s:.1f} s",
    }
    error = episode.shown_error()
    rows = "".join(f"<dt>{text(name)}</dt><dd>{text(value)}</dd>" for name, value in facts.items())
    if error is not None:
        rows += f'<dt>error</dt><dd><pre class="error">{text(error)}</pre></dd>'
    return f'<dl id="facts">{rows}</dl>'


def turns_html(episode: EpisodeView) -> str:
    """`#turns`: what a policy director sent, turn by turn, and whether the canvas took it (the DSL shows neither
    a node's inline prompt nor a refused edit). Other directors, and older journals, have no turns: no section."""
    if not episode.director_turns:
        return ""
    items = []
    for turn in episode.director_turns:
        verdict = "accepted" if turn.ok else "refused"
        items.append(
            f'<li class="{verdict}" data-round="{turn.round}">'
            f'<span class="kind">{text(turn.kind)}</span> <code>{text(turn.sent)}</code> '
            f'<span class="verdict">{verdict}</span></li>'
        )
    return f'<h2>Director\'s turns</h2><ol id="turns">{"".join(items)}</ol>'


def episode_page(number: int, episode: EpisodeView) -> str:
    trace = episode.node_traces()
    answer = episode.answer if episode.answer is not None else "(no answer)"
    body = (
        f"<main><h1>Episode {number}: {text(episode.director)} on {text(episode.problem_id)}</h1>"
        f'<p><a href="../">all episodes</a></p>{_facts_html(episode)}{score_html(episode)}{turns_html(episode)}'
        f'<h2>Workflow</h2>{graph_html(episode.dsl, trace)}<pre id="dsl">{text(episode.dsl)}</pre>'
        f"<h2>Trace of the final run</h2>{episode_trace(trace)}"
        f'<h2>Answer</h2><pre id="answer">{text(answer)}</pre></main>'
    )
    return document(f"Episode {number}", body, root="../")


def missing_page(number: int) -> str:
    body = f'<main><h1>No episode {number}</h1><p><a href="../">all episodes</a></p></main>'
    return document("No such episode", body, root="../")
