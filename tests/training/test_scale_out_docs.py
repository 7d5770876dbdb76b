"""docs/scale-out.md gives the commands the CI's cluster test runs (tests/training/test_cluster_e2e.py): the same
torchrun line and the same flowsteer-mcp flags, so the recipe cannot drift from what is tested."""

from __future__ import annotations

from pathlib import Path

from tests.training.test_cluster_e2e import TORCHRUN, mcp_server_arguments

DOC = (Path(__file__).resolve().parents[2] / "docs" / "scale-out.md").read_text(encoding="utf-8")


def test_the_recipe_runs_the_tested_torchrun_line() -> None:
    assert " ".join(["torchrun", *TORCHRUN]) in DOC


def test_the_recipe_starts_each_fleet_server_with_the_tested_flags() -> None:
    store = "postgresql://flowsteer@127.0.0.1/flowsteer"
    for port in (8101, 8102):
        assert " ".join(["flowsteer-mcp", *mcp_server_arguments(port, store, "executor.toml")]) in DOC
