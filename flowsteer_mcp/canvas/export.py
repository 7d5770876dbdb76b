"""Workflow export/import: canonical JSON (round-trippable, with prompts and samples), DSL text, and Mermaid.

Imports are hostile input: the text must be valid Unicode, numbers are bounded (ids, counts, the id counter)
and every stage is re-validated, so a bad spec raises CanvasError and never a crash or a half-built graph.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from flowsteer_mcp.canvas.actions import AddStage, apply_edit
from flowsteer_mcp.canvas.blueprint import blueprint_of, slots
from flowsteer_mcp.canvas.candidates import refuse_new_unfed_ensembles
from flowsteer_mcp.canvas.dsl import DSLSyntaxError, parse_dsl, render, render_drawn, render_stage
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.kinds import kind_of
from flowsteer_mcp.canvas.model import OperatorNode, WorkflowGraph, children
from flowsteer_mcp.canvas.numbers import MAX_DIGITS, parse_bounded_int
from flowsteer_mcp.canvas.text import clip, excerpt, require_unicode
from flowsteer_mcp.canvas.validate import CanvasRules

ExportFormat = Literal["json", "dsl", "mermaid"]
_STAGE_ID = re.compile(r"node_[0-9]+")


class WorkflowDocument(BaseModel):
    """The canonical JSON form of a workflow."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["flowsteer.workflow/v1"] = "flowsteer.workflow/v1"
    dsl: str
    graph: WorkflowGraph


def export_json(graph: WorkflowGraph) -> str:
    document = WorkflowDocument(dsl=render(graph), graph=graph)
    return json.dumps(document.model_dump(mode="json"), indent=2)


def import_json(text: str, rules: CanvasRules) -> WorkflowGraph:
    """Load a graph from its JSON export, re-validating every stage; ids and prompts are kept as given."""
    require_unicode(text, "The workflow JSON")
    try:
        document = WorkflowDocument.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = clip(".".join(str(p) for p in first["loc"]), 120)  # a key of the hostile JSON may be in the path
        problem = clip(first["msg"], 200)  # and a value in the message (`Input tag 'node_999…' found using 'kind'`)
        raise CanvasError(
            ErrorCode.INVALID_IMPORT, f"Invalid workflow JSON at {where or 'top level'}: {problem}."
        ) from None
    graph = document.graph
    seen = WorkflowGraph()
    for stage in graph.stages:
        blueprint = blueprint_of(stage)
        canonical = rules.blueprint(blueprint, seen)
        if [s.operator for s in slots(canonical)] != [s.operator for s in slots(blueprint)]:
            raise CanvasError(
                ErrorCode.INVALID_IMPORT,
                f"Invalid workflow JSON: stage {stage.id} must use canonical operator names ({clip(render_stage(stage), 200)}).",
            )
        index = _index_of(stage.id)
        if not kind_of(stage).child_samples:
            for child in children(stage):
                if child.samples > 1:
                    raise CanvasError(
                        ErrorCode.INVALID_IMPORT,
                        f"Invalid workflow JSON: {excerpt(child.id)} has samples {child.samples} inside a "
                        f"{stage.kind} stage; samples are allowed on operator stages and parallel branches only.",
                    )
        for child in children(stage):
            if not child.id.startswith(stage.id + "_"):
                raise CanvasError(
                    ErrorCode.INVALID_IMPORT,
                    f"Invalid workflow JSON: child {excerpt(child.id)} is not named after {stage.id}.",
                )
        if index >= graph.next_index:
            raise CanvasError(
                ErrorCode.INVALID_IMPORT,
                f"Invalid workflow JSON: next_index {graph.next_index} would reuse the id of {stage.id}.",
            )
        seen.stages.append(stage)
    ids = graph.node_ids()
    if len(set(ids)) != len(ids):
        raise CanvasError(ErrorCode.INVALID_IMPORT, "Invalid workflow JSON: node ids are not unique.")
    if render(graph) != document.dsl:
        raise CanvasError(ErrorCode.INVALID_IMPORT, "Invalid workflow JSON: the dsl field does not match the graph.")
    refuse_new_unfed_ensembles(WorkflowGraph(), graph, rules.registry)
    return graph


def _index_of(node_id: str) -> int:
    index = parse_bounded_int(node_id.removeprefix("node_")) if _STAGE_ID.fullmatch(node_id) else None
    if index is None:
        raise CanvasError(
            ErrorCode.INVALID_IMPORT,
            f"Invalid stage id {excerpt(node_id)}; stage ids look like node_<n> (n of at most {MAX_DIGITS} digits).",
        )
    return index


def import_dsl(text: str, rules: CanvasRules) -> WorkflowGraph:
    """Build a fresh graph (ids node_1..node_n, no prompts) from DSL text."""
    require_unicode(text, "The DSL")
    try:
        blueprints = parse_dsl(text, max_operators=rules.limits.max_operators)
    except DSLSyntaxError as error:
        raise CanvasError(ErrorCode.INVALID_IMPORT, f"Invalid DSL: {error}") from None
    graph = WorkflowGraph()
    for blueprint in blueprints:
        graph = apply_edit(graph, AddStage(stage=blueprint), rules).graph
    return graph


def export_mermaid(graph: WorkflowGraph) -> str:
    """A left-to-right Mermaid flowchart; each kind draws its own stage (conditionals show the fail/pass edges)."""
    lines = ["flowchart LR", '    start(["task"])']
    previous = ["start"]

    def box(node: OperatorNode) -> str:
        return f'    {node.id}["{render_drawn(node)}<br/><small>{node.id}</small>"]'

    for stage in graph.stages:
        part = kind_of(stage).mermaid(stage, box)
        lines.extend(part.lines)
        lines.extend(f"    {p} --> {e}" for p in previous for e in part.entry)
        previous = part.exits
    lines.append('    answer(["answer"])')
    lines.extend(f"    {p} --> answer" for p in previous)
    return "\n".join(lines)


def export_workflow(graph: WorkflowGraph, fmt: ExportFormat) -> str:
    if fmt == "json":
        return export_json(graph)
    if fmt == "dsl":
        return render(graph)
    return export_mermaid(graph)
