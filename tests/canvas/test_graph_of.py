"""`graph_of`: a workflow planned off-line is checked by the canvas's own rules, add by add, as `act` checks it."""

from __future__ import annotations

import pytest

from flowsteer_mcp.api import CanvasError, CanvasOptions, ConditionalBlueprint, OperatorBlueprint, graph_of
from flowsteer_mcp.canvas.dsl import render
from operators.registry import default_registry

REGISTRY = default_registry()


def test_the_stages_build_the_graph_act_would_build() -> None:
    stages = [
        OperatorBlueprint(operator="Programmer", samples=4),
        OperatorBlueprint(operator="ScEnsemble"),
        ConditionalBlueprint(check="Test", on_fail="Revise"),
    ]
    assert render(graph_of(stages, REGISTRY)) == "Programmer{4} -> ScEnsemble -> Test ? Revise : done"


def test_the_first_stage_the_canvas_refuses_raises() -> None:
    with pytest.raises(CanvasError, match="ScEnsemble"):
        graph_of([OperatorBlueprint(operator="ScEnsemble")], REGISTRY)  # an ensemble with nothing to choose from
    with pytest.raises(CanvasError, match="Custom"):
        graph_of(
            [OperatorBlueprint(operator="Custom")], REGISTRY, CanvasOptions(disabled_operators=["Custom"])
        )  # the options count
