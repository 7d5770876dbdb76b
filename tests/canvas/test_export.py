"""JSON/DSL/Mermaid export and validated import."""

from __future__ import annotations

import json

import pytest

from flowsteer_mcp.canvas.actions import DeleteNode, SetPrompt, apply_edit
from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.export import export_json, export_mermaid, import_dsl, import_json
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import default_registry

RULES = CanvasRules(default_registry(), CanvasOptions())


def sample():  # type: ignore[no-untyped-def]
    graph = import_dsl("Plan -> [Programmer, Custom, AnswerGenerate] -> ScEnsemble -> Verify ? Revise : done", RULES)
    graph = apply_edit(graph, SetPrompt(node_id="node_2_p0", prompt="Write solve() exactly."), RULES).graph
    return apply_edit(graph, DeleteNode(node_id="node_2_p1"), RULES).graph  # leaves ids p0, p2


def test_json_round_trip_keeps_ids_prompts_and_counter() -> None:
    graph = sample()
    again = import_json(export_json(graph), RULES)
    assert again == graph
    assert again.node_ids()[2:4] == ["node_2_p0", "node_2_p2"]


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d["graph"]["stages"][0].update(operator="Wizard"), "Unknown operator"),
        (lambda d: d["graph"].update(next_index=2), "would reuse the id"),
        (lambda d: d.update(dsl="Plan"), "does not match"),
        (lambda d: d["graph"]["stages"][1]["branches"][1].update(id="node_1"), "not named after node_2"),
        (lambda d: d["graph"]["stages"][0].update(extra=1), "Invalid workflow JSON"),
        (lambda d: d["graph"]["stages"][0].update(operator="plan"), "canonical operator names"),
    ],
)
def test_invalid_json_imports_are_rejected(mutate, fragment) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(export_json(sample()))
    mutate(document)
    with pytest.raises(CanvasError) as info:
        import_json(json.dumps(document), RULES)
    assert fragment in info.value.message


def test_garbage_is_an_import_error() -> None:
    with pytest.raises(CanvasError, match="Invalid workflow JSON"):
        import_json("{not json", RULES)
    with pytest.raises(CanvasError, match="Invalid DSL"):
        import_dsl("Plan -> -> Custom", RULES)


def test_mermaid_shows_every_node_and_the_conditional_edges() -> None:
    text = export_mermaid(import_dsl("Custom -> Verify ? Revise : done -> (Test -> Revise) * 2", RULES))
    assert text.startswith("flowchart LR")
    for node_id in ("node_1", "node_2_cond", "node_2_fail", "node_3_l0", "node_3_l1"):
        assert f"    {node_id}" in text
    assert "node_2_cond -- fail --> node_2_fail" in text
    assert "node_2_cond -- pass --> node_2_done" in text
    assert "repeat up to 2x" in text
