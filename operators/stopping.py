"""Stopping rules for a sampled node: when the draws so far make the remaining draws pointless.

Why: a node with `samples: k` pays k executor calls on every task, although on most tasks its first draws
already settle the answer (direct's greedy program passes the public tests; the first few sampled answers
agree). A stopping rule lets the node draw in waves and stop once more draws could not change what the next
stage would pick, so tokens are spent only where they pay. The rules:

- `tests` (code): draw the greedy program first; when it passes every public test in the sandbox, stop
  (selection by execution could only pick a program that passes them too); otherwise draw the other k - 1
  at once, so the ensemble chooses among all k. Without public tests or an entry point there is nothing to
  check, so every draw is made.
- `passes` (code): the greedy program, then 3 draws, then the rest; stop after the first wave in which some
  program passes every public test. Why: on problems the greedy program fails, more draws mostly pay off
  early or never, and the ensemble keeps only programs that pass the most public tests anyway, so a passing
  program in hand leaves the others little to add; problems no draw passes still take all k.
- `redraw` (code): `passes`, except that the greedy program is never re-asked. Why: a greedy program that fails
  to load (it breaks, or its own asserts fail) is almost always a wrong function, and the engine's re-asks send
  it back with the error: two exchanges with a growing prompt, each about as dear as a wave of three draws, that
  on HumanEval rarely repaired it (docs/runs/full34-code). Under this rule such a program is simply a failed
  check, and the next wave, which the rule makes anyway, is its retry.
- `vote` (math, QA): draw the greedy answer, then waves, and stop when the leading answer's lead is
  decisive: the probability that it is the true majority, under a uniform prior on the two leading answers'
  shares (a Beta posterior, the criterion of Aggarwal et al. 2023, "Let's Sample Step by Step: Adaptive-
  Consistency", arXiv 2305.11860), is at least 0.95. Answers are compared as the ensemble's vote compares
  them (`answers.voting`). Four agreeing answers stop (0.97); three against one do not (0.81).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from operators.answers.voting import answer_classes
from operators.base import PublicTestScore
from operators.library._execution import execute, split_public_tests
from operators.sandbox import SandboxRefusedError

StopRuleName = Literal["tests", "passes", "redraw", "vote"]
DECISIVE = 0.95  # the posterior probability of the leading answer being the majority that stops a vote
VOTE_WAVES = (1, 3)  # the greedy draw, then waves of 3 (the last wave takes what is left)
PASS_WAVES = (1, 3)  # the greedy draw, 3 more, then every draw left


@dataclass(frozen=True)
class Draw:
    """One successful draw as a stopping rule sees it."""

    text: str
    code: str | None = None


@dataclass(frozen=True)
class TaskView:
    task_type: str
    public_tests: str | None
    entry_point: str | None


@dataclass(frozen=True)
class Decision:
    stop: bool
    reason: str
    passing: str | None = None  # a program the rule saw pass every public test (the engine reports it)
    score: PublicTestScore | None = None  # that program's score


def _passing(program: str, tests: str, reason: str) -> Decision:
    total = len(split_public_tests(tests))
    return Decision(True, reason, passing=program, score=PublicTestScore(passed=total, total=total))


class StopRule(Protocol):
    name: StopRuleName
    greedy_reasks: int | None  # the most re-asks of the greedy draw; None: as many as the engine allows

    def waves(self, samples: int) -> list[int]:
        """Wave sizes, in order, that add up to `samples` (the rule is asked after each wave but the last)."""
        ...

    async def decide(self, draws: Sequence[Draw], task: TaskView, *, timeout_s: float) -> Decision: ...


def _waves(samples: int, first: int, size: int) -> list[int]:
    sizes = [min(first, samples)]
    while sum(sizes) < samples:
        sizes.append(min(size, samples - sum(sizes)))
    return sizes


class PublicTestsPass:
    """Stop after the greedy draw when its program passes every public test."""

    name: StopRuleName = "tests"
    greedy_reasks: int | None = None

    def waves(self, samples: int) -> list[int]:
        return _waves(samples, 1, samples - 1 or 1)

    async def decide(self, draws: Sequence[Draw], task: TaskView, *, timeout_s: float) -> Decision:
        if not task.public_tests or not task.entry_point:
            return Decision(False, "no public tests and entry point to check the program with: every draw is made")
        program = next((d.code or d.text for d in draws if (d.code or d.text).strip()), None)
        if program is None:
            return Decision(False, "the greedy draw gave no program: the other draws are made")
        try:
            summary = await execute(program, tests=task.public_tests, entry_point=task.entry_point, timeout_s=timeout_s)
        except SandboxRefusedError:
            return Decision(False, "the sandbox runs nothing here, so the tests cannot decide: every draw is made")
        if summary.succeeded:
            return _passing(program, task.public_tests, "the greedy program passes the public tests: no more draws")
        return Decision(False, f"the greedy program fails the public tests ({summary.status}): the other draws")


async def _passes_public_tests(program: str, task: TaskView, timeout_s: float) -> bool:
    assert task.public_tests and task.entry_point
    summary = await execute(program, tests=task.public_tests, entry_point=task.entry_point, timeout_s=timeout_s)
    return summary.succeeded


class SomeDrawPasses:
    """Stop after the first wave holding a program that passes every public test (waves 1, 3, the rest)."""

    def __init__(self, name: StopRuleName = "passes", *, greedy_reasks: int | None = None) -> None:
        self.name = name
        self.greedy_reasks = greedy_reasks

    def waves(self, samples: int) -> list[int]:
        first, second = PASS_WAVES
        sizes = [1, min(second, samples - 1), samples - 1 - min(second, samples - 1)]
        return [size for size in sizes if size > 0] if samples > first else [samples]

    async def decide(self, draws: Sequence[Draw], task: TaskView, *, timeout_s: float) -> Decision:
        if not task.public_tests or not task.entry_point:
            return Decision(False, "no public tests and entry point to check the programs with: every draw is made")
        programs = list(dict.fromkeys(p for p in ((d.code or d.text) for d in draws) if p.strip()))
        try:
            for number, program in enumerate(programs, start=1):
                if await _passes_public_tests(program, task, timeout_s):
                    why = f"program {number} of {len(programs)} passes the public tests: no more draws"
                    return _passing(program, task.public_tests, why)
        except SandboxRefusedError:
            return Decision(False, "the sandbox runs nothing here, so the tests cannot decide: every draw is made")
        return Decision(False, f"none of {len(programs)} distinct programs passes the public tests: more draws")


def majority_probability(leader: int, runner_up: int) -> float:
    """P(p_leader > p_runner_up) for shares with a Beta(leader + 1, runner_up + 1) posterior (uniform prior).

    For integer parameters the Beta tail is a binomial sum: P(X > 1/2) = P(Bin(a + b - 1, 1/2) <= a - 1)."""
    a, b = leader + 1, runner_up + 1
    n = a + b - 1
    return sum(math.comb(n, j) for j in range(a)) / 2**n


class DecisiveVote:
    """Stop once the leading answer is the majority with posterior probability >= DECISIVE."""

    name: StopRuleName = "vote"
    greedy_reasks: int | None = None

    def waves(self, samples: int) -> list[int]:
        return _waves(samples, VOTE_WAVES[0], VOTE_WAVES[1])

    async def decide(self, draws: Sequence[Draw], task: TaskView, *, timeout_s: float) -> Decision:
        classes = sorted(
            (len(members) for members in answer_classes([d.text for d in draws], task.task_type)), reverse=True
        )
        if not classes:
            return Decision(False, "no draw has an answer yet")
        leader, runner_up = classes[0], classes[1] if len(classes) > 1 else 0
        probability = majority_probability(leader, runner_up)
        verdict = f"{leader} vs {runner_up} agreeing answers (P(majority) = {probability:.2f})"
        if probability >= DECISIVE:
            return Decision(True, f"the vote is decisive: {verdict}; no more draws")
        return Decision(False, f"the vote is open: {verdict}")


STOP_RULES: dict[str, StopRule] = {
    "tests": PublicTestsPass(),
    "passes": SomeDrawPasses(),
    "redraw": SomeDrawPasses("redraw", greedy_reasks=0),
    "vote": DecisiveVote(),
}
