"""scripts/replay_math_votes.py: the canvas's vote over recorded draws, and what each candidate's requests cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.scripts import load_module
from training.data import Problem

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "replay_math_votes.py"


replay = load_module(SCRIPT, "replay_math_votes")
PROBLEM = Problem(id="gsm8k/t-1", source="gsm8k", problem_type="math", problem="What is 6 * 7?", ground_truth="42")
PROMPT = 100  # the prompt tokens of each request in the recorded traces below


def item(director: str, answers: list[str], completion: int) -> dict[str, Any]:
    """A recorded episode: a greedy call, then the samples as one `n` request whose first member carries the
    prompt (as the OpenAI backend splits an `n` request's usage)."""
    rows = [{"node_id": "node_1", "ok": True, "output": answers[0], "tokens": PROMPT + completion}]
    for index, answer in enumerate(answers[1:]):
        rows.append(
            {"node_id": "node_1", "ok": True, "output": answer, "tokens": completion + (PROMPT if index == 0 else 0)}
        )
    rows.append({"node_id": "node_2", "ok": True, "output": "", "tokens": 0})
    return {"director": director, "problem_id": PROBLEM.id, "trace": rows}


def boxed(value: int) -> str:
    return f"so the answer is \\boxed{{{value}}}."


def test_each_candidate_votes_its_draws_and_pays_its_own_requests() -> None:
    cot = [boxed(41), boxed(42), boxed(42), boxed(41), boxed(42), boxed(42), boxed(40), boxed(42)]
    pot = ["42", "42", "41", "42"]
    report = {"items": [item(replay.COT, cot, 300), item(replay.POT, pot, 80)]}
    results = replay.replay(report, {PROBLEM.id: PROBLEM})
    outcome = {name: rows[0] for name, rows in results.items()}
    assert outcome["direct"] == (False, PROMPT + 300), "the greedy chain says 41"
    assert outcome["direct-sc3"] == (True, (PROMPT + 300) + PROMPT + 2 * 300), "41, 42, 42: 42 wins"
    assert outcome["direct-sc4"] == (False, (PROMPT + 300) + PROMPT + 3 * 300), "a 2-2 tie goes to the earliest"
    assert outcome["direct-sc8 (the default)"] == (True, (PROMPT + 300) + PROMPT + 7 * 300)
    assert outcome["pot"] == (True, PROMPT + 80)
    assert outcome["pot4-vote"] == (True, (PROMPT + 80) + PROMPT + 3 * 80)
    assert outcome["direct+pot4-vote"] == (True, (PROMPT + 300) + (PROMPT + 80) + PROMPT + 3 * 80)


def test_problems_missing_a_workflow_are_left_out_and_the_table_says_how_many_remain() -> None:
    report = {"items": [item(replay.COT, [boxed(42)] * 8, 300)]}
    results = replay.replay(report, {PROBLEM.id: PROBLEM})
    assert all(rows == [] for rows in results.values())
    complete = {"items": [item(replay.COT, [boxed(42)] * 8, 300), item(replay.POT, ["42"] * 4, 80)]}
    text = replay.table(replay.replay(complete, {PROBLEM.id: PROBLEM}))
    assert text.startswith("n = 1 problems") and "| `pot4-vote` | 100.0 |" in text
