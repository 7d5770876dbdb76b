"""scripts/slim_report.py: a published copy of a report keeps every graded field and drops only the traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import load_module
from training.evaluate.results import ItemResult

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slim_report.py"
slim_report = load_module(SCRIPT, "slim_report")


def test_the_copy_keeps_the_graded_items_and_the_report_fields_and_drops_the_traces(tmp_path: Path) -> None:
    item = ItemResult(
        director="direct", problem_id="mbpp/1", source="mbpp", problem_type="code", score=1.0, correct=True, tokens=210
    ).model_copy(update={"trace": [{"node_id": "node_1", "output": "def f(): ..." * 100}]})
    source = tmp_path / "report.json"
    source.write_text(
        json.dumps({"config": {"directors": ["direct"]}, "items": [item.model_dump(mode="json")], "paired": []})
    )
    target = tmp_path / "docs" / "report.json"
    assert slim_report.main([str(source), str(target)]) == 0
    copied = json.loads(target.read_text())
    assert copied["config"] == {"directors": ["direct"]} and copied["paired"] == []
    assert copied["items"] == [item.model_copy(update={"trace": []}).model_dump(mode="json")]


def test_it_refuses_to_overwrite_its_source(tmp_path: Path) -> None:
    source = tmp_path / "report.json"
    source.write_text('{"items": []}')
    with pytest.raises(SystemExit, match="replace its source"):
        slim_report.main([str(source), str(source)])
    assert source.read_text() == '{"items": []}'
