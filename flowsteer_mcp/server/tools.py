"""MCP tools: a thin translation between tool calls and the canvas core.

Agent mistakes (unknown ids, invalid edits, wrong state) raise ToolError with the canvas's actionable message
and leave the workflow unchanged. `act` is the exception by design: an unparseable or invalid turn is a normal
result (ok=false, one round used), because for a policy a wasted turn is part of the episode.
"""

from __future__ import annotations

from typing import Annotated, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from flowsteer_mcp.canvas.actions import AddStage, DeleteNode, ModifyNode, SetPrompt
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint, StageBlueprint
from flowsteer_mcp.canvas.export import export_workflow as render_export
from flowsteer_mcp.canvas.kinds import KINDS, STRUCTURES, StructureKindName
from flowsteer_mcp.canvas.kinds.base import StructureArgs, StructureArgsError
from flowsteer_mcp.canvas.session import Canvas, CanvasState, execution_view
from flowsteer_mcp.canvas.step import StepResult
from flowsteer_mcp.director.library import LibraryWorkflow, UnknownWorkflowError, library_workflow
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
from flowsteer_mcp.server.toolkit import (
    ADDS_AND_RUNS,
    CREATES,
    DELETES,
    DESTRUCTIVE_AND_RUNS,
    OVERWRITES_AND_RUNS,
    READ_ONLY,
    RUNS,
    TaskTypeInput,
    ToolKit,
)
from flowsteer_mcp.server.workbench import Workbench
from operators.stopping import StopRuleName

WorkflowId = Annotated[str, Field(min_length=1, max_length=64, description="handle returned by create_workflow")]
NodeId = Annotated[str, Field(min_length=1, max_length=64, description="a node id such as node_3 or node_2_p0")]
OperatorName = Annotated[str, Field(min_length=1, max_length=64, description="an operator name from list_operators")]

_STRUCTURE_KINDS_DOC = "the kind of stage: " + "; ".join(f"{kind.name}: {kind.summary}" for kind in STRUCTURES)


def register_tools(kit: ToolKit) -> None:
    """The canvas tools: create and import, the steps that edit and run a workflow, read and delete."""
    _register_creation(kit)
    _register_steps(kit)
    _register_additions(kit)
    _register_node_edits(kit)
    _register_views(kit)


def step_of(workflow_id: str, result: StepResult) -> WorkflowStep:
    return WorkflowStep(workflow_id=workflow_id, **result.model_dump())


def _register_creation(kit: ToolKit) -> None:
    """create_workflow (empty or from the library) and import_workflow."""
    tool = kit.tool

    @tool("Create workflow", CREATES)
    async def create_workflow(
        task: Annotated[TaskText, Field(description="the problem the workflow must solve")],
        task_type: Annotated[TaskTypeInput, Field(description="math, code, qa, general, or auto")] = "auto",
        entry_point: Annotated[EntryPoint | None, Field(description="code tasks: the function to implement")] = None,
        public_tests: Annotated[
            PublicTests | None, Field(description="code tasks: tests visible to the workflow")
        ] = None,
        options: WorkflowOptionsInput | None = None,
        library_workflow: Annotated[
            Name | None,
            Field(description="start from this library workflow (list_library), 'default' for the task type's best"),
        ] = None,
    ) -> CreatedWorkflow:
        """Create a workflow canvas for a task, empty or holding a library workflow (not run yet); returns its
        workflow_id, state and first observation."""
        task_spec = kit.task_from(task, task_type, entry_point, public_tests)
        state = CanvasState(task=task_spec, options=kit.options_from(options))
        if library_workflow is None:
            return await kit.created(state, "Workflow created. Add operators (act or the typed tools), then finish.")
        entry = library_entry(task_spec.task_type, library_workflow)
        state.graph = kit.imported(entry.spec(), "json", state)
        return await kit.created(state, f"Workflow created from the library's {entry.name}: {entry.dsl()}.")

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
        if len(spec) > kit.settings.max_import_chars:
            raise ToolError(f"spec is {len(spec)} characters; the limit is {kit.settings.max_import_chars}.")
        task_spec = kit.task_from(task, task_type, entry_point, public_tests)
        state = CanvasState(task=task_spec, options=kit.options_from(options))
        kind: Literal["json", "dsl"] = (
            format if format != "auto" else ("json" if spec.lstrip().startswith("{") else "dsl")
        )
        # in a worker thread: a big spec must not stall the other clients of this server
        state.graph = await anyio.to_thread.run_sync(kit.imported, spec, kind, state)
        return await kit.created(state, f"Workflow imported from {kind}.")


