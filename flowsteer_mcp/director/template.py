"""Fixed-workflow directors: `template` (a library workflow per task type) and `workflow:STEM` (a JSON file).

Honest comparison points for learned directors: no decisions are made per task. Both import the workflow's
canonical JSON through the MCP `import_workflow` tool (one path for library entries and files, so prompts and
samples survive and the server validates the spec like any import), finish under the relaxed gate without
executing before that, and collect the answer of the one run that finish makes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mcp import Client
from pydantic import ValidationError

from flowsteer_mcp.canvas.export import WorkflowDocument
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult
from flowsteer_mcp.director.finalize import add_usage, collect
from flowsteer_mcp.director.library import UnknownWorkflowError, library_workflow, require_known
from flowsteer_mcp.director.link import CanvasCallError, CanvasLink

# Build without running (execute_each_step off); finish is the only round used, the spare one is slack.
_OPTIONS = {"finish": "relaxed", "execute_each_step": False, "max_rounds": 3}


class FixedWorkflowDirector:
    """Runs the workflow `spec_for(task)` returns (a JSON export) on each task through the MCP tools."""

    def __init__(self, name: str, spec_for: Callable[[TaskSpec], str]) -> None:
        self.name = name
        self.spec_for = spec_for

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        started = time.monotonic()
        link = CanvasLink(client)
        result = EpisodeResult(director=self.name, task=task)
        try:
            spec = self.spec_for(task)
            created = await link.call(
                "import_workflow",
                spec=spec,
                format="json",
                task=task.problem,
                task_type=task.task_type,
                entry_point=task.entry_point,
                public_tests=task.public_tests,
                options=_OPTIONS,
            )
            workflow_id = created["workflow_id"]
            step = await link.call("finish", workflow_id=workflow_id)
            result = add_usage(result, step)
            result = await collect(link, workflow_id, result)
        except (CanvasCallError, UnknownWorkflowError) as error:
            result = result.model_copy(update={"error": str(error)})
        return result.model_copy(update={"wall_s": time.monotonic() - started})


class TemplateDirector(FixedWorkflowDirector):
    """`template` (the default library workflow of each task type) or `template:NAME` (a named one)."""

    def __init__(self, workflow: str | None = None) -> None:
        if workflow is not None:
            require_known(workflow)
        self.workflow = workflow
        super().__init__(
            "template" if workflow is None else f"template:{workflow}",
            lambda task: library_workflow(task.task_type, workflow).spec(),
        )


def workflow_file_director(path: str | Path) -> FixedWorkflowDirector:
    """`workflow:STEM`: the workflow in `path` (the `export_workflow(format="json")` format) on every task.

    The file is read and its document shape checked now, so a bad path fails before any episode runs; the
    server re-validates the graph on every import.
    """
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    try:
        WorkflowDocument.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        raise ValueError(f"{file} is not a workflow JSON export (at {where}: {first['msg']})") from None
    return FixedWorkflowDirector(f"workflow:{file.stem}", lambda task: text)
