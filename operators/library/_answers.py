"""Normalised answer keys, so that "1,000", "1000.0" and "$1000" count as the same vote.

Why: ScEnsemble votes and Verify's "does the independent answer differ?" must not depend on formatting.
Numbers become exact fractions (never stripped of sign or decimal point); other text is case- and
whitespace-folded. This is a comparison key, not a grader.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["answers_agree", "last_boxed", "normalise_answer"]

_FRAC = re.compile(r"^\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(-?\d+)\s*\}$")
_PLAIN_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?$")
_RATIO = re.compile(r"^([-+]?\d+)\s*/\s*([-+]?\d+)$")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    begin = start + len("\\boxed{")
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[begin:i]
            depth -= 1
    return None


def _as_number(text: str) -> Fraction | None:
    candidate = text.strip().lstrip("$").strip()
    if frac := _FRAC.match(candidate):
        numerator, denominator = int(frac.group(1)), int(frac.group(2))
        return Fraction(numerator, denominator) if denominator else None
    if ratio := _RATIO.match(candidate):
        numerator, denominator = int(ratio.group(1)), int(ratio.group(2))
        return Fraction(numerator, denominator) if denominator else None
    if candidate and any(c.isdigit() for c in candidate) and _PLAIN_NUMBER.match(candidate):
        try:
            return Fraction(candidate.replace(",", ""))
        except (ValueError, ZeroDivisionError):
            return None
    return None


def normalise_answer(text: str) -> str:
    """A comparison key for an answer: exact numbers as "n" or "p/q", other text folded."""
    value = text.strip()
    boxed = last_boxed(value)
    if boxed is not None:
        value = boxed.strip()
    value = value.strip("*`").strip()
    if len(value) >= 2 and value[0] == value[-1] == "$":
        value = value[1:-1].strip()
    value = value.rstrip(".").strip()
    number = _as_number(value)
    if number is not None:
        return str(number.numerator) if number.denominator == 1 else f"{number.numerator}/{number.denominator}"
    return " ".join(value.casefold().split())


def answers_agree(a: str, b: str) -> bool:
    return normalise_answer(a) == normalise_answer(b)
