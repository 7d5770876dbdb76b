"""The feedback text a policy sees after each step: compact, stable, one fact per bracketed line."""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import AnswerEvidence, ExecutionReport
from flowsteer_mcp.canvas.hints import Hint
from flowsteer_mcp.canvas.step import NodeView, PromptRequest, StateView

OUTPUT_PREVIEW_CHARS = 500
PROMPT_PREVIEW_CHARS = 60


def _preview(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def render_nodes(nodes: list[NodeView]) -> str:
    if not nodes:
        return "(none)"
    parts = []
    for node in nodes:
        label = node.operator if node.kind == "operator" else node.kind + (f" x{node.count}" if node.count else "")
        where = f" in {node.parent} ({node.slot})" if node.parent else ""
        prompt = f' "{_preview(node.prompt, PROMPT_PREVIEW_CHARS)}"' if node.prompt else ""
        parts.append(f"{node.id}: {label}{where}{prompt}")
    return "; ".join(parts)


# What agreeing candidates share (`AnswerEvidence.agreement`), worded so that the count includes the answer.
AGREEMENT_WORDING = {
    "answer": "{agreeing} of {candidates} candidates give this answer",
    "behaviour": "{agreeing} of {candidates} candidates behave like this program",
    "program": "{agreeing} of {candidates} candidates are this same program",
}


def render_evidence(evidence: AnswerEvidence | None) -> list[str]:
    """The `[Evidence]` line: the answer's public-test score and the candidates' agreement, where the run
    established them; no line when it established neither (one greedy draw and no tests run)."""
    if evidence is None:
        return []
    parts = []
    total = evidence.public_tests_total
    if total:
        passed = evidence.public_tests_passed
        if passed is None:
            parts.append(f"the answer fails at least one of {total} public tests")
        else:
            parts.append(f"the answer passes {passed}/{total} public tests")
    if evidence.candidates and evidence.candidates > 1 and evidence.agreeing is not None:
        wording = AGREEMENT_WORDING[evidence.agreement or "answer"]
        parts.append(wording.format(agreeing=evidence.agreeing, candidates=evidence.candidates))
    return [f"[Evidence]: {'; '.join(parts)}"] if parts else []


def render_execution(report: ExecutionReport | None) -> list[str]:
    if report is None:
        return ["[Execution]: not run yet"]
    if report.status == "no_executor":
        return [f"[Execution]: {report.error}"]
    if report.status == "empty":
        return ["[Execution]: nothing to run (the workflow is empty)"]
    lines = [f"[Execution]: {report.status} ({report.llm_calls} LLM calls, {report.tokens} tokens)"]
    if report.output is not None:
        lines.append(f"[Output]: {_preview(report.output, OUTPUT_PREVIEW_CHARS)}")
        lines.extend(render_evidence(report.evidence))
    if report.error:
        lines.append(f"[Error]: {_preview(report.error, OUTPUT_PREVIEW_CHARS)}")
    failed = [t for t in report.trace if not t.ok and not t.skipped]
    for row in failed[:3]:
        lines.append(f"[Node Error]: {row.node_id} ({row.operator}): {_preview(row.error or 'failed', 200)}")
    verdicts = [t for t in report.trace if t.verdict is not None]
    if verdicts:
        last = verdicts[-1]
        lines.append(f"[Last Check]: {last.node_id} ({last.operator}) {'passed' if last.verdict else 'failed'}")
    return lines


def render_prompt_request(request: PromptRequest) -> str:
    return (
        f"[Prompt Request]: write the prompt for {request.node_id} ({request.operator}, {request.slot}; "
        f"prompt {request.index}/{request.total}). Your next message is used as that prompt (at least a sentence "
        "on how this operator should handle the problem); <action>cancel</action> abandons the edit."
    )


def render_feedback(
    *,
    ok: bool,
    message: str,
    state: StateView,
    execution: ExecutionReport | None,
    hint: Hint | None,
    status_label: str | None = None,
    lenient: bool = False,
) -> str:
    status = status_label or ("Success" if ok else "Failed")
    lines = ["<feedback>", f"[Status]: {status}", f"[Message]: {message}"]
    if lenient:
        lines.append("[Parser]: lenient fallback used; write explicit <action> tags")
    if hint is not None:
        lines.append(hint.render())
    if state.awaiting_prompt_for is not None:
        lines.append(render_prompt_request(state.awaiting_prompt_for))
    lines.append(f"[DSL]: {state.dsl or '(empty)'}")
    lines.append(f"[Nodes]: {render_nodes(state.nodes)}")
    stats = state.stats
    structures = stats.structures
    lines.append(
        f"[Statistics]: {stats.total_operators} operators, {stats.unique_types} unique types, "
        f"structures: {', '.join(structures) or 'none'}"
    )
    lines.extend(render_execution(execution))
    lines.append(f"[Round]: {state.round}/{state.max_rounds}")
    lines.append("</feedback>")
    return "\n".join(lines)
