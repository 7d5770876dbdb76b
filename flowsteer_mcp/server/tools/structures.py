"""`add_structure`: add a control-structure stage (parallel, conditional, loop, fallback, ...).

Why its own module: the structure kinds are a registry that may grow at run time, so the tool's schema (an enum
of the kind names, each described) and its title are built when a server is built (`add_structure_tool`),
never at import, and a call looks its kind up when it runs. A kind registered before the server is built is
listed and accepted."""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from flowsteer_mcp.canvas import kinds
from flowsteer_mcp.canvas.actions import AddStage
from flowsteer_mcp.canvas.blueprint import StageBlueprint
from flowsteer_mcp.canvas.kinds.base import AnyKind, StructureArgs, StructureArgsError
from flowsteer_mcp.server.arguments import Name, StageOperators, StagePrompts
from flowsteer_mcp.server.results import WorkflowStep
from flowsteer_mcp.server.toolkit import ADDS_AND_RUNS, ToolEntry
from flowsteer_mcp.server.tools.common import WorkflowId, with_annotations
from flowsteer_mcp.server.tools.edits import edited


def structure_kinds() -> tuple[AnyKind, ...]:
    """The structure kinds registered now, in registration order (the one place that reads the registry)."""
    return tuple(kinds.STRUCTURES)


def structure_kind(name: str) -> AnyKind:
    """The registered structure kind `name`, or a ToolError naming the registered ones."""
    registered = structure_kinds()
    for kind in registered:
        if kind.name == name:
            return kind
    raise ToolError(f"Unknown structure {name!r}; the structures are: {', '.join(k.name for k in registered)}.")


def structure_blueprint(structure: str, args: StructureArgs) -> StageBlueprint:
    """The blueprint of a `structure` stage from the tool's arguments; a ToolError says what is missing."""
    try:
        blueprint: StageBlueprint = structure_kind(structure).from_tool(args)
    except StructureArgsError as error:
        raise ToolError(str(error)) from None
    return blueprint


async def add_structure(
    workflow_id: WorkflowId,
    structure: Annotated[str, Field(description="a structure kind's name (the server lists them)")],
    ctx: Context,
    operators: Annotated[
        StageOperators | None, Field(description="parallel branches, loop body, or fallback [attempt, fallback]")
    ] = None,
    condition: Annotated[Name | None, Field(description="conditional: the checker (Verify, Test, Review)")] = None,
    on_fail: Annotated[Name | None, Field(description="conditional: run when the check FAILS")] = None,
    on_pass: Annotated[Name | None, Field(description="conditional: run when the check passes; omit for done")] = None,
    count: Annotated[int | None, Field(description="loop: maximum iterations (1-10)")] = None,
    prompts: Annotated[StagePrompts | None, Field(description="one prompt per operator, in order")] = None,
    position: Annotated[int | None, Field(description="0-based stage index; default appends")] = None,
) -> WorkflowStep:
    """Add a parallel, conditional (`condition ? on_fail : on_pass|done`), loop or fallback (`A ?? B`: B runs
    only when A fails or gives no answer) stage."""
    args = StructureArgs(
        operators=operators, condition=condition, on_fail=on_fail, on_pass=on_pass, count=count, prompts=prompts
    )
    blueprint = structure_blueprint(structure, args)
    return await edited(ctx, workflow_id, "add_structure", AddStage(stage=blueprint, position=position))


def add_structure_tool() -> ToolEntry:
    """`add_structure` as a server built now lists it: `structure` an enum of the structure kinds registered
    now, described one by one, and the kinds named in the title."""
    registered = structure_kinds()
    names = tuple(kind.name for kind in registered)
    described = "the kind of stage: " + "; ".join(f"{kind.name}: {kind.summary}" for kind in registered)
    structure: object = Annotated[cast(Any, Literal)[names], Field(description=described)]
    return ToolEntry(
        with_annotations(add_structure, structure=structure), f"Add structure ({', '.join(names)})", ADDS_AND_RUNS
    )
