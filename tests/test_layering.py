"""The architecture's import rules, checked on the source: no back-edges between layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RULES = [
    ("operators", ("flowsteer_mcp", "training")),
    ("flowsteer_mcp", ("training",)),
    ("flowsteer_mcp/canvas", ("flowsteer_mcp.server", "flowsteer_mcp.engine", "flowsteer_mcp.director", "mcp")),
    ("flowsteer_mcp/engine", ("flowsteer_mcp.server", "flowsteer_mcp.director", "mcp")),
    # the HTTP Host/Origin policy lives beside both (flowsteer_mcp/host_policy.py): the server mounts the viewer,
    # never the reverse
    ("flowsteer_mcp/viewer", ("flowsteer_mcp.server",)),
    # training reaches the canvas and the server through their public surface (flowsteer_mcp/api.py) or MCP
    ("training", ("flowsteer_mcp.canvas", "flowsteer_mcp.server")),
]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize(("folder", "forbidden"), RULES)
def test_no_back_edges(folder: str, forbidden: tuple[str, ...]) -> None:
    offenders = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for name in imported_modules(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []
