"""A workflow graph drawn as one self-contained `<svg>` element, server-side.

Why server-side SVG: the viewer runs offline under a strict Content-Security-Policy, so it ships no JavaScript
graph library and no inline styles; colours are presentation attributes (fill=, stroke=) that `viewer.css` may
override through the classes. Every piece of text (operator names, ids, prompts, errors) is untrusted and goes
through `html.escape(..., quote=True)`; characters XML cannot hold are replaced first, so the output always
parses.

Layout: stages left to right on one main line, an arrow between consecutive stages. Each stage is laid out in
its own coordinates (main line at y = 0) as a `_Block`, then translated into place. What a stage looks like is
its kind's decision, as data (`StageKind.drawing`: one of a few generic layouts, its nodes and caption); this
module knows the layouts, never the kinds, so a kind registered later is drawn without a change here and a
layout it does not know is an error. Text widths are estimated
for a monospace font, so boxes grow with their labels instead of letting them overflow.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import ValidationError

from flowsteer_mcp.canvas.blueprint import build_stage
from flowsteer_mcp.canvas.dsl import DSLSyntaxError, parse_dsl
from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.kinds import kind_of
from flowsteer_mcp.canvas.kinds.drawing import BRANCHES, CHAIN, CHECK, REPEAT, SINGLE, Drawing
from flowsteer_mcp.canvas.model import OperatorNode, Stage, WorkflowGraph
from flowsteer_mcp.canvas.text import clip
from flowsteer_mcp.errors import FlowSteerError

NodeStatus = Literal["ok", "failed", "skipped", "idle"]

MAX_DSL_OPERATORS = 200  # a recorded DSL longer than this is not drawn (bounds the work on hostile input)
MAX_LABEL_CHARS = 40  # visible operator name; the full name stays in data-operator and the title
MAX_TITLE_CHARS = 4000  # the canvas bounds prompts to 4000 characters by default

# Geometry (px) and fonts.
OPERATOR_FONT = 13
SMALL_FONT = 11
LINE_HEIGHT = 16
NODE_PAD_X = 12
NODE_PAD_Y = 8
NODE_MIN_WIDTH = 96
STAGE_GAP = 36  # horizontal room for the arrow between two stages
BRANCH_GAP = 14  # vertical room between stacked nodes
FAN = 30  # horizontal room of a parallel stage's fan-out and fan-in
ASIDE_DROP = 26  # how far below the main row an on-fail / fallback node sits
EXIT_ROOM = 26  # horizontal room where a two-way stage joins again
CAPTION_HEIGHT = 18
FRAME_PAD = 10
MARGIN = 16
ARROW_HEAD = 6

STATUS_COLOURS: dict[NodeStatus, tuple[str, str]] = {  # (fill, stroke)
    "ok": ("#e6f4ea", "#1e7e34"),
    "failed": ("#fde8e8", "#c62828"),
    "skipped": ("#f3f3f3", "#9e9e9e"),
    "idle": ("#ffffff", "#5f6368"),
}
EDGE_COLOUR = "#5f6368"
TEXT_COLOUR = "#202124"
MUTED_COLOUR = "#5f6368"

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _esc(text: str) -> str:
    """Text safe inside an SVG element or a quoted attribute."""
    return html.escape(_NOT_XML.sub("\ufffd", text), quote=True)


def _num(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def text_width(text: str, font_size: float) -> float:
    """Estimated rendered width of `text` in a monospace font: wide (CJK) characters count double."""
    units = 0.0
    for char in text:
        if unicodedata.combining(char):
            continue
        units += 1.2 if unicodedata.east_asian_width(char) in ("W", "F") else 0.62
    return units * font_size


def _text(x: float, y: float, text: str, size: int, css: str, *, anchor: str = "start", bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    colour = TEXT_COLOUR if css == "label" else MUTED_COLOUR
    return (
        f'<text class="{css}" x="{_num(x)}" y="{_num(y)}" font-size="{size}" text-anchor="{anchor}" '
        f'fill="{colour}"{weight}>{_esc(text)}</text>'
    )


def _arrow_head(x: float, y: float, direction: Literal["right", "down"]) -> str:
    """A filled triangle whose tip is (x, y); drawn explicitly so the SVG needs no `<marker>` ids."""
    h = ARROW_HEAD
    if direction == "right":
        points = f"{_num(x)},{_num(y)} {_num(x - h)},{_num(y - h / 2)} {_num(x - h)},{_num(y + h / 2)}"
    else:
        points = f"{_num(x)},{_num(y)} {_num(x - h / 2)},{_num(y - h)} {_num(x + h / 2)},{_num(y - h)}"
    return f'<polygon class="arrow-head" points="{points}" fill="{EDGE_COLOUR}"/>'


def _path(d: str, css: str = "edge", *, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="5 4"' if dashed else ""
    return f'<path class="{css}" d="{d}" fill="none" stroke="{EDGE_COLOUR}" stroke-width="1.5"{dash}/>'


def _line(x1: float, x2: float, y: float, *, head: bool) -> list[str]:
    parts = [_path(f"M{_num(x1)},{_num(y)} H{_num(x2)}")]
    return [*parts, _arrow_head(x2, y, "right")] if head else parts


def _curve(x1: float, y1: float, x2: float, y2: float, *, head: bool) -> list[str]:
    """A curve leaving and entering horizontally (fan-out, fan-in, joins)."""
    middle = (x1 + x2) / 2
    d = f"M{_num(x1)},{_num(y1)} C{_num(middle)},{_num(y1)} {_num(middle)},{_num(y2)} {_num(x2)},{_num(y2)}"
    parts = [_path(d)]
    return [*parts, _arrow_head(x2, y2, "right")] if head else parts


def node_status(rows: Sequence[NodeTrace]) -> NodeStatus:
    """The status a node is drawn with: its last trace row wins; no row means it did not run (idle)."""
    if not rows:
        return "idle"
    last = rows[-1]
    if last.skipped:
        return "skipped"
    return "ok" if last.ok else "failed"


@dataclass(frozen=True)
class _NodeBox:
    """One operator node with its trace rows, sized from its text."""

    node: OperatorNode
    rows: tuple[NodeTrace, ...]

    @property
    def label(self) -> str:
        name = clip(self.node.operator, MAX_LABEL_CHARS)
        return f"{name} {{{self.node.samples}}}" if self.node.samples > 1 else name

    @property
    def note(self) -> str | None:
        return f"{len(self.rows)} runs" if len(self.rows) > 1 else None

    @property
    def width(self) -> float:
        widths = [text_width(self.label, OPERATOR_FONT), text_width(self.node.id, SMALL_FONT)]
        if self.note:
            widths.append(text_width(self.note, SMALL_FONT))
        return max(NODE_MIN_WIDTH, max(widths) + 2 * NODE_PAD_X)

    @property
    def height(self) -> float:
        return 2 * NODE_PAD_Y + LINE_HEIGHT * (3 if self.note else 2)

    def title(self) -> str:
        lines = [f"{self.node.id} · {self.node.operator}", clip(self.node.prompt or "(no prompt)", MAX_TITLE_CHARS)]
        if self.rows and self.rows[-1].error:
            lines.append("error: " + clip(self.rows[-1].error, 300))
        return "\n".join(lines)

    def draw(self, x: float, top: float) -> str:
        status = node_status(self.rows)
        fill, stroke = STATUS_COLOURS[status]
        dash = ' stroke-dasharray="4 3"' if status == "skipped" else ""
        centre = self.width / 2
        texts = [
            _text(centre, NODE_PAD_Y + 13, self.label, OPERATOR_FONT, "label", anchor="middle", bold=True),
            _text(centre, NODE_PAD_Y + LINE_HEIGHT + 12, self.node.id, SMALL_FONT, "node-id", anchor="middle"),
        ]
        if self.note:
            texts.append(
                _text(centre, NODE_PAD_Y + 2 * LINE_HEIGHT + 12, self.note, SMALL_FONT, "runs", anchor="middle")
            )
        return (
            f'<g class="node {status}" data-node-id="{_esc(self.node.id)}" data-operator="{_esc(self.node.operator)}"'
            f' transform="translate({_num(x)},{_num(top)})">'
            f"<title>{_esc(self.title())}</title>"
            f'<rect width="{_num(self.width)}" height="{_num(self.height)}" rx="6" fill="{fill}" stroke="{stroke}"'
            f' stroke-width="1.5"{dash}/>' + "".join(texts) + "</g>"
        )


@dataclass
class _Block:
    """A stage laid out in its own coordinates: x from 0 to `width`, the main line at y = 0."""

    width: float
    above: float  # how far it reaches above the main line
    below: float  # how far it reaches below it
    parts: list[str] = field(default_factory=list)


class _Trace:
    """Trace rows grouped by node id, in run order."""

    def __init__(self, trace: Sequence[NodeTrace]) -> None:
        self._rows: dict[str, list[NodeTrace]] = {}
        for row in trace:
            self._rows.setdefault(row.node_id, []).append(row)

    def box(self, node: OperatorNode) -> _NodeBox:
        return _NodeBox(node, tuple(self._rows.get(node.id, ())))


class LayoutError(FlowSteerError, ValueError):
    """A stage drawing this viewer cannot draw: a layout it does not know, or the wrong number of nodes."""


def _single_block(boxes: list[_NodeBox], drawing: Drawing) -> _Block:
    if len(boxes) != 1:
        raise LayoutError(f"The {SINGLE!r} layout draws one node; got {len(boxes)}.")
    box = boxes[0]
    return _Block(box.width, box.height / 2, box.height / 2, [box.draw(0, -box.height / 2)])


def _chain_block(boxes: list[_NodeBox], drawing: Drawing) -> _Block:
    """The nodes one after the other on the main line, an arrow between each two."""
    parts: list[str] = []
    x: float = 0
    for index, box in enumerate(boxes):
        if index:
            parts += _line(x, x + STAGE_GAP, 0, head=True)
            x += STAGE_GAP
        parts.append(box.draw(x, -box.height / 2))
        x += box.width
    half = max(box.height for box in boxes) / 2
    return _Block(x, half, half, parts)


def _branches_block(boxes: list[_NodeBox], drawing: Drawing) -> _Block:
    column = max(box.width for box in boxes)
    width = 2 * FAN + column
    total = sum(box.height for box in boxes) + BRANCH_GAP * (len(boxes) - 1)
    parts: list[str] = []
    top = -total / 2
    for box in boxes:
        left = FAN + (column - box.width) / 2
        middle = top + box.height / 2
        parts.append(box.draw(left, top))
        parts += _curve(0, 0, left, middle, head=True)
        parts += _curve(left + box.width, middle, width, 0, head=False)
        top += box.height + BRANCH_GAP
    return _Block(width, total / 2, total / 2, parts)


def _check_block(boxes: list[_NodeBox], drawing: Drawing) -> _Block:
    """`main` on the main line; `straight` (or nothing) after it on the same line; `aside` below and to the
    right, reached by a dashed edge. Conditionals (check / on-pass / on-fail) and fallbacks (A / B) read so."""
    if len(boxes) not in (2, 3):
        raise LayoutError(f"The {CHECK!r} layout draws 2 or 3 nodes; got {len(boxes)}.")
    main, aside = boxes[0], boxes[1]
    straight = boxes[2] if len(boxes) == 3 else None
    straight_label, aside_label = drawing.labels
    gap = max(
        text_width(straight_label, SMALL_FONT) + 24,
        text_width(aside_label, SMALL_FONT) - main.width / 2 + 24,
        STAGE_GAP,
    )
    column_x = main.width + gap
    column = max(aside.width, straight.width if straight else 0)
    exit_x = column_x + column + EXIT_ROOM
    aside_top = main.height / 2 + ASIDE_DROP
    aside_middle = aside_top + aside.height / 2
    parts = [main.draw(0, -main.height / 2), aside.draw(column_x, aside_top)]
    below_x = main.width / 2
    parts.append(
        _path(f"M{_num(below_x)},{_num(main.height / 2)} V{_num(aside_middle)} H{_num(column_x)}", dashed=True)
    )
    parts.append(_arrow_head(column_x, aside_middle, "right"))
    parts.append(_text(below_x + 6, aside_middle - 5, aside_label, SMALL_FONT, "edge-label"))
    parts.append(_text(main.width + gap / 2, -5, straight_label, SMALL_FONT, "edge-label", anchor="middle"))
    parts += _curve(column_x + aside.width, aside_middle, exit_x, 0, head=False)
    above = main.height / 2
    if straight is None:
        parts += _line(main.width, exit_x, 0, head=False)
    else:
        parts.append(straight.draw(column_x, -straight.height / 2))
        parts += _line(main.width, column_x, 0, head=True)
        parts += _line(column_x + straight.width, exit_x, 0, head=False)
        above = max(above, straight.height / 2)
    return _Block(exit_x, above, aside_top + aside.height, parts)


def _repeat_block(boxes: list[_NodeBox], drawing: Drawing) -> _Block:
    """The nodes in a rounded frame captioned with the drawing's note (a loop's `× N`), with a dashed repeat
    edge over them."""
    row = max(box.height for box in boxes)
    caption = drawing.note
    inner = FRAME_PAD + 8
    parts: list[str] = []
    x: float = inner
    lefts: list[float] = []
    for index, box in enumerate(boxes):
        parts += _line(x - (inner if index == 0 else STAGE_GAP), x, 0, head=True)
        parts.append(box.draw(x, -box.height / 2))
        lefts.append(x)
        x += box.width + STAGE_GAP
    body_end = x - STAGE_GAP
    width = max(body_end + inner, text_width(caption, SMALL_FONT) + 2 * FRAME_PAD)
    parts += _line(body_end, width, 0, head=False)
    repeat_y = -row / 2 - 12
    start_x = lefts[-1] + boxes[-1].width * 2 / 3
    end_x = lefts[0] + boxes[0].width / 3
    tops = (-boxes[-1].height / 2, -boxes[0].height / 2)
    d = f"M{_num(start_x)},{_num(tops[0])} V{_num(repeat_y)} H{_num(end_x)} V{_num(tops[1])}"
    parts.append(_path(d, "edge repeat", dashed=True))
    parts.append(_arrow_head(end_x, tops[1], "down"))
    frame_top = repeat_y - CAPTION_HEIGHT - 4
    frame = (
        f'<rect class="frame" x="0" y="{_num(frame_top)}" width="{_num(width)}" '
        f'height="{_num(row / 2 + FRAME_PAD - frame_top)}" rx="12" fill="none" stroke="{EDGE_COLOUR}"/>'
    )
    label = _text(FRAME_PAD, frame_top + 14, caption, SMALL_FONT, "loop-count")
    return _Block(width, -frame_top, row / 2 + FRAME_PAD, [frame, label, *parts])


def _with_caption(block: _Block, caption: str) -> _Block:
    """A structure's kind named above it, so a reader tells a parallel stage from stacked stages."""
    text = _text(0, -block.above - 6, caption, SMALL_FONT, "caption")
    width = max(block.width, text_width(caption, SMALL_FONT))
    return _Block(width, block.above + CAPTION_HEIGHT, block.below, [text, *block.parts])


