"""MCP tools: a thin translation between tool calls and the canvas core.

Each tool is a module-level function that reads the server's state (a `ToolKit`, which the server's lifespan
yields) from its `Context` (`kit_of(ctx)`), so a tool can be called, and tested, alone with any context whose
lifespan state is a kit. The functions' names, docstrings and signatures are the tools' names, descriptions
and schemas; `canvas_tools` lists them in order with their titles and annotations, the first rows of the
server's registration table (`app.server_tools`).

Agent mistakes (unknown ids, invalid edits, wrong state) raise ToolError with the canvas's actionable message
and leave the workflow unchanged. `act` is the exception by design (see steps.py).
"""

from __future__ import annotations

from flowsteer_mcp.server.toolkit import (
    ADDS_AND_RUNS,
    CREATES,
    DELETES,
    DESTRUCTIVE_AND_RUNS,
    OVERWRITES_AND_RUNS,
    READ_ONLY,
    RUNS,
    ToolEntry,
)
from flowsteer_mcp.server.tools.common import step_of
from flowsteer_mcp.server.tools.creation import create_workflow, import_workflow, library_entry
from flowsteer_mcp.server.tools.edits import add_operator, delete_node, modify_node, set_prompt
from flowsteer_mcp.server.tools.steps import act, finish, run_workflow
from flowsteer_mcp.server.tools.structures import add_structure_tool
from flowsteer_mcp.server.tools.views import (
    catalog_of,
    delete_workflow,
    detail_of,
    export_workflow,
    get_workflow,
    list_operators,
    list_workflows,
)


def canvas_tools() -> list[ToolEntry]:
    """The canvas tools in the order clients list them; built when a server is built (add_structure's schema
    names the stage kinds registered by then)."""
    return [
        ToolEntry(create_workflow, "Create workflow", CREATES),
        ToolEntry(import_workflow, "Import workflow", CREATES),
        ToolEntry(act, "Act: one Flow-Director turn", DESTRUCTIVE_AND_RUNS),
        ToolEntry(run_workflow, "Run workflow", RUNS),
        ToolEntry(finish, "Finish workflow", DESTRUCTIVE_AND_RUNS),
        ToolEntry(add_operator, "Add operator", ADDS_AND_RUNS),
        add_structure_tool(),
        ToolEntry(delete_node, "Delete node", DESTRUCTIVE_AND_RUNS),
        ToolEntry(modify_node, "Modify node (replace its operator)", DESTRUCTIVE_AND_RUNS),
        ToolEntry(set_prompt, "Set node prompt", OVERWRITES_AND_RUNS),
        ToolEntry(get_workflow, "Get workflow", READ_ONLY),
        ToolEntry(list_operators, "List operators", READ_ONLY),
        ToolEntry(export_workflow, "Export workflow", READ_ONLY),
        ToolEntry(delete_workflow, "Delete workflow", DELETES),
        ToolEntry(list_workflows, "List workflows", READ_ONLY),
    ]


__all__ = ["canvas_tools", "catalog_of", "detail_of", "library_entry", "step_of"]
