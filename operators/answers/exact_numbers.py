"""Exact reading and comparison of plain numbers written as text or simple LaTeX.

Why exact: lenient numeric graders ("delete every non-digit", "within 1%") accept wrong answers. Here a number
is read into a `fractions.Fraction` only when the whole string is unambiguously one number, and two numbers
are equal only when their values are equal. Accepted forms: `-3`, `+3`, `0.5`, `.5`, `1/2`, `\\frac{1}{2}`,
`\\dfrac12`, `1,000` (commas only as thousands separators in groups of three), `\\$18.90`, `25\\%`, `30^\\circ`,
`18 \\text{dollars}` or `18 dollars` (trailing unit words). Anything else returns None and is left to the
symbolic verifier. Shared by the scorer and by answer votes (`math_equivalence`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_SPACING = re.compile(r"\\[!,;:> ]|~")
_UNICODE_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-"})
_CURRENCY = re.compile(r"^([+-]?)\s*(?:\\\$|\$|€|£|¥)\s*")
_TEXT_UNIT = re.compile(r"\s*\\(?:text|mbox|mathrm|textrm|textnormal)\s*\{[^{}]*\}\s*$")
_WORD_UNITS = re.compile(r"(?<=[\d.}])\s+[A-Za-z]{2,}(?:\s+[A-Za-z]{2,}){0,3}$")
_MATH_WORDS = frozenset({"pi", "sqrt", "times", "cdot", "mod", "log", "ln", "sin", "cos", "tan", "exp", "inf"})
_SCALES = {"thousand": Fraction(10**3), "million": Fraction(10**6), "billion": Fraction(10**9)}
_DEGREES = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree)$")
_PERCENT = re.compile(r"\s*(?:\\%|%|\\text\{\s*\\?%\s*\})$")
_DECIMAL = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+"
_PLAIN = re.compile(rf"([+-]?)\s*({_DECIMAL})")
_SLASH = re.compile(rf"([+-]?)\s*({_DECIMAL})\s*/\s*({_DECIMAL})")
_FRAC_BRACED = re.compile(rf"([+-]?)\s*\\[dt]?frac\s*\{{\s*([+-]?)\s*({_DECIMAL})\s*\}}\s*\{{\s*({_DECIMAL})\s*\}}")
_FRAC_DIGITS = re.compile(r"([+-]?)\s*\\[dt]?frac\s*(\d)\s*(\d)")


@dataclass(frozen=True)
class ExactNumber:
    value: Fraction
    percent: bool = False


def _decimal(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def _signed(sign: str, value: Fraction) -> Fraction:
    return -value if sign == "-" else value


def _strip_units(s: str) -> tuple[str, bool, Fraction] | None:
    """Remove currency, unit text, degrees and a percent sign.

    Returns (number text, had a percent sign, scale from "thousand"/"million"...), or None when a trailing
    word is mathematical (`5 pi`, `3 sqrt 2`) rather than a unit, so the text is not a plain number."""
    percent = False
    scale = Fraction(1)
    for _ in range(3):
        before = s
        s = _TEXT_UNIT.sub("", s)
        s = _DEGREES.sub("", s)
        if _PERCENT.search(s):
            s = _PERCENT.sub("", s)
            percent = True
        words = _WORD_UNITS.search(s)
        if words:
            first = words.group(0).split()[0].lower()
            if first in _MATH_WORDS:
                return None
            if first in ("percent", "per") and words.group(0).lower().split()[:2] in (["percent"], ["per", "cent"]):
                percent = True
            elif first in _SCALES:
                scale *= _SCALES[first]
            s = s[: words.start()]
        s = s.strip()
        if s == before:
            break
    currency = _CURRENCY.match(s)
    if currency:
        s = currency.group(1) + s[currency.end() :]
    return s.strip(), percent, scale


def parse_exact_number(text: str) -> ExactNumber | None:
    """The exact value of `text` if the whole string is one plain number (see module doc), else None."""
    s = _SPACING.sub("", text.translate(_UNICODE_MINUS)).replace("{,}", ",").strip()
    if not s or len(s) > 80:
        return None
    stripped = _strip_units(s)
    if stripped is None:
        return None
    s, percent, scale = stripped
    value: Fraction | None = None
    try:
        if match := _PLAIN.fullmatch(s):
            value = _signed(match.group(1), _decimal(match.group(2)))
        elif match := _SLASH.fullmatch(s):
            denominator = _decimal(match.group(3))
            if denominator != 0:
                value = _signed(match.group(1), _decimal(match.group(2)) / denominator)
        elif match := _FRAC_BRACED.fullmatch(s):
            denominator = _decimal(match.group(4))
            if denominator != 0:
                inner = _signed(match.group(2), _decimal(match.group(3)) / denominator)
                value = _signed(match.group(1), inner)
        elif match := _FRAC_DIGITS.fullmatch(s):  # a zero denominator raises ZeroDivisionError below
            value = _signed(match.group(1), Fraction(int(match.group(2)), int(match.group(3))))
    except (ValueError, ZeroDivisionError):
        return None
    if value is None:
        return None
    return ExactNumber(value * scale, percent)


def numbers_match(predicted: ExactNumber, gold: ExactNumber) -> bool:
    """Equal values. A percentage x% also matches a plain y when y == x (a "what percent" gold) or y == x/100."""
    if predicted.percent == gold.percent:
        return predicted.value == gold.value
    percent, plain = (predicted, gold) if predicted.percent else (gold, predicted)
    return plain.value in (percent.value, percent.value / 100)
