"""Replay wave schedules of the code `passes` rule on recorded draws: accuracy and executor tokens, offline.

Why: the `passes` rule (operators/stopping.py) draws a code node's samples in waves and stops after the first
wave holding a program that passes every public test. How large the waves are decides what it costs, and that
choice must be made on training problems. Running every schedule on the executor would cost hours here, and it
is not needed: draw i of a sampled node has the same seed in every schedule, so the draws a `direct8-tests`
screen recorded (the greedy program, then, when it fails the public tests, the seven others) are the draws any
schedule up to 8 would make. For each schedule this asks the rule itself (`SomeDrawPasses.decide`, which runs the
drawn programs in the sandbox) after each wave but the last whether to stop, lets the canvas's own
code selection (`judge_code_candidates`) pick among the drawn programs and grades the pick with the one scorer.

What is estimated, not replayed: the selection's proposed extra inputs (an executor call made when several
distinct programs tie on the public tests) are left out, and that call is charged at the recorded size; each
wave's request is charged the prompt once, estimated from the recorded batch (its first member carries it).
The candidates are fixed here, before looking at the numbers; the dev slices judge the chosen one once.

    python scripts/replay_code_waves.py --report runs/screen34-code-train/report.json \
        --report runs/screen34-code-train2/report.json --data ../shared/data/train/mbpp_train.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from operators.library._execution import execute
from operators.library.code_selection import judge_code_candidates
from operators.stopping import Draw, SomeDrawPasses, TaskView
from training.data import Problem, load_problems
from training.evaluate.paired import mcnemar_exact
from training.evaluate.tasks import task_for
from training.scoring.scorer import score

SCREEN = "template:direct8-tests"
SANDBOX_TIMEOUT_S = 10.0
PROBLEMS_AT_ONCE = 4  # sandboxes at once stay modest on 2 cores

# name -> wave sizes, the greedy draw first (fixed before the replay was first run). The k8 1,3,4 schedule is the
# `passes` rule of direct8-passes, k4 1,3 that of direct4-passes, k8 1,7 the `tests` rule of direct8-tests.
SCHEDULES: dict[str, tuple[int, ...]] = {
    "direct": (1,),
    "k8 1,3,4": (1, 3, 4),
    "k8 1,2,2,3": (1, 2, 2, 3),
    "k8 1,1,2,4": (1, 1, 2, 4),
    "k7 1,3,3": (1, 3, 3),
    "k6 1,3,2": (1, 3, 2),
    "k6 1,2,3": (1, 2, 3),
    "k5 1,2,2": (1, 2, 2),
    "k4 1,3": (1, 3),
    "k8 1,7": (1, 7),
}


@dataclass(frozen=True)
class Recorded:
    """One problem's recorded draws (draw 0 greedy) and what their requests cost."""

    problem: Problem
    programs: list[str | None]  # None: a draw that failed
    greedy_tokens: int
    prompt_tokens: int  # the sampled request's prompt, charged once per wave
    completions: list[int]  # per sampled draw, its completion tokens
    selection_tokens: int  # the selection's proposal call, when it had to make one


@dataclass(frozen=True)
class Outcome:
    right: bool
    tokens: int


def recorded_of(item: dict[str, Any], problem: Problem, typical_selection: int) -> Recorded:
    rows = [row for row in item["trace"] if row["node_id"] == "node_1"]
    programs = [row["output"] if row["ok"] and row["output"] else None for row in rows]
    sampled = [int(row["tokens"]) for row in rows[1:]]
    typical = statistics.median(sampled[1:]) if len(sampled) > 1 else 0
    prompt = max(sampled[0] - int(typical), 0) if sampled else 0
    completions = list(sampled)
    if completions:
        completions[0] -= prompt
    selection = [int(row["tokens"]) for row in item["trace"] if row["node_id"] == "node_2" and int(row["llm_calls"])]
    return Recorded(
        problem=problem,
        programs=programs,
        greedy_tokens=int(rows[0]["tokens"]),
        prompt_tokens=prompt,
        completions=completions,
        selection_tokens=selection[0] if selection else typical_selection,
    )


async def passes_public_tests(program: str | None, problem: Problem) -> bool:
    task = task_for(problem)
    if not program or not task.public_tests or not task.entry_point:
        return False
    summary = await execute(program, tests=task.public_tests, entry_point=task.entry_point, timeout_s=SANDBOX_TIMEOUT_S)
    return summary.succeeded


async def rule_stops(programs: Sequence[str | None], task: TaskView) -> bool:
    """What the `passes` rule decides after a wave, asked the way the engine asks it."""
    draws = [Draw(text=program, code=program) for program in programs if program]
    decision = await SomeDrawPasses().decide(draws, task, timeout_s=SANDBOX_TIMEOUT_S)
    return decision.stop


