"""What every tool module shares: registration, input checks, opening a workflow, creating one.

Why a class: the canvas tools (`tools/`), the job tools, the library tools and `solve` all turn arguments
into a task and options the same way, open workflows under the same busy rule and report progress the same
way; one object holds that, so nothing is repeated. It is also the server's state: the server's lifespan yields
it, so a tool reads it from its context (`kit_of(ctx)`), as the MCP SDK's examples read their lifespan state,
and a tool function needs no closure and can be called alone.

Annotations, decided per tool. Open world means the call may reach something outside this server: every
tool that can execute the workflow calls the configured executor LLM (an external service whose answers the
server does not control), so it is open world; tools that only read or write the server's own workflow
store are closed. Destructive means the call may overwrite or remove something (a node, an operator, a
prompt, a whole workflow, the chance to edit a finished episode); additive edits are not destructive.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

from mcp.server import MCPServer
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.execution import ProgressCallback
from flowsteer_mcp.canvas.export import import_dsl, import_json
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec, TaskType
from flowsteer_mcp.canvas.session import Canvas, CanvasState, execution_view
from flowsteer_mcp.canvas.text import clip
from flowsteer_mcp.canvas.validate import CanvasRules, validate_options, validate_task
from flowsteer_mcp.server.activity import JOB_ACTIVITY
from flowsteer_mcp.server.errors import ToolArguments
from flowsteer_mcp.server.jobs import JobBoard, busy_message
from flowsteer_mcp.server.policy import PolicySource
from flowsteer_mcp.server.progress import tool_progress
from flowsteer_mcp.server.results import CreatedWorkflow, WorkflowOptionsInput
from flowsteer_mcp.server.settings import ServerSettings
from flowsteer_mcp.server.workbench import Workbench, WorkbenchFull, WorkflowNotFound, WorkflowNotSaved
from operators.registry import OperatorRegistry

TaskTypeInput = Literal["auto", "math", "code", "qa", "general"]
ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])

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


@dataclass(frozen=True)
class ToolEntry:
    """One row of a registration table: the function (its name, docstring and signature are the tool's name,
    description and schemas), a human title and the annotations (decided as the module docstring says)."""

    fn: Callable[..., Any]
    title: str
    annotations: ToolAnnotations


@dataclass
class ToolKit:
    server: MCPServer
    bench: Workbench
    jobs: JobBoard
    settings: ServerSettings
    observer: ObservationBuilder
    arguments: ToolArguments
    policy: PolicySource = field(default_factory=PolicySource)  # where solve(director="policy") finds its director
    offered: list[str] = field(default_factory=list)  # every tool name this server knows, registered or filtered

    @property
    def registry(self) -> OperatorRegistry:
        return self.bench.registry

    def tool(self, title: str, annotations: ToolAnnotations) -> Callable[[ToolFn], ToolFn]:
        """`@server.tool` with a human title, and the argument model kept for short validation messages; a tool
        the server's tool filter leaves out is not registered at all (`--tools`, `--read-only`). The description
        is the docstring without its source indentation, the same wherever the function is defined."""

        def register(fn: ToolFn) -> ToolFn:
            self.offered.append(fn.__name__)
            if not self.settings.offers(fn.__name__, annotations):
                return fn
            self.arguments.learn(fn)
            description = inspect.cleandoc(fn.__doc__ or "")
            return self.server.tool(title=title, description=description, annotations=annotations)(fn)

        return register

    def register(self, table: Iterable[ToolEntry]) -> None:
        """Register a table of tools in its order (the tool filter may leave some out)."""
        for entry in table:
            self.tool(entry.title, entry.annotations)(entry.fn)

    def check_tool_filter(self) -> None:
        """Raise ValueError when the allow-list names a tool this server does not have."""
        unknown = sorted(set(self.settings.tools or ()) - set(self.offered))
        if unknown:
            raise ValueError(
                f"--tools names unknown tools: {', '.join(clip(name, 64) for name in unknown[:5])}; "
                f"the tools are: {', '.join(self.offered)}"
            )

    def options_from(self, given: WorkflowOptionsInput | None) -> CanvasOptions:
        given = given or WorkflowOptionsInput()
        cap = self.settings.max_rounds_cap
        if given.max_rounds > cap:
            raise ToolError(f"max_rounds {given.max_rounds} exceeds this server's cap of {cap}.")
        try:  # operator names checked against the library, and a finish gate some workflow can pass
            return validate_options(self.registry, CanvasOptions(**given.model_dump(), limits=self.settings.limits))
        except CanvasError as error:
            raise ToolError(f"{error.code.value}: {error.message}") from None

    def task_from(
        self, task: str, task_type: TaskTypeInput, entry_point: str | None, public_tests: str | None
    ) -> TaskSpec:
        limit = self.settings.max_task_chars
        if not task.strip():
            raise ToolError("task is empty: pass the problem statement the workflow should solve.")
        if len(task) > limit:
            raise ToolError(f"task is {len(task)} characters; this server accepts at most {limit}.")
        entry_point, public_tests = entry_point or None, public_tests or None
        try:
            validate_task(self.settings.limits, problem=task, entry_point=entry_point, public_tests=public_tests)
        except CanvasError as error:
            raise ToolError(f"{error.code.value}: {error.message}") from None
        kind = infer_task_type(task_type, entry_point, public_tests)
        return TaskSpec(problem=task, task_type=kind, entry_point=entry_point, public_tests=public_tests)

    @asynccontextmanager
    async def opened(self, workflow_id: str, *, write: bool = True) -> AsyncIterator[Canvas]:
        """The workflow's canvas; a writer is refused at once while a background job runs on it."""
        busy = self.jobs.running_on(workflow_id) if write else None
        if busy is not None and JOB_ACTIVITY.get() is not busy.activity:  # never queue minutes behind a job
            raise ToolError(busy_message(workflow_id, busy))
        try:
            async with self.bench.open(workflow_id, write=write) as canvas:
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
    async def working(
        self, workflow_id: str, ctx: Context, phase: str
    ) -> AsyncIterator[tuple[Canvas, ProgressCallback]]:
        """The workflow opened for a step that may run it, with progress (and a heartbeat) for the caller."""
        async with (
            tool_progress(ctx.report_progress, phase, self.settings.progress_interval_s) as progress,
            self.opened(workflow_id) as canvas,
        ):
            yield canvas, progress

    def imported(self, spec: str, kind: Literal["json", "dsl"], state: CanvasState) -> WorkflowGraph:
        """The graph of a JSON export or DSL text, validated under `state`'s options like any edit."""
        rules = CanvasRules(self.registry, state.options)
        try:
            return import_json(spec, rules) if kind == "json" else import_dsl(spec, rules)
        except CanvasError as error:
            raise ToolError(f"{error.code.value}: {error.message}") from None

    async def create(self, state: CanvasState) -> str:
        """Store a new workflow; its id."""
        try:
            workflow_id, _ = await self.bench.create(state)
        except (WorkbenchFull, WorkflowNotSaved) as error:
            raise ToolError(str(error)) from None
        return workflow_id

    async def created(self, state: CanvasState, message: str) -> CreatedWorkflow:
        """Store a new workflow and describe it as create_workflow answers."""
        workflow_id = await self.create(state)
        canvas = Canvas(state, self.registry)
        view = canvas.view()
        return CreatedWorkflow(
            workflow_id=workflow_id,
            ok=True,
            message=message,
            feedback=canvas.feedback(message),
            state=view,
            execution=execution_view(state.last_execution),
            system_prompt=self.observer.system_prompt(self.registry, state.options.finish_policy()),
            observation=self.observer.turn(state.task, view, None),
        )


def kit_of(ctx: Context) -> ToolKit:
    """The ToolKit the server's lifespan yielded, from a tool's context (a request's, or a job's copy of it)."""
    return kit_in(ctx.request_context)


def kit_in(request: ServerRequestContext[Any, Any]) -> ToolKit:
    """The ToolKit the server's lifespan yielded, from a request's context (what a low-level handler gets)."""
    kit = request.lifespan_context
    if not isinstance(kit, ToolKit):
        raise TypeError(f"the lifespan state is a {type(kit).__name__}, not the ToolKit build_server's lifespan yields")
    return kit
