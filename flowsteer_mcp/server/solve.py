"""`solve`: one call from a task to an answer, through the canvas, with the measured library workflow.

Why: an assistant that wants an answer should not need a dozen calls and our DSL. `solve` builds the library
workflow for the task type (its measured default, or the one named), runs it once under the relaxed finish
gate, and returns the answer with the workflow, a per-node trace summary, the usage and the workflow's
published measurements, so the caller knows what accuracy and cost to expect. The workflow stays on the
canvas (`workflow_id`): get_workflow shows it whole, and an assistant can keep editing it in a new episode.

It is as long as the run: call it through `start_job` or as an MCP task when the client times out early.

`director="policy"` lets a learned Flow-Director design the workflow instead: the policy endpoint the server
was started with (server/policy.py) drives a fresh canvas turn by turn, through the same `act` the tool offers,
until it finishes or runs out of rounds, and the result has the same shape plus the director's turns and
tokens. One tool with a `director` argument rather than a second tool: the same question (a task in, an answer
out), the same result, job/task wrapping, annotations and tool filters, and one tool fewer for clients that cap
the tool count. Without a configured policy the call is refused with the flag to pass, and changes nothing.
"""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from openai import AsyncOpenAI
from pydantic import BaseModel, Field

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.canvas.text import clip
from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.measured import Measurement, measurements_of
from flowsteer_mcp.director.policy import PolicyDirector
from flowsteer_mcp.server.arguments import EntryPoint, Name, PublicTests, TaskText
from flowsteer_mcp.server.kit_link import KitLink
from flowsteer_mcp.server.results import WorkflowOptionsInput
from flowsteer_mcp.server.toolkit import DESTRUCTIVE_AND_RUNS, TaskTypeInput, ToolEntry, ToolKit, kit_of
from flowsteer_mcp.server.tools import library_entry

TRACE_TEXT_CHARS = 200
# Built without per-step runs; finish is the one round used and makes the one run (the spare round is slack).
SOLVE_ROUNDS = 2
# The policy's canvas: the round budget of `flowsteer solve`, and the relaxed gate of the library path and of
# `make demo DIRECTOR=policy` (the director decides when the workflow is done).
POLICY_OPTIONS = WorkflowOptionsInput(max_rounds=20, finish="relaxed")


class TraceRow(BaseModel):
    node_id: str
    operator: str
    ok: bool
    verdict: bool | None = Field(description="a checker's verdict (true: passed); null for other operators")
    skipped: bool = Field(description="not run (e.g. the branch a conditional did not take)")
    llm_calls: int
    tokens: int
    latency_s: float
    note: str | None = Field(description="why the engine decided what it did here (draw, branch, selection)")
    text: str = Field(description="the node's output, or its error, cut to 200 characters")


class Usage(BaseModel):
    llm_calls: int = Field(description="executor requests of the run")
    tokens: int = Field(description="executor tokens of the run (prompt + completion)")
    duration_s: float = Field(description="wall time of the run (policy: of the whole episode)")
    director_tokens: int = Field(default=0, description="policy: the Flow-Director's own tokens (prompt + completion)")


class SolveResult(BaseModel):
    workflow_id: str = Field(description="the workflow on the canvas: get_workflow shows it, with the full trace")
    director: Literal["library", "policy"] = Field(
        description="who built the workflow: the measured library, or the server's Flow-Director policy"
    )
    workflow: str = Field(description="the library workflow's name; policy: the policy's served model name")
    dsl: str = Field(description="the workflow that ran")
    task_type: str = Field(description="math, code, qa or general")
    answer: str | None = Field(description="the final answer (a program for code tasks); null when the run gave none")
    status: str = Field(description="the run: ok, degraded (an earlier stage's answer), failed, timeout, no_executor")
    error: str | None = Field(description="what went wrong, when something did")
    usage: Usage
    trace: list[TraceRow] = Field(description="one row per operator call, in execution order")
    measured: list[Measurement] = Field(
        description="this workflow's published measurements (what to expect); empty for a policy's workflow"
    )
    turns: int | None = Field(default=None, description="policy: the director's turns (rounds used); null otherwise")


def trace_rows(trace: list[NodeTrace]) -> list[TraceRow]:
    return [
        TraceRow(
            node_id=row.node_id,
            operator=row.operator,
            ok=row.ok,
            verdict=row.verdict,
            skipped=row.skipped,
            llm_calls=row.llm_calls,
            tokens=row.tokens,
            latency_s=round(row.latency_s, 3),
            note=row.note,
            text=clip(" ".join((row.output if row.ok else row.error or "").split()), TRACE_TEXT_CHARS),
        )
        for row in trace
    ]


