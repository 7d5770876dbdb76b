"""MCP tools: a thin translation between tool calls and the canvas core.

Agent mistakes (unknown ids, invalid edits, wrong state) raise ToolError with the canvas's actionable message
and leave the workflow unchanged. `act` is the exception by design: an unparseable or invalid turn is a normal
result (ok=false, one round used), because for a policy a wasted turn is part of the episode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar, get_args

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, ModifyNode, SetPrompt
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint, StageBlueprint
from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.execution import ProgressCallback
from flowsteer_mcp.canvas.export import export_workflow as render_export
from flowsteer_mcp.canvas.export import import_dsl, import_json
from flowsteer_mcp.canvas.kinds import KINDS, STRUCTURES, StructureKindName
from flowsteer_mcp.canvas.kinds.base import StructureArgs, StructureArgsError
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec, TaskType
from flowsteer_mcp.canvas.session import Canvas, CanvasState, execution_view
from flowsteer_mcp.canvas.step import StepResult
from flowsteer_mcp.canvas.validate import CanvasRules, validate_options, validate_task
from flowsteer_mcp.server.activity import JOB_ACTIVITY
from flowsteer_mcp.server.arguments import (
    ActText,
    AnswerText,
    EntryPoint,
    ImportSpec,
    Name,
    PromptText,
    PublicTests,
    StageOperators,
    StagePrompts,
    TaskText,
)
from flowsteer_mcp.server.errors import ToolArguments, ToolCallErrors
from flowsteer_mcp.server.jobs import JobBoard, busy_message
from flowsteer_mcp.server.progress import tool_progress
from flowsteer_mcp.server.results import (
    CreatedWorkflow,
    Deleted,
    ExportResult,
    OperatorCatalog,
    OperatorInfo,
    RunResult,
    WorkflowDetail,
    WorkflowList,
    WorkflowOptionsInput,
    WorkflowStep,
    WorkflowSummary,
)
from flowsteer_mcp.server.settings import ServerSettings
from flowsteer_mcp.server.workbench import Workbench, WorkbenchFull, WorkflowNotFound, WorkflowNotSaved

WorkflowId = Annotated[str, Field(min_length=1, max_length=64, description="handle returned by create_workflow")]
NodeId = Annotated[str, Field(min_length=1, max_length=64, description="a node id such as node_3 or node_2_p0")]
OperatorName = Annotated[str, Field(min_length=1, max_length=64, description="an operator name from list_operators")]
TaskTypeInput = Literal["auto", "math", "code", "qa", "general"]
_STRUCTURE_KINDS_DOC = "the kind of stage: " + "; ".join(f"{kind.name}: {kind.summary}" for kind in STRUCTURES)

ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])

# Annotations, decided per tool. Open world means the call may reach something outside this server: every
# tool that can execute the workflow calls the configured executor LLM (an external service whose answers the
# server does not control), so it is open world; tools that only read or write the server's own workflow
# store are closed. Destructive means the call may overwrite or remove something (a node, an operator, a
# prompt, a whole workflow, the chance to edit a finished episode); additive edits are not destructive.
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
CREATES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
ADDS_AND_RUNS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)
DESTRUCTIVE_AND_RUNS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True
)
# set_prompt overwrites the previous prompt; idempotent (docs/design/canvas.md, "Actions"): the same call
# again leaves the same graph (it still counts a round, like every edit).
OVERWRITES_AND_RUNS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True
)
# run_workflow changes no graph, round or status: it only replaces the recorded last run with a fresh one.
RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def infer_task_type(task_type: str, entry_point: str | None, public_tests: str | None) -> TaskType:
    """'auto' means code when the task names an entry point or tests, else general (no regex guessing)."""
    for known in get_args(TaskType):
        if task_type == known:
            return known
    return "code" if entry_point or public_tests else "general"


def register_tools(
    server: MCPServer, bench: Workbench, jobs: JobBoard, settings: ServerSettings, observer: ObservationBuilder
) -> ToolArguments:
    registry = bench.registry
    arguments = ToolArguments()
    server.middleware.append(ToolCallErrors(server, arguments))

    def tool(title: str, annotations: ToolAnnotations) -> Callable[[ToolFn], ToolFn]:
        """`@server.tool` with a human title, and the argument model kept for short validation messages."""

        def register(fn: ToolFn) -> ToolFn:
            arguments.learn(fn)
            return server.tool(title=title, annotations=annotations)(fn)

        return register

    def options_from(given: WorkflowOptionsInput | None) -> CanvasOptions:
        given = given or WorkflowOptionsInput()
        if given.max_rounds > settings.max_rounds_cap:
            raise ToolError(f"max_rounds {given.max_rounds} exceeds this server's cap of {settings.max_rounds_cap}.")
        try:  # operator names checked against the library, and a finish gate some workflow can pass
            return validate_options(registry, CanvasOptions(**given.model_dump(), limits=settings.limits))
        except CanvasError as error:
            raise ToolError(f"{error.code.value}: {error.message}") from None

    def task_from(task: str, task_type: TaskTypeInput, entry_point: str | None, public_tests: str | None) -> TaskSpec:
        if not task.strip():
            raise ToolError("task is empty: pass the problem statement the workflow should solve.")
        if len(task) > settings.max_task_chars:
            raise ToolError(f"task is {len(task)} characters; this server accepts at most {settings.max_task_chars}.")
        entry_point, public_tests = entry_point or None, public_tests or None
        try:
            validate_task(settings.limits, problem=task, entry_point=entry_point, public_tests=public_tests)
        except CanvasError as error:
            raise ToolError(f"{error.code.value}: {error.message}") from None
        kind = infer_task_type(task_type, entry_point, public_tests)
        return TaskSpec(problem=task, task_type=kind, entry_point=entry_point, public_tests=public_tests)

    @asynccontextmanager
    async def opened(workflow_id: str, *, write: bool = True) -> AsyncIterator[Canvas]:
        busy = jobs.running_on(workflow_id) if write else None
        if busy is not None and JOB_ACTIVITY.get() is not busy.activity:  # never queue minutes behind a job
            raise ToolError(busy_message(workflow_id, busy))
        try:
            async with bench.open(workflow_id, write=write) as canvas:
                yield canvas
        except WorkflowNotFound:
            raise ToolError(
                f"Unknown workflow_id {workflow_id!r} (never created, deleted, or expired). "
                "Create one with create_workflow; list_workflows shows the live ones."
            ) from None
        except CanvasError as error:
            raise ToolError(f"{error.code.value}: {error.message}") from None
        except WorkflowNotSaved as error:
            raise ToolError(str(error)) from None

    @asynccontextmanager
    async def working(workflow_id: str, ctx: Context, phase: str) -> AsyncIterator[tuple[Canvas, ProgressCallback]]:
        """The workflow opened for a step that may run it, with progress (and a heartbeat) for the caller."""
        async with (
            tool_progress(ctx.report_progress, phase, settings.progress_interval_s) as progress,
            opened(workflow_id) as canvas,
        ):
            yield canvas, progress

    def step(workflow_id: str, result: StepResult) -> WorkflowStep:
        return WorkflowStep(workflow_id=workflow_id, **result.model_dump())

    async def created(state: CanvasState, message: str) -> CreatedWorkflow:
        try:
            workflow_id, canvas = await bench.create(state)
        except (WorkbenchFull, WorkflowNotSaved) as error:
            raise ToolError(str(error)) from None
        view = canvas.view()
        feedback = canvas.feedback(message)
        return CreatedWorkflow(
            workflow_id=workflow_id,
            ok=True,
            message=message,
            feedback=feedback,
            state=view,
            execution=execution_view(canvas.state.last_execution),
            system_prompt=observer.system_prompt(registry, state.options.finish_policy()),
            observation=observer.turn(state.task, view, None),
        )

    @tool("Create workflow", CREATES)
    async def create_workflow(
        task: Annotated[TaskText, Field(description="the problem the workflow must solve")],
        task_type: Annotated[TaskTypeInput, Field(description="math, code, qa, general, or auto")] = "auto",
        entry_point: Annotated[EntryPoint | None, Field(description="code tasks: the function to implement")] = None,
        public_tests: Annotated[
            PublicTests | None, Field(description="code tasks: tests visible to the workflow")
        ] = None,
        options: WorkflowOptionsInput | None = None,
    ) -> CreatedWorkflow:
        """Create a new empty workflow canvas for a task; returns its workflow_id, state and first observation."""
        state = CanvasState(task=task_from(task, task_type, entry_point, public_tests), options=options_from(options))
        return await created(state, "Workflow created. Add operators (act or the typed tools), then finish.")

    @tool("Act: one Flow-Director turn", DESTRUCTIVE_AND_RUNS)
    async def act(
        workflow_id: WorkflowId,
        text: Annotated[
            ActText, Field(description="one Flow-Director turn in the tag dialect, or a prompt text when asked")
        ],
        ctx: Context,
    ) -> WorkflowStep:
        """Apply one Flow-Director turn (e.g. <action>add</action><operator>Plan</operator>); costs one round."""
        async with working(workflow_id, ctx, "act") as (canvas, progress):
            return step(workflow_id, await canvas.act(text, progress))

    @tool("Add operator", ADDS_AND_RUNS)
    async def add_operator(
        workflow_id: WorkflowId,
        operator: OperatorName,
        ctx: Context,
        prompt: Annotated[PromptText | None, Field(description="custom instruction for this node")] = None,
        position: Annotated[int | None, Field(description="0-based stage index; default appends")] = None,
        samples: Annotated[
            int, Field(description="draws (1-16): the first greedy, the rest sampled; candidates for the next stage")
        ] = 1,
    ) -> WorkflowStep:
        """Add one operator stage (appended, or inserted at `position`)."""
        blueprint = OperatorBlueprint(operator=operator, prompt=prompt, samples=samples)
        async with working(workflow_id, ctx, "add_operator") as (canvas, progress):
            return step(workflow_id, await canvas.edit(AddStage(stage=blueprint, position=position), progress))

    @tool(f"Add structure ({', '.join(kind.name for kind in STRUCTURES)})", ADDS_AND_RUNS)
    async def add_structure(
        workflow_id: WorkflowId,
        structure: Annotated[StructureKindName, Field(description=_STRUCTURE_KINDS_DOC)],
        ctx: Context,
        operators: Annotated[
            StageOperators | None, Field(description="parallel branches, loop body, or fallback [attempt, fallback]")
        ] = None,
        condition: Annotated[Name | None, Field(description="conditional: the checker (Verify, Test, Review)")] = None,
        on_fail: Annotated[Name | None, Field(description="conditional: run when the check FAILS")] = None,
        on_pass: Annotated[
            Name | None, Field(description="conditional: run when the check passes; omit for done")
        ] = None,
        count: Annotated[int | None, Field(description="loop: maximum iterations (1-10)")] = None,
        prompts: Annotated[StagePrompts | None, Field(description="one prompt per operator, in order")] = None,
        position: Annotated[int | None, Field(description="0-based stage index; default appends")] = None,
    ) -> WorkflowStep:
        """Add a parallel, conditional (`condition ? on_fail : on_pass|done`), loop or fallback (`A ?? B`: B runs
        only when A fails or gives no answer) stage."""
        args = StructureArgs(
            operators=operators, condition=condition, on_fail=on_fail, on_pass=on_pass, count=count, prompts=prompts
        )
        blueprint = _structure_blueprint(structure, args)
        async with working(workflow_id, ctx, "add_structure") as (canvas, progress):
            return step(workflow_id, await canvas.edit(AddStage(stage=blueprint, position=position), progress))

    @tool("Delete node", DESTRUCTIVE_AND_RUNS)
    async def delete_node(
        workflow_id: WorkflowId,
        node_id: NodeId,
        ctx: Context,
        with_parent: Annotated[bool, Field(description="deleting a child removes its whole stage")] = False,
    ) -> WorkflowStep:
        """Delete a stage, or a child node when its structure stays valid."""
        async with working(workflow_id, ctx, "delete_node") as (canvas, progress):
            action = DeleteNode(node_id=node_id, with_parent=with_parent)
            return step(workflow_id, await canvas.edit(action, progress))

    @tool("Modify node (replace its operator)", DESTRUCTIVE_AND_RUNS)
    async def modify_node(
        workflow_id: WorkflowId,
        node_id: NodeId,
        operator: OperatorName,
        ctx: Context,
        prompt: Annotated[PromptText | None, Field(description="new instruction; omitted = operator default")] = None,
        samples: Annotated[
            int | None, Field(description="draws of this node (1-16, omitted = 1); see add_operator")
        ] = None,
    ) -> WorkflowStep:
        """Replace the operator of a node (top-level or inside a structure); its id stays the same."""
        async with working(workflow_id, ctx, "modify_node") as (canvas, progress):
            action = ModifyNode(node_id=node_id, operator=operator, prompt=prompt, samples=samples)
            return step(workflow_id, await canvas.edit(action, progress))

    @tool("Set node prompt", OVERWRITES_AND_RUNS)
    async def set_prompt(
        workflow_id: WorkflowId,
        node_id: NodeId,
        prompt: Annotated[PromptText, Field(description="the node's custom instruction")],
        ctx: Context,
    ) -> WorkflowStep:
        """Set the custom prompt (instruction) of an operator node."""
        async with working(workflow_id, ctx, "set_prompt") as (canvas, progress):
            return step(workflow_id, await canvas.edit(SetPrompt(node_id=node_id, prompt=prompt), progress))

    @tool("Run workflow", RUNS)
    async def run_workflow(workflow_id: WorkflowId, ctx: Context) -> RunResult:
        """Execute the workflow now (progress notifications per node); no round is used."""
        async with working(workflow_id, ctx, "run_workflow") as (canvas, progress):
            report = await canvas.run(progress)
        view = execution_view(report, fresh=True)
        assert view is not None
        return RunResult(workflow_id=workflow_id, execution=view, trace=report.trace)

    @tool("Finish workflow", DESTRUCTIVE_AND_RUNS)
    async def finish(
        workflow_id: WorkflowId,
        ctx: Context,
        answer: Annotated[
            AnswerText | None,
            Field(description="optional claimed answer (recorded; the executed output is the answer)"),
        ] = None,
    ) -> WorkflowStep:
        """Ask to finish: the finish gate accepts or names the unmet constraint (a rejection costs a round)."""
        async with working(workflow_id, ctx, "finish") as (canvas, progress):
            return step(workflow_id, await canvas.finish(answer, progress))

    @tool("Get workflow", READ_ONLY)
    async def get_workflow(workflow_id: WorkflowId) -> WorkflowDetail:
        """Read the full state: graph, DSL, stats, last result, round, status."""
        async with opened(workflow_id, write=False) as canvas:
            return detail_of(workflow_id, canvas)

    @tool("List operators", READ_ONLY)
    async def list_operators() -> OperatorCatalog:
        """The operator library (names, categories, roles, what each does and when to use it)."""
        return catalog_of(bench)

    @tool("Export workflow", READ_ONLY)
    async def export_workflow(
        workflow_id: WorkflowId,
        format: Annotated[
            Literal["json", "dsl", "mermaid"], Field(description="json (round-trippable), dsl, mermaid")
        ] = "json",
    ) -> ExportResult:
        """Export the workflow as canonical JSON, DSL text or a Mermaid flowchart."""
        async with opened(workflow_id, write=False) as canvas:
            return ExportResult(
                workflow_id=workflow_id, format=format, content=render_export(canvas.state.graph, format)
            )

    @tool("Import workflow", CREATES)
    async def import_workflow(
        spec: Annotated[ImportSpec, Field(description="a JSON export or a DSL string")],
        task: Annotated[TaskText, Field(description="the problem the imported workflow is for")],
        format: Annotated[Literal["auto", "json", "dsl"], Field(description="auto detects JSON vs DSL")] = "auto",
        task_type: TaskTypeInput = "auto",
        entry_point: EntryPoint | None = None,
        public_tests: PublicTests | None = None,
        options: WorkflowOptionsInput | None = None,
    ) -> CreatedWorkflow:
        """Create a workflow from a JSON export or a DSL string (validated like any edit)."""
        if len(spec) > settings.max_import_chars:
            raise ToolError(f"spec is {len(spec)} characters; the limit is {settings.max_import_chars}.")
        state = CanvasState(task=task_from(task, task_type, entry_point, public_tests), options=options_from(options))
        rules = CanvasRules(registry, state.options)
        kind = format if format != "auto" else ("json" if spec.lstrip().startswith("{") else "dsl")

        def parse() -> WorkflowGraph:
            return import_json(spec, rules) if kind == "json" else import_dsl(spec, rules)

        try:  # in a worker thread: a big spec must not stall the other clients of this server
            state.graph = await anyio.to_thread.run_sync(parse)
        except CanvasError as error:
            raise ToolError(f"{error.code.value}: {error.message}") from None
        return await created(state, f"Workflow imported from {kind}.")

    @tool("Delete workflow", DELETES)
    async def delete_workflow(workflow_id: WorkflowId) -> Deleted:
        """Delete a workflow and its stored state."""
        if not await bench.delete(workflow_id):
            raise ToolError(f"Unknown workflow_id {workflow_id!r}; list_workflows shows the live ones.")
        return Deleted(workflow_id=workflow_id, deleted=True)

    @tool("List workflows", READ_ONLY)
    async def list_workflows() -> WorkflowList:
        """The workflows this server holds, with status and current DSL."""
        records = await bench.list()
        summaries = []
        for record in records:
            canvas = Canvas(record.state, registry)
            view = canvas.view()
            summaries.append(
                WorkflowSummary(
                    workflow_id=record.workflow_id,
                    task_preview=record.state.task.problem[:120],
                    task_type=record.state.task.task_type,
                    status=view.status,
                    round=view.round,
                    max_rounds=view.max_rounds,
                    dsl=view.dsl,
                )
            )
        return WorkflowList(workflows=summaries)

    return arguments


def detail_of(workflow_id: str, canvas: Canvas) -> WorkflowDetail:
    state = canvas.state
    report = state.last_execution
    view = execution_view(report)
    return WorkflowDetail(
        workflow_id=workflow_id,
        task=state.task,
        options=state.options.model_dump(mode="json"),
        graph=state.graph.model_dump(mode="json"),
        state=canvas.view(),
        last_execution=RunResult(workflow_id=workflow_id, execution=view, trace=report.trace)
        if report and view
        else None,
        end=state.end,
        last_feedback=state.last_feedback,
        history_length=len(state.history),
    )


def catalog_of(bench: Workbench) -> OperatorCatalog:
    return OperatorCatalog(
        operators=[
            OperatorInfo(
                name=s.name,
                category=s.category.value,
                role=s.role.value,
                summary=s.summary,
                when_to_use=s.when_to_use,
                signature=s.signature,
                accepts_prompt=s.accepts_prompt,
                legacy=s.legacy,
            )
            for s in bench.registry.specs()
        ]
    )


def _structure_blueprint(structure: str, args: StructureArgs) -> StageBlueprint:
    try:
        blueprint: StageBlueprint = KINDS[structure].from_tool(args)
    except StructureArgsError as error:
        raise ToolError(str(error)) from None
    return blueprint
