"""DSL render/parse: exact round trip, clear syntax errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowsteer_mcp.canvas.actions import AddStage, apply_edit
from flowsteer_mcp.canvas.blueprint import (
    ConditionalBlueprint,
    LoopBlueprint,
    OperatorBlueprint,
    ParallelBlueprint,
)
from flowsteer_mcp.canvas.dsl import DSLSyntaxError, parse_dsl, render
from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.canvas.validate import CanvasRules
from operators.registry import default_registry

RULES = CanvasRules(default_registry(), CanvasOptions())
SOLVERS = [
    "Plan",
    "Decompose",
    "Custom",
    "AnswerGenerate",
    "Programmer",
    "Revise",
    "Format",
    "Review",
    "Test",
    "Verify",
]
CHECKERS = ["Verify", "Test", "Review"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Custom",
        "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format",
        "Programmer -> (Test -> Revise) * 3 -> Format",
        "Decompose -> [Custom, Custom, Programmer] -> Aggregate -> Review ? Revise : Format",
        "Custom -> (Review) * 3",
    ],
)
def test_canonical_text_round_trips_exactly(text: str) -> None:
    assert render(import_dsl(text, RULES)) == text


def test_parse_accepts_loose_spacing_and_renders_canonically() -> None:
    graph = import_dsl("Plan->[Programmer,Custom]->ScEnsemble->Verify?Revise:done->(Test->Revise)*2", RULES)
    assert (
        render(graph) == "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> (Test -> Revise) * 2"
    )


def test_parse_produces_typed_blueprints() -> None:
    stages = parse_dsl("A ? B : done -> (C -> D) * 4 -> [E, F]")
    assert stages == [
        ConditionalBlueprint(check="A", on_fail="B", on_pass=None),
        LoopBlueprint(operators=["C", "D"], count=4),
        ParallelBlueprint(operators=["E", "F"]),
    ]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("Plan ->", "end of text"),
        ("[Custom, ]", "expected name"),
        ("(Custom) *", "expected int"),
        ("Verify ? Revise", "expected ':'"),
        ("done -> Custom", "'done' is only allowed"),
        ("Custom $ Plan", "unexpected character '$'"),
    ],
)
def test_syntax_errors_say_where_and_what(text: str, fragment: str) -> None:
    with pytest.raises(DSLSyntaxError, match=None) as info:
        parse_dsl(text)
    assert fragment in str(info.value)


_op = st.sampled_from(SOLVERS)
_stage = st.one_of(
    _op.map(lambda o: OperatorBlueprint(operator=o)),
    st.lists(_op, min_size=2, max_size=4).map(lambda ops: ParallelBlueprint(operators=ops)),
    st.tuples(st.sampled_from(CHECKERS), _op, st.one_of(st.none(), _op)).map(
        lambda t: ConditionalBlueprint(check=t[0], on_fail=t[1], on_pass=t[2])
    ),
    st.tuples(st.lists(_op, min_size=1, max_size=3), st.integers(1, 10)).map(
        lambda t: LoopBlueprint(operators=t[0], count=t[1])
    ),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_stage, max_size=6))
def test_any_graph_round_trips_through_text(stages: list) -> None:  # type: ignore[type-arg]
    graph = WorkflowGraph()
    for blueprint in stages:
        graph = apply_edit(graph, AddStage(stage=blueprint), RULES).graph
    text = render(graph)
    rebuilt = import_dsl(text, RULES)
    assert render(rebuilt) == text
    assert [s.kind for s in rebuilt.stages] == [s.kind for s in graph.stages]