async def solve(
    task: Annotated[TaskText, Field(description="the problem to solve")],
    ctx: Context,
    task_type: Annotated[TaskTypeInput, Field(description="math, code, qa, general, or auto")] = "auto",
    entry_point: Annotated[EntryPoint | None, Field(description="code tasks: the function to implement")] = None,
    public_tests: Annotated[PublicTests | None, Field(description="code tasks: tests visible to the workflow")] = None,
    workflow: Annotated[
        Name | None, Field(description="a library workflow (list_library); omitted: the task type's default")
    ] = None,
    director: Annotated[
        Literal["library", "policy"],
        Field(
            description="library: the measured library workflow; policy: the server's Flow-Director designs "
            "the workflow turn by turn (needs a server started with --policy-url or --serve-director)"
        ),
    ] = "library",
) -> SolveResult:
    """Solve a task in one call: build the task type's best measured workflow (or the named one; or, with
    director='policy', let the server's Flow-Director design one), run it, and return the answer with the
    workflow, a trace summary, usage and the workflow's measurements.
    Takes as long as the run: use start_job or an MCP task if your client times out early."""
    kit = kit_of(ctx)
    spec = kit.task_from(task, task_type, entry_point, public_tests)
    if director == "policy":
        if workflow is not None:
            raise ToolError("workflow names a library workflow; leave it out with director='policy'.")
        return await _policy_solve(kit, spec, ctx)
    return await _library_solve(kit, spec, workflow or "default", ctx)


def solve_tools() -> list[ToolEntry]:
    """`solve`'s row of the server's registration table."""
    return [ToolEntry(solve, "Solve a task (library workflow, one call)", DESTRUCTIVE_AND_RUNS)]


async def _library_solve(kit: ToolKit, spec: TaskSpec, workflow: str, ctx: Context) -> SolveResult:
    entry = library_entry(spec.task_type, workflow)
    options = CanvasOptions(
        finish="relaxed", execute_each_step=False, max_rounds=SOLVE_ROUNDS, limits=kit.settings.limits
    )
    state = CanvasState(task=spec, options=options)
    state.graph = kit.imported(entry.spec(), "json", state)
    workflow_id = await kit.create(state)
    async with kit.working(workflow_id, ctx, "solve") as (canvas, progress):
        step = await canvas.finish(None, progress)
        report = canvas.state.last_execution
    assert report is not None, "a relaxed finish of a non-empty workflow runs it"
    return SolveResult(
        workflow_id=workflow_id,
        director="library",
        workflow=entry.name,
        dsl=step.state.dsl,
        task_type=spec.task_type,
        answer=step.final_answer,
        status=report.status,
        error=report.error,
        usage=Usage(llm_calls=report.llm_calls, tokens=report.tokens, duration_s=round(report.duration_s, 3)),
        trace=trace_rows(report.trace),
        measured=measurements_of(spec.task_type, entry.name),
    )


async def _policy_solve(kit: ToolKit, spec: TaskSpec, ctx: Context) -> SolveResult:
    endpoint = kit.policy.endpoint()  # refused before anything is created when no policy is configured
    shipped = kit.policy.shipped if kit.policy.fixed is None else None
    # the shipped director plays the game on its card (its training run's canvas options and observations)
    given = (
        POLICY_OPTIONS
        if shipped is None
        else WorkflowOptionsInput.model_validate({**POLICY_OPTIONS.model_dump(), **shipped.card.play.canvas})
    )
    options = kit.options_from(given)
    link = KitLink(kit, ctx, options)
    async with AsyncOpenAI(base_url=endpoint.url, api_key="not-needed", max_retries=2) as client:
        director = (
            PolicyDirector(
                client, endpoint.model, sampling=PolicySampling(), observer=kit.observer, registry=kit.registry
            )
            if shipped is None
            else shipped.director(client, endpoint.model, registry=kit.registry)
        )
        episode = await director.drive(spec, link)
    if link.workflow_id is None:  # the canvas was never created: nothing to report but the reason
        raise ToolError(episode.error or "the Flow-Director's workflow could not be created")
    async with kit.opened(link.workflow_id, write=False) as canvas:
        report = canvas.state.last_execution
    return SolveResult(
        workflow_id=link.workflow_id,
        director="policy",
        workflow=endpoint.model,
        dsl=episode.dsl,
        task_type=spec.task_type,
        answer=episode.answer,
        status=report.status if report is not None else "failed",
        error=episode.error
        or (report.error if report is not None else "the Flow-Director ended without a workflow that ran"),
        usage=Usage(
            llm_calls=episode.llm_calls,
            tokens=episode.tokens,
            duration_s=round(episode.wall_s, 3),
            director_tokens=episode.policy_tokens,
        ),
        trace=trace_rows(report.trace) if report is not None else [],
        measured=[],
        turns=episode.turns,
    )
