"""Majority vote over candidate answers, comparing what each candidate commits to, not how it is written.

Why: sampled candidates phrase the same answer differently ("\\boxed{\\frac12}", "The answer is 0.5.", a
program's printed `0.5`), and a vote by raw string would split them. Each candidate's final answer is
extracted as the scorer extracts it, and two answers share a vote when the scorer would grade them alike:
math by equivalence (`math_equivalence`), QA by the SQuAD normalisation (`normalise`), general tasks by their
exact number when they state one and the SQuAD normalisation otherwise, and programs (code an execution could
not judge) by their text up to whitespace, since punctuation and `a` matter in code. A candidate with no
extractable answer does not vote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from operators.answers.extract import extract_final_answer
from operators.answers.keys import number_key
from operators.answers.math_equivalence import answers_equivalent
from operators.answers.normalise import short_answer_key

__all__ = ["AnswerVote", "answer_classes", "answer_vote", "final_answer", "majority_index"]

log = structlog.get_logger(__name__)


def final_answer(candidate: str, task_type: str) -> str:
    """The answer a candidate commits to, in the form its task type compares ("" when there is none)."""
    if task_type == "math":
        return extract_final_answer(candidate).text.strip()
    if task_type == "code":
        return " ".join(candidate.split())
    if task_type == "general":
        number = number_key(candidate)
        if number is not None:
            return number
    return short_answer_key(candidate)


def _same_answer(task_type: str) -> Callable[[str, str], bool]:
    if task_type == "math":
        return answers_equivalent
    return str.__eq__


def answer_classes(candidates: list[str], task_type: str) -> list[list[int]]:
    """Candidate indices grouped by equivalent final answers, classes and members in first-seen order.

    Each answer is compared with one representative per class (the class's first member), so a comparison
    that is not transitive cannot chain unrelated answers together."""
    same = _same_answer(task_type)
    classes: list[list[int]] = []
    representatives: list[str] = []
    for index, candidate in enumerate(candidates):
        answer = final_answer(candidate, task_type)
        if not answer:
            continue
        for members, representative in zip(classes, representatives, strict=True):
            if same(representative, answer):
                members.append(index)
                break
        else:
            classes.append([index])
            representatives.append(answer)
    return classes


@dataclass(frozen=True)
class AnswerVote:
    """A vote's outcome: the winner (or None), each candidate's class size, and the first member of each
    largest class (what a tie-break chooses among)."""

    winner: int | None
    sizes: list[int]
    leaders: list[int]


def answer_vote(candidates: list[str], task_type: str) -> AnswerVote:
    """The majority rule: the largest answer class wins when it has at least two members and is strictly larger
    than every other class; its first member represents it."""
    classes = answer_classes(candidates, task_type)
    sizes = [0] * len(candidates)
    for members in classes:
        for index in members:
            sizes[index] = len(members)
    top = max((len(members) for members in classes), default=0)
    leaders = [members[0] for members in classes if len(members) == top]
    winner = leaders[0] if top >= 2 and len(leaders) == 1 else None
    log.debug("answer_vote", task_type=task_type, classes=[len(m) for m in classes], winner=winner)
    return AnswerVote(winner=winner, sizes=sizes, leaders=leaders)


def majority_index(candidates: list[str], task_type: str) -> int | None:
    """Index of the majority's representative, or None (no majority: the caller decides)."""
    return answer_vote(candidates, task_type).winner
