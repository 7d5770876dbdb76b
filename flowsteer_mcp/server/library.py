"""The measured workflow library over MCP: a resource and a read-only tool listing it per task type.

Why: an assistant should not need to know the DSL (`Custom{8} -> ScEnsemble`) or our evaluation folders to
use the best known workflow: it asks for the library of a task type, reads each entry's measured score and
tokens against `direct` on the same problems, and starts one by name (`create_workflow(library_workflow=...)`
or `solve`). Both the resource and the tool return the same document.

Design: (docs/design/server.md, "The library over MCP").
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from flowsteer_mcp.director.library import DEFAULT_WORKFLOW, LIBRARY, LibraryWorkflow
from flowsteer_mcp.director.measured import Measurement, library_measurements, measurements_of
from flowsteer_mcp.server.toolkit import READ_ONLY, ToolEntry

LIBRARY_URI = "flowsteer://library"
LIBRARY_DESCRIPTION = (
    "the measured workflow library per task type: DSL, rationale, default, published scores and tokens"
)
HOW_TO_USE = (
    "Start an entry with create_workflow(task, task_type, library_workflow=NAME) and run or finish it, or solve "
    "a task in one call with solve(task, task_type, workflow=NAME); without a name both use the default."
)


class LibraryEntry(BaseModel):
    name: str = Field(description="the name for create_workflow(library_workflow=...) and solve(workflow=...)")
    dsl: str = Field(description="the workflow in the DSL (`X{k}`: k draws of X, the first greedy)")
    rationale: str = Field(description="why it is in the library")
    default: bool = Field(description="the workflow solve and plain library use pick for this task type")
    measurements: list[Measurement] = Field(
        description="published evaluations: score, executor tokens and calls per episode, and direct's score and "
        "tokens on the same problems; full dev slices first, then screens; empty if never measured"
    )


class TaskTypeLibrary(BaseModel):
    task_type: str = Field(description="math, code, qa or general")
    default: str = Field(description="the default entry's name, chosen on the measurements")
    entries: list[LibraryEntry] = Field(description="every workflow of this task type")


class LibraryListing(BaseModel):
    how_to_use: str = Field(description="how to start a listed workflow")
    source: str = Field(description="where the measurements come from")
    task_types: list[TaskTypeLibrary] = Field(description="the library per task type")


def entry_view(task_type: str, entry: LibraryWorkflow) -> LibraryEntry:
    return LibraryEntry(
        name=entry.name,
        dsl=entry.dsl(),
        rationale=entry.rationale,
        default=DEFAULT_WORKFLOW.get(task_type) == entry.name,
        measurements=measurements_of(task_type, entry.name),
    )


def library_listing(task_type: str | None = None) -> LibraryListing:
    """The library of `task_type`, or of every task type."""
    return LibraryListing(
        how_to_use=HOW_TO_USE,
        source=library_measurements().source,
        task_types=[
            TaskTypeLibrary(
                task_type=kind,
                default=DEFAULT_WORKFLOW[kind],
                entries=[entry_view(kind, entry) for entry in entries.values()],
            )
            for kind, entries in LIBRARY.items()
            if task_type is None or kind == task_type
        ],
    )


async def library_resource() -> str:
    """The `flowsteer://library` resource: the whole library, as list_library answers without a task type."""
    return library_listing().model_dump_json(indent=1)


async def list_library(
    task_type: Annotated[
        Literal["math", "code", "qa", "general"] | None, Field(description="one task type; omitted: all")
    ] = None,
) -> LibraryListing:
    """The measured workflow library: per task type its workflows, the default, and each one's published
    score and executor tokens against direct on the same problems. Start one with create_workflow or solve."""
    return library_listing(task_type)


def library_tools() -> list[ToolEntry]:
    """The library's rows of the server's registration table."""
    return [ToolEntry(list_library, "List the workflow library", READ_ONLY)]
