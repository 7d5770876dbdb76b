"""Install a plug-in the way pip leaves one on disk, without pip: a module, and beside it a `*.dist-info`
folder with METADATA and entry_points.txt, in a folder put on sys.path, where `importlib.metadata` finds it."""

from __future__ import annotations

from pathlib import Path

import pytest


def install_distribution(
    root: Path, module: str, source: str, group: str, entry_points: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write `module` (its `source`) and a distribution of the same name that publishes `entry_points`
    (name -> "module:attribute") under `group`; sys.path holds `root` until the test ends."""
    root.mkdir(parents=True)
    (root / f"{module}.py").write_text(source, encoding="utf-8")
    dist_info = root / f"{module}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n", encoding="utf-8")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (dist_info / "entry_points.txt").write_text(f"[{group}]\n{lines}", encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))


def module_name(prefix: str, tmp_path: Path) -> str:
    """A module name no other test uses (imported modules outlive their test in sys.modules)."""
    return f"{prefix}_{tmp_path.name.replace('-', '_')}"
