"""HTML of the live canvas pages (the DOM contract of docs: `#workflows`, `#canvas`, `#graph`, `#history`, ...).

Every piece of workflow text is untrusted (tasks, prompts, model outputs, programs, errors), so each one goes
through `text()` (html.escape with quotes) on its way into a page; ids in URLs are percent-encoded as well.
Pages carry no inline script or style: viewer.js and viewer.css are linked, as the CSP demands.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import quote

from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.execution import ExecutionReport, NodeTrace
from flowsteer_mcp.canvas.session import HistoryEntry, PendingEdit
from flowsteer_mcp.store.base import StoredWorkflow
from flowsteer_mcp.viewer.graph_svg import render_graph_svg

PREVIEW_CHARS = 300  # trace output preview
TASK_PREVIEW_CHARS = 120  # task column of the list


def text(value: object) -> str:
    """`value` as escaped HTML text (safe in element content and in quoted attribute values)."""
    return html.escape(str(value), quote=True)


def clipped(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[:limit] + "…"


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def workflow_href(base_path: str, workflow_id: str) -> str:
    return f"{base_path}/w/{quote(workflow_id, safe='')}"


def document(title: str, body: str, *, base_path: str, page: str) -> str:
    """A whole page: linked css/js only, and the update counter viewer.js bumps (`data-updates`)."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(title)}</title>"
        f'<link rel="stylesheet" href="{text(base_path)}/static/viewer.css">'
        f'<script src="{text(base_path)}/static/viewer.js" defer></script></head>'
        f'<body data-updates="0" data-page="{text(page)}" data-base="{text(base_path)}">'
        f'<header><a href="{text(base_path)}/">FlowSteer canvas</a></header>{body}</body></html>'
    )


# ----- list ------------------------------------------------------------------------------------------------
def list_fragment(records: Sequence[StoredWorkflow], base_path: str) -> str:
    """The inner HTML of `<table id="workflows">`: newest edit first."""
    head = (
        "<thead><tr><th>workflow</th><th>task</th><th>type</th><th>status</th><th>DSL</th>"
        "<th>rounds</th><th>updated</th></tr></thead>"
    )
    if not records:
        return head + '<tbody><tr class="empty"><td colspan="7">No workflows yet.</td></tr></tbody>'
    rows = []
    for record in sorted(records, key=lambda r: r.updated_at, reverse=True):
        state = record.state
        rows.append(
            f'<tr class="workflow" data-workflow-id="{text(record.workflow_id)}">'
            f'<td><a href="{text(workflow_href(base_path, record.workflow_id))}">{text(record.workflow_id)}</a></td>'
            f'<td class="task">{text(clipped(state.task.problem, TASK_PREVIEW_CHARS))}</td>'
            f"<td>{text(state.task.task_type)}</td>"
            f'<td class="status {text(state.status)}">{text(state.status)}</td>'
            f"<td><code>{text(render(state.graph) or '(empty)')}</code></td>"
            f"<td>{state.rounds_used}/{state.options.max_rounds}</td>"
            f"<td>{text(stamp(record.updated_at))}</td></tr>"
        )
    return head + "<tbody>" + "".join(rows) + "</tbody>"


def list_page(records: Sequence[StoredWorkflow], base_path: str) -> str:
    body = f'<main><h1>Workflows</h1><table id="workflows">{list_fragment(records, base_path)}</table></main>'
    return document("FlowSteer workflows", body, base_path=base_path, page="list")


# ----- one workflow ----------------------------------------------------------------------------------------
def pending_html(pending: PendingEdit | None) -> str:
    """An add or modify waiting for its prompt turns: not on the graph yet, but what the director is doing."""
    if pending is None:
        return ""
    nodes = ", ".join(
        f"{operator} ({node})" for operator, node in zip(pending.operators, pending.node_ids, strict=False)
    )
    received = sum(prompt is not None for prompt in pending.prompts)
    return (
        f'<p id="pending">Pending edit: {text(nodes)}, {received} of {len(pending.slots)} prompt turn(s) '
        "received; it joins the graph once its prompts have arrived and the workflow has run with it.</p>"
    )


def history_html(history: Sequence[HistoryEntry]) -> str:
    if not history:
        return '<li class="empty">No steps yet.</li>'
    return "".join(
        f'<li class="step {"ok" if entry.ok else "invalid"}">'
        f'<span class="round">round {entry.round}</span> <span class="source">{text(entry.source)}</span> '
        f'<span class="verdict">{"ok" if entry.ok else "invalid"}</span>'
        f'<pre class="input">{text(entry.input)}</pre><pre class="feedback">{text(entry.message)}</pre></li>'
        for entry in history
    )


def trace_status(node: NodeTrace) -> str:
    return "skipped" if node.skipped else ("ok" if node.ok else "failed")


def trace_table(trace: Sequence[NodeTrace]) -> str:
    """`<table id="trace">`, one row per operator call (shared with the episode browser)."""
    head = (
        "<thead><tr><th>node</th><th>operator</th><th>status</th><th>LLM calls</th><th>tokens</th>"
        "<th>duration</th><th>output</th><th>error</th><th>note</th></tr></thead>"
    )
    rows = "".join(
        f'<tr data-node-id="{text(node.node_id)}" class="{trace_status(node)}">'
        f"<td>{text(node.node_id)}{'' if node.iteration is None else f' #{node.iteration}'}</td>"
        f"<td>{text(node.operator)}</td><td>{trace_status(node)}{' (cached)' if node.cached else ''}</td>"
        f"<td>{node.llm_calls}</td><td>{node.tokens}</td><td>{node.latency_s:.2f} s</td>"
        f"<td><pre>{text(clipped(node.output, PREVIEW_CHARS))}</pre></td>"
        f"<td>{'' if node.error is None else f'<pre>{text(node.error)}</pre>'}</td>"
        f"<td>{text(node.note or '')}</td></tr>"
        for node in trace
    )
    return f'<table id="trace">{head}<tbody>{rows}</tbody></table>'


def trace_html(report: ExecutionReport | None) -> str:
    """The run summary (`#run`) and `<table id="trace">`, one row per operator call."""
    if report is None:
        return '<p id="run" class="none">Not run yet.</p><table id="trace"></table>'
    summary = (
        f'<p id="run" class="{text(report.status)}">run <strong>{text(report.status)}</strong>: '
        f"{report.llm_calls} LLM calls, {report.tokens} tokens, {report.duration_s:.2f} s"
        f"{f', {report.cache_hits} cached' if report.cache_hits else ''}</p>"
    )
    if report.error:
        summary += f'<pre id="run-error" class="error">{text(report.error)}</pre>'
    if report.output is not None:
        summary += f'<pre id="output">{text(report.output)}</pre>'
    return summary + trace_table(report.trace)


def end_html(record: StoredWorkflow) -> str:
    end = record.state.end
    if end is None:
        return ""
    parts = [f'<section id="end"><h2>Ended: {text(end.reason)} (round {end.round})</h2>']
    if end.final_answer is not None:
        parts.append(f'<h3>Final answer</h3><pre id="final-answer">{text(end.final_answer)}</pre>')
    if end.final_code is not None:
        parts.append(f'<h3>Final code</h3><pre id="final-code">{text(end.final_code)}</pre>')
    if end.claimed_answer is not None:
        parts.append(f'<h3>Claimed answer (not scored)</h3><pre id="claimed-answer">{text(end.claimed_answer)}</pre>')
    return "".join(parts) + "</section>"


def canvas_fragment(record: StoredWorkflow) -> str:
    """The inner HTML of `<main id="canvas">`: what a live update swaps in."""
    state = record.state
    trace = state.last_execution.trace if state.last_execution else ()
    return (
        f"<h1>Workflow <code>{text(record.workflow_id)}</code></h1>"
        f'<p id="summary"><span class="status {text(state.status)}">{text(state.status)}</span> '
        f"round {state.rounds_used}/{state.options.max_rounds} · {text(state.task.task_type)} · "
        f"updated {text(stamp(record.updated_at))}</p>"
        f'<h2>Task</h2><pre id="task">{text(state.task.problem)}</pre>'
        f'<h2>Workflow</h2><pre id="dsl">{text(render(state.graph) or "(empty)")}</pre>'
        f'<div id="graph">{render_graph_svg(state.graph, trace)}</div>{pending_html(state.pending)}'
        f"{end_html(record)}"
        f"<h2>Last run</h2>{trace_html(state.last_execution)}"
        f'<h2>Feedback</h2><p id="feedback">{text(state.last_feedback)}</p>'
        f'<h2>History</h2><ol id="history">{history_html(state.history)}</ol>'
    )


def workflow_page(record: StoredWorkflow, base_path: str) -> str:
    body = (
        f'<main id="canvas" data-workflow-id="{text(record.workflow_id)}" '
        f'data-updated-at="{record.updated_at!r}">{canvas_fragment(record)}</main>'
    )
    return document(f"FlowSteer workflow {record.workflow_id}", body, base_path=base_path, page="workflow")


def missing_page(workflow_id: str, base_path: str) -> str:
    body = (
        f'<main id="missing"><h1>No workflow <code>{text(workflow_id)}</code></h1>'
        f'<p>It was deleted or never existed. <a href="{text(base_path)}/">All workflows</a></p></main>'
    )
    return document("FlowSteer: no such workflow", body, base_path=base_path, page="missing")
