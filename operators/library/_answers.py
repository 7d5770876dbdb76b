"""Normalised answer keys, so that "1,000", "1000.0" and "$1000" count as the same answer.

Why: Verify's "does the independent answer differ?" (and ScEnsemble's shortcut when all candidates agree)
must not depend on formatting. The key is built from the shared answer code in `operators.answers` (the
scorer's `\\boxed{}` reading, answer cleaning and exact numbers): numbers become exact fractions (never
stripped of sign or decimal point); other text is case- and whitespace-folded. This is a comparison key,
not a grader; task-aware votes use `operators.answers.majority_index`.
"""

from __future__ import annotations

from operators.answers.exact_numbers import parse_exact_number
from operators.answers.extract import boxed_contents, clean_answer

__all__ = ["answers_agree", "last_boxed", "normalise_answer"]


def last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` (braces balanced), or None."""
    found = boxed_contents(text)
    return found[-1] if found else None


def normalise_answer(text: str) -> str:
    """A comparison key for an answer: exact numbers as "n" or "p/q" ("n%" for a percentage), other text
    folded."""
    value = text.strip()
    boxed = last_boxed(value)
    if boxed is not None:
        value = boxed
    value = clean_answer(value.strip("`"))
    number = parse_exact_number(value)
    if number is not None:
        exact = number.value
        key = str(exact.numerator) if exact.denominator == 1 else f"{exact.numerator}/{exact.denominator}"
        return f"{key}%" if number.percent else key
    return " ".join(value.casefold().split())


def answers_agree(a: str, b: str) -> bool:
    return normalise_answer(a) == normalise_answer(b)
