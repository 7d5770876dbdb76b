"""Answer comparison for the operators (Verify's agreement check, ScEnsemble's shortcut), built on the shared
format-blind key of `operators.answers.keys`."""

from __future__ import annotations

from operators.answers.keys import answer_key

__all__ = ["answers_agree", "normalise_answer"]

normalise_answer = answer_key


def answers_agree(a: str, b: str) -> bool:
    return answer_key(a) == answer_key(b)
