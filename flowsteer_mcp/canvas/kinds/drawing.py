"""How a stage is drawn, as data: a kind picks one of a few generic layouts and names what goes where.

Why data: the viewer (`viewer/graph_svg.py`) draws graphs, but the canvas must not import it, and a kind added
later (even from a test) must be drawable without touching the viewer. So a kind describes its stage as a
`Drawing` and the viewer renders the layout it names; a layout the viewer does not know is an error there,
never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowsteer_mcp.canvas.kinds.node import OperatorNode

# The layouts the viewer knows, with the nodes each expects (in `Drawing.nodes` order).
SINGLE = "single"  # one node on the main line
BRANCHES = "branches"  # nodes side by side, fanned out from and back into the main line
CHAIN = "chain"  # nodes one after the other on the main line
CHECK = "check"  # nodes[0] on the main line, nodes[1] below it (dashed edge), nodes[2] (optional) after it
REPEAT = "repeat"  # nodes in a chain inside a frame with a repeat edge over it
LAYOUTS = (SINGLE, BRANCHES, CHAIN, CHECK, REPEAT)


@dataclass(frozen=True)
class Drawing:
    """One stage as the viewer should draw it.

    `caption` names the structure above its block (empty: no caption, as for a single operator). `labels` are
    the edge labels of a `check` layout: (straight edge, edge to the node below). `note` is the frame caption of
    a `repeat` layout (e.g. the iteration count).
    """

    layout: str
    nodes: tuple[OperatorNode, ...]
    caption: str = ""
    labels: tuple[str, str] = ("", "")
    note: str = ""
