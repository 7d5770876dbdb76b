"""scripts/director_workflows.py: what a director built, counted per source and marked against the default."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.scripts import load_module

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "director_workflows.py"
director_workflows = load_module(SCRIPT, "director_workflows")


def _item(director: str, source: str, task_type: str, dsl: str) -> dict[str, str]:
    return {"director": director, "source": source, "problem_type": task_type, "dsl": dsl}


def test_the_table_counts_the_directors_workflows_per_source(tmp_path: Path) -> None:
    items = [
        _item("policy", "gsm8k", "math", "Custom{8} -> ScEnsemble"),
        _item("policy", "gsm8k", "math", "Custom{8} -> ScEnsemble"),
        _item("policy", "gsm8k", "math", ""),
        _item("policy", "mbpp", "code", "Programmer{8|redraw} -> ScEnsemble"),
        _item("template", "mbpp", "code", "Programmer{8|redraw} -> ScEnsemble"),  # another director: not counted
    ]
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"items": items}))
    table = director_workflows.workflow_table([report], "policy", ["run"])
    assert "| run | gsm8k (n = 3) | `Custom{8} -> ScEnsemble` | 2 | yes (`direct-sc8`) |" in table
    assert "| run | gsm8k (n = 3) | `(none)` | 1 | no |" in table
    assert "| run | mbpp (n = 1) | `Programmer{8\\|redraw} -> ScEnsemble` | 1 | yes (`direct8-redraw`) |" in table
    assert "template" not in table and table.count("\n") == 5