_LAYOUTS: dict[str, Callable[[list[_NodeBox], Drawing], _Block]] = {
    SINGLE: _single_block,
    BRANCHES: _branches_block,
    CHAIN: _chain_block,
    CHECK: _check_block,
    REPEAT: _repeat_block,
}


def _stage_block(stage: Stage, trace: _Trace) -> _Block:
    drawing = kind_of(stage).drawing(stage)
    layout = _LAYOUTS.get(drawing.layout)
    if layout is None:
        raise LayoutError(
            f"Stage kind {stage.kind!r} asks for layout {drawing.layout!r}; the viewer draws {', '.join(_LAYOUTS)}."
        )
    if not drawing.nodes:
        raise LayoutError(f"Stage kind {stage.kind!r} gave no nodes to draw.")
    block = layout([trace.box(node) for node in drawing.nodes], drawing)
    return _with_caption(block, drawing.caption) if drawing.caption else block


def _terminal(x: float, y: float, text: str) -> tuple[str, float]:
    """A pill marking where the task enters or the answer leaves; returns its markup and width."""
    width = text_width(text, SMALL_FONT) + 20
    markup = (
        f'<g class="terminal" transform="translate({_num(x)},{_num(y - 11)})">'
        f'<rect width="{_num(width)}" height="22" rx="11" fill="#f8f9fa" stroke="{EDGE_COLOUR}"/>'
        + _text(width / 2, 15, text, SMALL_FONT, "terminal-label", anchor="middle")
        + "</g>"
    )
    return markup, width


