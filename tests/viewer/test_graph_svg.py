"""The workflow graph as SVG: well-formed, one `g.node` per operator node, statuses from the trace, every
untrusted text escaped, and nothing the viewer's Content-Security-Policy would block (no inline styles)."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import pytest

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.model import (
    ConditionalStage,
    FallbackStage,
    LoopStage,
    OperatorNode,
    ParallelStage,
    WorkflowGraph,
)
from flowsteer_mcp.viewer.graph_svg import graph_from_dsl, render_dsl_svg, render_graph_svg, text_width

SVG = "{http://www.w3.org/2000/svg}"
EVERY_KIND = "Plan -> [Programmer{3}, Custom] -> Verify ? Revise : done -> (Test -> Revise) * 3 -> Programmer ?? Custom"
TEN_STAGES = (
    "Plan -> [Programmer, Custom, Programmer{2}] -> ScEnsemble -> Verify ? Revise : Format -> (Test -> Revise) * 4 "
    "-> Programmer ?? Custom -> Review ? Revise : done -> Custom{2} -> [Custom, Custom] -> Format"
)
HOSTILE = '<script>alert("x")</script> "quotes" \'apos\' ]]> & &amp; <![CDATA[ x ]]>'


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def classes(element: ET.Element) -> list[str]:
    return element.get("class", "").split()


def groups(root: ET.Element, css: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if css in classes(g)]


def nodes(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-node-id", ""): g for g in groups(root, "node")}


def translate(element: ET.Element) -> tuple[float, float]:
    match = re.fullmatch(r"translate\(([-0-9.]+),([-0-9.]+)\)", element.get("transform", ""))
    assert match, element.get("transform")
    return float(match.group(1)), float(match.group(2))


def all_text(element: ET.Element) -> str:
    return " ".join(t.text or "" for t in element.iter(f"{SVG}text"))


def test_empty_graph_says_no_stages_yet() -> None:
    root = parse(render_graph_svg(WorkflowGraph()))
    assert "workflow-graph" in classes(root)
    assert "no stages yet" in all_text(root)
    assert not groups(root, "node")


def test_single_node_carries_its_id_operator_and_prompt() -> None:
    graph = WorkflowGraph(stages=[OperatorNode(id="node_1", operator="Custom", prompt="Think step by step.")])
    root = parse(render_graph_svg(graph))
    (node,) = groups(root, "node")
    assert classes(node) == ["node", "idle"]
    assert node.get("data-node-id") == "node_1"
    assert node.get("data-operator") == "Custom"
    assert node.find(f"{SVG}rect") is not None
    title = node.findtext(f"{SVG}title")
    assert title == "node_1 · Custom\nThink step by step."
    stage = groups(root, "stage")[0]
    assert classes(stage) == ["stage", "operator"] and stage.get("data-stage-id") == "node_1"


def test_a_node_without_prompt_says_so_neutrally() -> None:
    root = parse(render_graph_svg(WorkflowGraph(stages=[OperatorNode(id="node_1", operator="Programmer")])))
    assert nodes(root)["node_1"].findtext(f"{SVG}title") == "node_1 · Programmer\n(no prompt)"


@pytest.mark.parametrize(
    ("dsl", "kind", "node_ids", "labels"),
    [
        ("Programmer{3}", "operator", ["node_1"], ["Programmer {3}"]),
        ("[Programmer, Custom{2}]", "parallel", ["node_1_p0", "node_1_p1"], ["parallel", "Custom {2}"]),
        (
            "Verify ? Revise : done",
            "conditional",
            ["node_1_cond", "node_1_fail"],
            ["if check fails", "pass → continue"],
        ),
        (
            "Verify ? Revise : Format",
            "conditional",
            ["node_1_cond", "node_1_fail", "node_1_pass"],
            ["if check fails", "if check passes"],
        ),
        ("(Test -> Revise) * 3", "loop", ["node_1_l0", "node_1_l1"], ["× 3", "stops early once a check passes"]),
        ("Programmer ?? Custom", "fallback", ["node_1_try", "node_1_else"], ["if A fails"]),
    ],
)
def test_each_kind_draws_its_structure(dsl: str, kind: str, node_ids: list[str], labels: list[str]) -> None:
    root = parse(render_dsl_svg(dsl))
    (stage,) = groups(root, "stage")
    assert classes(stage) == ["stage", kind] and stage.get("data-stage-id") == "node_1"
    assert sorted(nodes(stage)) == sorted(node_ids)
    text = all_text(stage)
    for label in labels:
        assert label in text


def test_offset_nodes_sit_below_the_main_line() -> None:
    """The on-fail node of a conditional and the fallback B are drawn below the node they depend on."""
    root = parse(render_dsl_svg("Verify ? Revise : done -> Programmer ?? Custom"))
    found = nodes(root)
    assert translate(found["node_1_fail"])[1] > translate(found["node_1_cond"])[1]
    assert translate(found["node_2_else"])[1] > translate(found["node_2_try"])[1]
    assert root.find(f".//{SVG}path[@stroke-dasharray]") is not None  # the "if ... fails" edges are dashed


def test_parallel_branches_are_stacked_without_overlap() -> None:
    root = parse(render_dsl_svg("[Programmer, Custom, Programmer{4}]"))
    tops = sorted(translate(g)[1] for g in groups(root, "node"))
    rect = groups(root, "node")[0].find(f"{SVG}rect")
    assert rect is not None
    height = float(rect.get("height", "0"))
    assert all(b - a >= height for a, b in itertools.pairwise(tops))


def test_trace_sets_status_classes_and_the_last_row_wins() -> None:
    trace = [
        NodeTrace(node_id="node_1", operator="Plan", ok=True),
        NodeTrace(node_id="node_2_cond", operator="Verify", ok=True, verdict=False),
        NodeTrace(node_id="node_2_fail", operator="Revise", ok=False, error="timeout <boom>"),
        NodeTrace(node_id="node_3_l0", operator="Test", ok=False, iteration=1),
        NodeTrace(node_id="node_3_l0", operator="Test", ok=False, iteration=2),
        NodeTrace(node_id="node_3_l0", operator="Test", ok=True, iteration=3),
        NodeTrace(node_id="node_4_else", operator="Custom", ok=True, skipped=True),
    ]
    root = parse(
        render_dsl_svg("Plan -> Verify ? Revise : done -> (Test -> Revise) * 3 -> Programmer ?? Custom", trace)
    )
    status = {node_id: classes(g)[1] for node_id, g in nodes(root).items()}
    assert status == {
        "node_1": "ok",
        "node_2_cond": "ok",
        "node_2_fail": "failed",
        "node_3_l0": "ok",
        "node_3_l1": "idle",
        "node_4_try": "idle",
        "node_4_else": "skipped",
    }
    assert "3 runs" in all_text(nodes(root)["node_3_l0"])
    assert "error: timeout <boom>" in (nodes(root)["node_2_fail"].findtext(f"{SVG}title") or "")


def test_hostile_text_is_escaped_everywhere() -> None:
    node = OperatorNode(id='n"><script>x</script>', operator=HOSTILE, prompt=HOSTILE + "\x00\x1b")
    graph = WorkflowGraph(stages=[node, ParallelStage(id="p", branches=[node, node])])
    error = NodeTrace(node_id=node.id, operator=HOSTILE, ok=False, error=HOSTILE)
    svg = render_graph_svg(graph, [error])
    assert "<script" not in svg.lower() and "]]>" not in svg and "<![CDATA[" not in svg
    root = parse(svg)  # well-formed despite control characters
    drawn = nodes(root)[node.id]
    assert drawn.get("data-operator") == HOSTILE  # escaped, not mangled: it reads back as written
    assert (drawn.findtext(f"{SVG}title") or "").startswith(f"{node.id} · {HOSTILE}\n{HOSTILE}")
    assert not [name for element in root.iter() for name in element.attrib if name.lower().startswith("on")]


def test_no_inline_style_for_the_csp() -> None:
    svg = render_dsl_svg(TEN_STAGES, [NodeTrace(node_id="node_1", operator="Plan", ok=True)])
    assert "style=" not in svg and "<style" not in svg
    assert not [e for e in parse(svg).iter() if e.tag in (f"{SVG}style", f"{SVG}script", f"{SVG}foreignObject")]


def test_ten_stages_of_every_kind_run_left_to_right() -> None:
    graph = graph_from_dsl(TEN_STAGES)
    root = parse(render_dsl_svg(TEN_STAGES))
    stages = groups(root, "stage")
    assert [s.get("data-stage-id") for s in stages] == [f"node_{i}" for i in range(1, 11)]
    xs = [translate(s)[0] for s in stages]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    assert sorted(nodes(root)) == sorted(n.id for n in graph.iter_operator_nodes())
    assert float(root.get("width", "0")) > xs[-1]


def test_long_and_wide_names_widen_their_box() -> None:
    long_name = "VeryLongOperatorNameThatWouldOverflow"
    wide_name = "检查器检查器检查器"
    graph = WorkflowGraph(
        stages=[OperatorNode(id="node_1", operator=long_name), OperatorNode(id="node_2", operator=wide_name)]
    )
    root = parse(render_graph_svg(graph))
    for node_id, name in (("node_1", long_name), ("node_2", wide_name)):
        rect = nodes(root)[node_id].find(f"{SVG}rect")
        assert rect is not None
        assert float(rect.get("width", "0")) >= text_width(name, 13)
    assert wide_name in all_text(root)
    assert text_width(wide_name, 13) > text_width("x" * len(wide_name), 13)


def test_structures_built_directly_render_like_their_dsl() -> None:
    """A graph from the store (built without the DSL) draws the same node set."""
    a, b, c = (OperatorNode(id=f"n{i}", operator=op) for i, op in enumerate(("Verify", "Revise", "Format")))
    graph = WorkflowGraph(
        stages=[
            ConditionalStage(id="c", check=a, on_fail=b, on_pass=c),
            LoopStage(id="l", body=[b], count=2),
            FallbackStage(id="f", attempt=b, fallback=c),
        ]
    )
    root = parse(render_graph_svg(graph))
    assert [classes(s)[1] for s in groups(root, "stage")] == ["conditional", "loop", "fallback"]
    assert len(groups(root, "node")) == 3 + 1 + 2


@pytest.mark.parametrize("dsl", ["Plan -> [", "A{99}", "<script>alert(1)</script>", "(A) * 99999999999999999999"])
def test_undrawable_dsl_gives_a_message_not_an_error(dsl: str) -> None:
    svg = render_dsl_svg(dsl)
    assert "<script" not in svg
    root = parse(svg)
    assert "workflow not drawable" in all_text(root) and not groups(root, "node")


def test_empty_dsl_is_an_empty_graph() -> None:
    assert "no stages yet" in all_text(parse(render_dsl_svg("")))
