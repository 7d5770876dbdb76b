"""Collect an episode's outcome from the canvas (through MCP): final answer, DSL, stats and trace."""

from __future__ import annotations

from typing import Any

from flowsteer_mcp.director.episode import EpisodeResult
from flowsteer_mcp.director.link import CanvasCalls


async def collect(link: CanvasCalls, workflow_id: str, result: EpisodeResult) -> EpisodeResult:
    detail = await link.call("get_workflow", workflow_id=workflow_id)
    end: dict[str, Any] = detail.get("end") or {}
    state = detail["state"]
    last = detail.get("last_execution") or {}
    code_task = result.task.task_type == "code"
    answer = (end.get("final_code") or end.get("final_answer")) if code_task else end.get("final_answer")
    execution = last.get("execution") or {}
    if not end:  # the episode did not end (e.g. an error mid-way): fall back to the last run's answer
        answer = execution.get("output") if execution.get("ok") else None  # ok: status ok or degraded
    error = result.error
    if answer is None and error is None and execution.get("error"):
        error = f"the final run produced no answer: {execution['error']}"
    return result.model_copy(
        update={
            "error": error,
            "workflow_id": workflow_id,
            "answer": answer,
            "dsl": state["dsl"],
            "finished": end.get("reason") == "finished",
            "end_reason": end.get("reason"),
            "turns": state["round"],
            "stats": state["stats"],
            "trace": last.get("trace", []),
        }
    )


def add_usage(result: EpisodeResult, step: dict[str, Any]) -> EpisodeResult:
    """Add a step's executor usage when the workflow actually ran during that step."""
    execution = step.get("execution") or {}
    if not execution.get("fresh"):
        return result
    return result.model_copy(
        update={
            "llm_calls": result.llm_calls + int(execution.get("llm_calls", 0)),
            "tokens": result.tokens + int(execution.get("tokens", 0)),
        }
    )
