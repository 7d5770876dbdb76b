"""Replay cheap math workflows on recorded draws: accuracy and executor tokens per candidate, offline.

Why: choosing a math default must happen on training problems, and running every candidate workflow on the
executor costs hours on a CPU. The candidates below only vote over draws a screen already made: the 8 chains
of thought of `direct-sc8` (draw 0 is direct's own greedy answer) and the executed programs of `pot4-vote`
(program of thought). Each candidate's answer is what the canvas's vote would pick from its subset of those
draws (`answer_classes`, earliest candidate on ties, as ScEnsemble does), graded by the one scorer; its tokens
are what its own requests would cost: the greedy call as recorded, plus one prompt and the completions for
each `n` request of sampled draws (the prompt is recovered from the recorded batch, whose first member
carries it). The candidates are fixed here, before looking at the numbers; the dev slice judges the chosen
one once.

    python scripts/replay_math_votes.py --report runs/screen34-math-draws/report.json \
        --data ../shared/data/train/gsm8k_train.jsonl --skip 20 --limit 40
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.answers.voting import answer_classes
from training.data import Problem, load_problems
from training.evaluate.paired import mcnemar_exact
from training.scoring.scorer import score_text

COT = "template:direct-sc8"
POT = "workflow:pot4-vote"


@dataclass(frozen=True)
class Draw:
    text: str  # "" when the draw failed
    right: bool


@dataclass(frozen=True)
class Node:
    """One sampled node's draws in order (draw 0 greedy), and what its requests cost."""

    draws: list[Draw]
    greedy_tokens: int  # the greedy call: its prompt and completion
    prompt_tokens: int  # the prompt of the sampled draws' `n` request
    sample_completions: list[int]  # per sampled draw, its completion tokens

    def cost(self, count: int) -> int:
        """Tokens of draws 0..count-1 made as the greedy call plus one `n` request for the rest."""
        if count <= 1:
            return self.greedy_tokens
        return self.greedy_tokens + self.prompt_tokens + sum(self.sample_completions[: count - 1])


def node_of(item: dict[str, Any], problem: Problem) -> Node:
    rows = [row for row in item["trace"] if row["node_id"] == "node_1"]
    draws = [
        Draw(row["output"] if row["ok"] else "", row["ok"] and score_text(problem, row["output"]).correct)
        for row in rows
    ]
    sampled = [int(row["tokens"]) for row in rows[1:]]
    # The first member of the sampled draws' `n` request carries its prompt; the others their completions only.
    typical = statistics.median(sampled[1:]) if len(sampled) > 1 else 0
    prompt = max(max(sampled, default=0) - int(typical), 0)
    completions = list(sampled)
    if completions:
        leader = completions.index(max(completions))
        completions[leader] -= prompt
    return Node(draws=draws, greedy_tokens=int(rows[0]["tokens"]), prompt_tokens=prompt, sample_completions=completions)


def vote(draws: Sequence[Draw]) -> bool:
    """Whether the canvas's vote over `draws` (earliest candidate wins a tie) picks a right answer."""
    usable = [d for d in draws if d.text]
    classes = answer_classes([d.text for d in usable], "math")
    if not classes:
        return bool(usable) and usable[0].right
    best = min(classes, key=lambda members: (-len(members), min(members)))
    return usable[min(best)].right


Candidate = Callable[[Node, Node], tuple[bool, int]]

CANDIDATES: dict[str, Candidate] = {
    "direct": lambda c, p: (c.draws[0].right, c.cost(1)),
    "direct-sc3": lambda c, p: (vote(c.draws[:3]), c.cost(3)),
    "direct-sc4": lambda c, p: (vote(c.draws[:4]), c.cost(4)),
    "direct-sc8 (the default)": lambda c, p: (vote(c.draws[:8]), c.cost(8)),
    "pot": lambda c, p: (p.draws[0].right, p.cost(1)),
    "pot4-vote": lambda c, p: (vote(p.draws[:4]), p.cost(4)),
    "direct+pot4-vote": lambda c, p: (vote([c.draws[0], *p.draws[:4]]), c.cost(1) + p.cost(4)),
}


def replay(report: dict[str, Any], problems: dict[str, Problem]) -> dict[str, list[tuple[bool, int]]]:
    by_problem: dict[str, dict[str, dict[str, Any]]] = {}
    for item in report["items"]:
        by_problem.setdefault(item["problem_id"], {})[item["director"]] = item
    results: dict[str, list[tuple[bool, int]]] = {name: [] for name in CANDIDATES}
    for problem_id, items in sorted(by_problem.items()):
        if COT not in items or POT not in items:
            continue  # a problem the screen did not finish for both
        cot, pot = (node_of(items[name], problems[problem_id]) for name in (COT, POT))
        if len(cot.draws) < 8 or len(pot.draws) < 4:
            continue
        for name, candidate in CANDIDATES.items():
            results[name].append(candidate(cot, pot))
    return results


def table(results: dict[str, list[tuple[bool, int]]]) -> str:
    direct = results["direct"]
    if not direct:
        raise SystemExit("no problem has both recorded workflows complete: nothing to replay")
    direct_tokens = sum(tokens for _, tokens in direct) / len(direct)
    lines = [
        f"n = {len(direct)} problems",
        "| candidate | accuracy (%) | tokens per episode (x direct) | vs direct (won / lost, exact McNemar p) |",
        "|---|---:|---:|---|",
    ]
    for name, rows in results.items():
        accuracy = 100 * sum(right for right, _ in rows) / len(rows)
        tokens = sum(t for _, t in rows) / len(rows)
        won = sum(1 for (right, _), (base, _) in zip(rows, direct, strict=True) if right and not base)
        lost = sum(1 for (right, _), (base, _) in zip(rows, direct, strict=True) if base and not right)
        versus = "" if name == "direct" else f"{won} / {lost} (p = {mcnemar_exact(won, lost):.3f})"
        lines.append(f"| `{name}` | {accuracy:.1f} | {tokens:.0f} ({tokens / direct_tokens:.2f}x) | {versus} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--report", type=Path, required=True, help="a report.json holding both workflows' traces")
    parser.add_argument("--data", type=Path, required=True, help="the problems file the screen ran on")
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--limit", type=int, required=True)
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text(encoding="utf-8"))
    problems = {p.id: p for p in load_problems(args.data, skip=args.skip, limit=args.limit)}
    print(table(replay(report, problems)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
