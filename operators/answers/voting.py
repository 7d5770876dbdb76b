"""Majority vote over candidate answers, comparing what each candidate commits to, not how it is written.

Why: sampled candidates phrase the same answer differently ("\\boxed{\\frac12}", "The answer is 0.5.", a
program's printed `0.5`), and a vote by raw string would split them. Each candidate's final answer is
extracted as the scorer extracts it, and two answers share a vote when the scorer would grade them alike:
math by equivalence (`math_equivalence`), QA and general text by the SQuAD normalisation (`normalise`).
A candidate with no extractable answer does not vote.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from operators.answers.extract import extract_final_answer
from operators.answers.math_equivalence import answers_equivalent
from operators.answers.normalise import short_answer_key

__all__ = ["answer_classes", "final_answer", "majority_index"]

log = structlog.get_logger(__name__)


def final_answer(candidate: str, task_type: str) -> str:
    """The answer a candidate commits to, in the form its task type compares ("" when there is none)."""
    if task_type == "math":
        return extract_final_answer(candidate).text.strip()
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


def majority_index(candidates: list[str], task_type: str) -> int | None:
    """Index of the first member of the largest answer class, when that class has at least two members and
    is strictly larger than every other class; otherwise None (no majority: the caller decides)."""
    classes = answer_classes(candidates, task_type)
    sizes = sorted((len(members) for members in classes), reverse=True)
    if not sizes or sizes[0] < 2 or (len(sizes) > 1 and sizes[1] == sizes[0]):
        log.debug("answer_vote", task_type=task_type, classes=sizes, winner=None)
        return None
    winner = max(classes, key=len)[0]
    log.debug("answer_vote", task_type=task_type, classes=sizes, winner=winner)
    return winner