def _svg(width: float, height: float, body: str, css: str = "workflow-graph") -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{css}" width="{_num(width)}" height="{_num(height)}" '
        f'viewBox="0 0 {_num(width)} {_num(height)}" font-family="monospace" role="img" '
        f'aria-label="workflow graph">{body}</svg>'
    )


def _message_svg(message: str) -> str:
    width = text_width(message, OPERATOR_FONT) + 2 * MARGIN
    return _svg(width, 48, _text(MARGIN, 29, message, OPERATOR_FONT, "empty"), "workflow-graph empty")


def render_graph_svg(graph: WorkflowGraph, trace: Sequence[NodeTrace] = ()) -> str:
    """The graph as one `<svg class="workflow-graph">`; node statuses come from `trace` (its last row per node)."""
    if graph.is_empty:
        return _message_svg("no stages yet")
    rows = _Trace(trace)
    blocks = [_stage_block(stage, rows) for stage in graph.stages]
    above = max(max(block.above for block in blocks), 11)
    below = max(max(block.below for block in blocks), 11)
    main_y = MARGIN + above
    start, x = _terminal(MARGIN, main_y, "task")
    x += MARGIN
    parts = [start]
    for stage, block in zip(graph.stages, blocks, strict=True):
        parts += _line(x, x + STAGE_GAP, main_y, head=True)
        x += STAGE_GAP
        parts.append(
            f'<g class="stage {stage.kind}" data-stage-id="{_esc(stage.id)}" '
            f'transform="translate({_num(x)},{_num(main_y)})">' + "".join(block.parts) + "</g>"
        )
        x += block.width
    parts += _line(x, x + STAGE_GAP, main_y, head=True)
    x += STAGE_GAP
    end, end_width = _terminal(x, main_y, "answer")
    parts.append(end)
    return _svg(x + end_width + MARGIN, main_y + below + MARGIN, "".join(parts))


def graph_from_dsl(dsl: str) -> WorkflowGraph:
    """The graph a DSL string builds (ids node_1..node_n, no prompts), as the canvas would number it.
    Raises DSLSyntaxError or pydantic's ValidationError for text that is no drawable workflow."""
    stages = [
        build_stage(blueprint, index)
        for index, blueprint in enumerate(parse_dsl(dsl, max_operators=MAX_DSL_OPERATORS), start=1)
    ]
    return WorkflowGraph(stages=stages, next_index=len(stages) + 1)


def render_dsl_svg(dsl: str, trace: Sequence[NodeTrace] = ()) -> str:
    """The SVG of a workflow recorded only as DSL (e.g. an episode); unparsable text gives a message, not an
    error, because a recorded DSL can be anything a director wrote."""
    try:
        graph = graph_from_dsl(dsl)
    except (DSLSyntaxError, ValidationError):
        return _message_svg("workflow not drawable: " + clip(dsl, 80))
    return render_graph_svg(graph, trace)


__all__ = ["LayoutError", "graph_from_dsl", "node_status", "render_dsl_svg", "render_graph_svg", "text_width"]