async def replay_one(record: Recorded, waves: tuple[int, ...], passing: list[bool]) -> Outcome:
    """The rule's waves over the recorded draws, the selection's pick, its grade and its cost."""
    task = task_for(record.problem)
    view = TaskView(task_type="code", public_tests=task.public_tests, entry_point=task.entry_point)
    drawn, tokens = 0, record.greedy_tokens
    for number, size in enumerate(waves):
        if number > 0:
            tokens += record.prompt_tokens + sum(record.completions[drawn - 1 : drawn - 1 + size])
        drawn += size
        if drawn >= len(record.programs):  # the last recorded draw (the greedy one alone when it passed)
            break
        if number < len(waves) - 1 and await rule_stops(record.programs[:drawn], view):
            break
    candidates = record.programs[:drawn]
    usable = [p for p in candidates if p]
    if not usable:
        return Outcome(False, tokens)
    judged = await judge_code_candidates(
        candidates, entry_point=task.entry_point or "", public_tests=task.public_tests, timeout_s=SANDBOX_TIMEOUT_S
    )
    pick = candidates[judged.index] if judged is not None else usable[0]
    passing_pool = {p for p, ok in zip(candidates, passing[:drawn], strict=True) if ok and p}
    tied = passing_pool if passing_pool else set(usable)
    if len(candidates) > 1 and len(tied) > 1:  # the selection would have asked the executor for extra inputs
        tokens += record.selection_tokens
    graded = await score(record.problem, pick)
    return Outcome(graded.correct, tokens)


async def replay(records: Sequence[Recorded], names: Sequence[str]) -> dict[str, list[Outcome]]:
    limit = asyncio.Semaphore(PROBLEMS_AT_ONCE)

    async def one(record: Recorded) -> list[Outcome]:
        async with limit:
            checks = [passes_public_tests(program, record.problem) for program in record.programs]
            passing = list(await asyncio.gather(*checks))
            for name in names:
                if 1 < len(record.programs) < sum(SCHEDULES[name]):
                    raise SystemExit(
                        f"{record.problem.id}: the screen recorded {len(record.programs)} draws, fewer than {name}"
                    )
            return list(await asyncio.gather(*(replay_one(record, SCHEDULES[name], passing) for name in names)))

    per_problem = await asyncio.gather(*(one(record) for record in records))
    return {name: [outcomes[i] for outcomes in per_problem] for i, name in enumerate(names)}


def table(results: dict[str, list[Outcome]]) -> str:
    base_name = next(iter(results))
    base = results[base_name]
    base_tokens = sum(o.tokens for o in base) / len(base)
    lines = [
        f"n = {len(base)} problems",
        "| schedule | accuracy (%) | tokens per episode (x direct) | vs direct (won / lost, exact McNemar p) |",
        "|---|---:|---:|---|",
    ]
    for name, rows in results.items():
        accuracy = 100 * sum(o.right for o in rows) / len(rows)
        tokens = sum(o.tokens for o in rows) / len(rows)
        won = sum(1 for o, b in zip(rows, base, strict=True) if o.right and not b.right)
        lost = sum(1 for o, b in zip(rows, base, strict=True) if b.right and not o.right)
        versus = "" if name == base_name else f"{won} / {lost} (p = {mcnemar_exact(won, lost):.3f})"
        lines.append(f"| {name} | {accuracy:.1f} | {tokens:.0f} ({tokens / base_tokens:.2f}x) | {versus} |")
    return "\n".join(lines)


def load_records(reports: Sequence[Path], data: Sequence[Path]) -> list[Recorded]:
    problems = {p.id: p for path in data for p in load_problems(path)}
    items = []
    for path in reports:
        report = json.loads(path.read_text(encoding="utf-8"))
        items += [item for item in report["items"] if item["director"] == SCREEN]
    if not items:
        raise SystemExit(f"no {SCREEN} episodes in the reports: nothing to replay")
    failed = [item["problem_id"] for item in items if item.get("score_method") == "executor_unavailable"]
    if failed:
        raise SystemExit(f"the screen has run failures ({', '.join(failed)}): resume it first")
    selections = [
        int(row["tokens"])
        for item in items
        for row in item["trace"]
        if row["node_id"] == "node_2" and int(row["llm_calls"])
    ]
    typical_selection = int(statistics.median(selections)) if selections else 0
    return [recorded_of(item, problems[item["problem_id"]], typical_selection) for item in items]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--report", type=Path, action="append", required=True, help="a direct8-tests report.json")
    parser.add_argument("--data", type=Path, action="append", required=True, help="a problems file the screen ran on")
    parser.add_argument(
        "--schedule", action="append", choices=list(SCHEDULES), help="replay only these (default: all; direct always)"
    )
    args = parser.parse_args(argv)
    names = ["direct", *[name for name in (args.schedule or SCHEDULES) if name != "direct"]]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    records = load_records(args.report, args.data)
    print(table(asyncio.run(replay(records, names))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