def _register_steps(kit: ToolKit) -> None:
    """act, run_workflow and finish: each opens the workflow, may run it and reports progress."""
    tool = kit.tool

    @tool("Act: one Flow-Director turn", DESTRUCTIVE_AND_RUNS)
    async def act(
        workflow_id: WorkflowId,
        text: Annotated[
            ActText, Field(description="one Flow-Director turn in the tag dialect, or a prompt text when asked")
        ],
        ctx: Context,
    ) -> WorkflowStep:
        """Apply one Flow-Director turn (e.g. <action>add</action><operator>Plan</operator>); costs one round."""
        async with kit.working(workflow_id, ctx, "act") as (canvas, progress):
            return step_of(workflow_id, await canvas.act(text, progress))

    @tool("Run workflow", RUNS)
    async def run_workflow(workflow_id: WorkflowId, ctx: Context) -> RunResult:
        """Execute the workflow now (progress notifications per node); no round is used."""
        async with kit.working(workflow_id, ctx, "run_workflow") as (canvas, progress):
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
        async with kit.working(workflow_id, ctx, "finish") as (canvas, progress):
            return step_of(workflow_id, await canvas.finish(answer, progress))


def _register_additions(kit: ToolKit) -> None:
    """The typed edits that add a stage: add_operator and add_structure."""
    tool = kit.tool

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
        until: Annotated[
            StopRuleName | None,
            Field(
                description="with samples > 1, stop drawing early: 'tests' when the greedy program passes the public "
                "tests, 'passes' after the first wave (1, 3, the rest) holding a program that passes them, 'vote' "
                "when the answers' vote is decisive"
            ),
        ] = None,
    ) -> WorkflowStep:
        """Add one operator stage (appended, or inserted at `position`)."""
        blueprint = OperatorBlueprint(operator=operator, prompt=prompt, samples=samples, until=until)
        async with kit.working(workflow_id, ctx, "add_operator") as (canvas, progress):
            return step_of(workflow_id, await canvas.edit(AddStage(stage=blueprint, position=position), progress))

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
        async with kit.working(workflow_id, ctx, "add_structure") as (canvas, progress):
            return step_of(workflow_id, await canvas.edit(AddStage(stage=blueprint, position=position), progress))


def _register_node_edits(kit: ToolKit) -> None:
    """The typed edits of one node: delete_node, modify_node, set_prompt."""
    tool = kit.tool

    @tool("Delete node", DESTRUCTIVE_AND_RUNS)
    async def delete_node(
        workflow_id: WorkflowId,
        node_id: NodeId,
        ctx: Context,
        with_parent: Annotated[bool, Field(description="deleting a child removes its whole stage")] = False,
    ) -> WorkflowStep:
        """Delete a stage, or a child node when its structure stays valid."""
        async with kit.working(workflow_id, ctx, "delete_node") as (canvas, progress):
            action = DeleteNode(node_id=node_id, with_parent=with_parent)
            return step_of(workflow_id, await canvas.edit(action, progress))

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
        async with kit.working(workflow_id, ctx, "modify_node") as (canvas, progress):
            action = ModifyNode(node_id=node_id, operator=operator, prompt=prompt, samples=samples)
            return step_of(workflow_id, await canvas.edit(action, progress))

    @tool("Set node prompt", OVERWRITES_AND_RUNS)
    async def set_prompt(
        workflow_id: WorkflowId,
        node_id: NodeId,
        prompt: Annotated[PromptText, Field(description="the node's custom instruction")],
        ctx: Context,
    ) -> WorkflowStep:
        """Set the custom prompt (instruction) of an operator node."""
        async with kit.working(workflow_id, ctx, "set_prompt") as (canvas, progress):
            return step_of(workflow_id, await canvas.edit(SetPrompt(node_id=node_id, prompt=prompt), progress))


def _register_views(kit: ToolKit) -> None:
    """The read-only views (get, list, export) and delete_workflow."""
    bench, registry, tool = kit.bench, kit.registry, kit.tool

    @tool("Get workflow", READ_ONLY)
    async def get_workflow(workflow_id: WorkflowId) -> WorkflowDetail:
        """Read the full state: graph, DSL, stats, last result, round, status."""
        async with kit.opened(workflow_id, write=False) as canvas:
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
        async with kit.opened(workflow_id, write=False) as canvas:
            return ExportResult(
                workflow_id=workflow_id, format=format, content=render_export(canvas.state.graph, format)
            )

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


def library_entry(task_type: str, name: str) -> LibraryWorkflow:
    """The library workflow `name` ('default': the task type's default) or a ToolError naming the valid ones."""
    try:
        return library_workflow(task_type, None if name == "default" else name)
    except UnknownWorkflowError as error:
        raise ToolError(f"{error} (or 'default'); list_library describes each.") from None


def _structure_blueprint(structure: str, args: StructureArgs) -> StageBlueprint:
    try:
        blueprint: StageBlueprint = KINDS[structure].from_tool(args)
    except StructureArgsError as error:
        raise ToolError(str(error)) from None
    return blueprint
