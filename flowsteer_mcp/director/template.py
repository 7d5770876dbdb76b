"""The `template` baseline: a fixed workflow per task type, built through the same MCP tools a policy uses.

Honest comparison point for learned directors: no decisions are made per task. The workflow is built with the
typed tools (execution deferred to the end), run once, and finished under the relaxed gate.
"""

from __future__ import annotations

import time
from typing import Any

from mcp import Client
from pydantic import BaseModel

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult
from flowsteer_mcp.director.finalize import add_usage, collect
from flowsteer_mcp.director.link import CanvasCallError, CanvasLink


class TemplateStage(BaseModel):
    """Arguments of one typed tool call (`add_operator` or `add_structure`)."""

    tool: str
    arguments: dict[str, Any]


def _op(name: str, prompt: str) -> TemplateStage:
    return TemplateStage(tool="add_operator", arguments={"operator": name, "prompt": prompt})


def _check(condition: str, on_fail: str, prompts: list[str]) -> TemplateStage:
    return TemplateStage(
        tool="add_structure",
        arguments={"structure": "conditional", "condition": condition, "on_fail": on_fail, "prompts": prompts},
    )


def _parallel(operators: list[str], prompts: list[str]) -> TemplateStage:
    return TemplateStage(
        tool="add_structure", arguments={"structure": "parallel", "operators": operators, "prompts": prompts}
    )


TEMPLATES: dict[str, list[TemplateStage]] = {
    "math": [
        _op("Plan", "List the quantities and the steps needed to compute the answer; do not compute it."),
        _parallel(
            ["Programmer", "Custom"],
            ["Compute the answer exactly in solve() and return it.", "Reason step by step and state the final number."],
        ),
        _op("ScEnsemble", "Choose the answer most candidates agree on."),
        _check(
            "Verify",
            "Revise",
            ["Solve independently and compare with the answer.", "Correct the answer using the check's feedback."],
        ),
        _op("Format", "Output only the final number."),
    ],
    "code": [
        _op("Plan", "Outline the algorithm in a few short steps and name the edge cases; no code."),
        _op("Programmer", "Write the complete function with the exact signature."),
        _check(
            "Test",
            "Revise",
            ["Run the public tests.", "Fix the function so the failing tests pass; keep the signature."],
        ),
    ],
    "qa": [
        _op("Custom", "Answer the question from the given information in a few words."),
        _check("Review", "Revise", ["Check that the answer is supported and short.", "Give a corrected short answer."]),
        _op("Format", "Output only the short answer span."),
    ],
    "general": [
        _op("Plan", "Outline how to answer this task in a few steps."),
        _op("Custom", "Answer the task following the plan."),
        _check("Review", "Revise", ["Check the answer for errors.", "Fix the answer using the review."]),
        _op("Format", "Output only the final answer."),
    ],
}


def template_dsl(task_type: str) -> str:
    """The DSL a template builds (for reports and docs)."""
    from flowsteer_mcp.canvas.blueprint import (
        ConditionalBlueprint,
        OperatorBlueprint,
        ParallelBlueprint,
        StageBlueprint,
        build_stage,
    )
    from flowsteer_mcp.canvas.dsl import render_stage

    parts = []
    for stage in TEMPLATES[task_type]:
        args = stage.arguments
        blueprint: StageBlueprint
        if stage.tool == "add_operator":
            blueprint = OperatorBlueprint(operator=args["operator"])
        elif args["structure"] == "parallel":
            blueprint = ParallelBlueprint(operators=args["operators"])
        else:
            blueprint = ConditionalBlueprint(check=args["condition"], on_fail=args["on_fail"])
        parts.append(render_stage(build_stage(blueprint, 1)))
    return " -> ".join(parts)


class TemplateDirector:
    name = "template"

    def __init__(self, templates: dict[str, list[TemplateStage]] | None = None) -> None:
        self.templates = templates or TEMPLATES

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        started = time.monotonic()
        link = CanvasLink(client)
        result = EpisodeResult(director=self.name, task=task)
        stages = self.templates[task.task_type]
        options = {"finish": "relaxed", "execute_each_step": False, "max_rounds": len(stages) + 2}
        try:
            created = await link.create(task, options)
            workflow_id = created["workflow_id"]
            for stage in stages:
                await link.call(stage.tool, workflow_id=workflow_id, **stage.arguments)
            step = await link.call("finish", workflow_id=workflow_id)
            result = add_usage(result, step)
            result = await collect(link, workflow_id, result)
        except CanvasCallError as error:
            result = result.model_copy(update={"error": str(error)})
        return result.model_copy(update={"wall_s": time.monotonic() - started})
