"""scripts/replay_code_waves.py: the `passes` rule's waves over recorded draws, the sandbox's pick, and its cost."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripts import load_module
from training.data import Problem

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "replay_code_waves.py"
replay = load_module(SCRIPT, "replay_code_waves")

PROBLEM = Problem(
    id="mbpp/t-1",
    source="mbpp",
    problem_type="code",
    problem="Write a function to add two numbers.\n\ndef add(a, b):",
    ground_truth="def add(a, b):\n    return a + b",
    meta={
        "entry_point": "add",
        "public_tests": "assert add(1, 2) == 3",
        "test": "assert add(1, 2) == 3\nassert add(-4, 1) == -3\nassert add(0, 0) == 0",
    },
)
RIGHT = "def add(a, b):\n    return a + b"
PROMPT, GREEDY, COMPLETION, SELECTION = 100, 130, 40, 200


def wrong(number: int) -> str:
    return f"def add(a, b):\n    return a - b + {number}"  # distinct programs, each failing the public test


def item(programs: list[str], *, selection: bool = True) -> dict[str, Any]:
    """A recorded direct8-tests episode: the greedy call, then the samples as one `n` request whose first member
    carries the prompt (as the OpenAI backend splits an `n` request's usage), then the selection."""
    rows = [{"node_id": "node_1", "ok": True, "output": programs[0], "tokens": GREEDY, "llm_calls": 1}]
    for index, program in enumerate(programs[1:]):
        tokens = COMPLETION + (PROMPT if index == 0 else 0)
        rows.append(
            {"node_id": "node_1", "ok": True, "output": program, "tokens": tokens, "llm_calls": int(index == 0)}
        )
    if selection:
        rows.append({"node_id": "node_2", "ok": True, "output": "", "tokens": SELECTION, "llm_calls": 1})
    return {"director": replay.SCREEN, "problem_id": PROBLEM.id, "trace": rows}


def outcomes(programs: list[str]) -> dict[str, Any]:
    record = replay.recorded_of(item(programs), PROBLEM, typical_selection=SELECTION)
    results = asyncio.run(replay.replay([record], list(replay.SCHEDULES)))
    return {name: rows[0] for name, rows in results.items()}


def test_each_schedule_stops_at_the_first_wave_holding_a_passing_program_and_pays_its_requests() -> None:
    # The greedy program and draws 1-3 fail; draw 4 is right.
    got = outcomes([wrong(0), wrong(1), wrong(2), wrong(3), RIGHT, wrong(5), wrong(6), wrong(7)])
    assert got["direct"] == replay.Outcome(False, GREEDY)
    # 1,3,4: the second wave holds no passing program, the third does; no tie, so no selection call.
    assert got["k8 1,3,4"] == replay.Outcome(True, GREEDY + 2 * PROMPT + 7 * COMPLETION)
    # 1,2,2,3: draw 4 is in the third wave (draws 3 and 4), so the fourth is never asked for.
    assert got["k8 1,2,2,3"] == replay.Outcome(True, GREEDY + 2 * PROMPT + 4 * COMPLETION)
    # 1,3 (k = 4): nothing passes, the four distinct failures tie, so the selection asks for inputs.
    assert got["k4 1,3"] == replay.Outcome(False, GREEDY + PROMPT + 3 * COMPLETION + SELECTION)
    assert got["k8 1,7"] == replay.Outcome(True, GREEDY + PROMPT + 7 * COMPLETION)


def test_a_greedy_program_that_passes_ends_every_schedule_at_one_draw() -> None:
    record = replay.recorded_of(item([RIGHT], selection=False), PROBLEM, typical_selection=SELECTION)
    results = asyncio.run(replay.replay([record], list(replay.SCHEDULES)))
    assert {rows[0] for rows in results.values()} == {replay.Outcome(True, GREEDY)}
    text = replay.table(results)
    assert text.startswith("n = 1 problems") and "| k8 1,3,4 | 100.0 | 130 (1.00x) |" in text


def test_a_screen_with_run_failures_is_refused(tmp_path: Path) -> None:
    failed = {**item([RIGHT]), "score_method": "executor_unavailable"}
    report = tmp_path / "report.json"
    report.write_text('{"items": [' + json.dumps(failed) + "]}", encoding="utf-8")
    data = tmp_path / "problems.jsonl"
    data.write_text(PROBLEM.model_dump_json() + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="run failures"):
        replay.load_records([report], [data])
