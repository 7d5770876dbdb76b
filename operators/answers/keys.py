"""A format-blind comparison key for answers: "1,000", "1000.0", "$1000" and "\\boxed{1000}" share one key.

Why: comparisons inside workflows (Verify's "does the independent answer differ?", ScEnsemble's vote on
general tasks) must not depend on formatting. Numbers become exact fractions (never stripped of sign or
decimal point, "n%" kept apart from "n"); other text is case- and whitespace-folded. A key, not a grader.
"""

from __future__ import annotations

from operators.answers.exact_numbers import parse_exact_number
from operators.answers.extract import boxed_contents, clean_answer

__all__ = ["answer_key", "last_boxed", "number_key"]


def last_boxed(text: str) -> str | None:
    """Content of the last complete `\\boxed{...}` (braces balanced), or None."""
    found = boxed_contents(text)
    return found[-1] if found else None


def _committed(text: str) -> str:
    value = text.strip()
    boxed = last_boxed(value)
    return clean_answer((boxed if boxed is not None else value).strip("`"))


def number_key(text: str) -> str | None:
    """The exact number an answer commits to, as "n" or "p/q" ("n%" for a percentage); None when not a number."""
    number = parse_exact_number(_committed(text))
    if number is None:
        return None
    exact = number.value
    key = str(exact.numerator) if exact.denominator == 1 else f"{exact.numerator}/{exact.denominator}"
    return f"{key}%" if number.percent else key


def answer_key(text: str) -> str:
    """A comparison key for an answer: its exact number when it is one, else the folded text."""
    number = number_key(text)
    return number if number is not None else " ".join(_committed(text).casefold().split())
