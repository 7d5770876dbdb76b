"""Math answer equivalence: exact numbers first, then HuggingFace `math-verify`, then normalised strings.

One implementation for two callers: the scorer (`training/scoring/builtin.py` grades math with `check_math`)
and answer votes inside workflows (`answers_equivalent`), so a vote groups two answers together exactly
when the grader would call them equal.

Decision order (the first that applies decides):
1. Both sides are plain numbers (`exact_numbers`): equal iff their exact values are equal. No tolerance, so
   `0.333` is not `\\frac{1}{3}` and `-3` is not `3`.
2. `math-verify` (LaTeX / expression parsing with sympy, sets, tuples, intervals, matrices, equations). When
   it says "equal" but one side is a plain number and the other parses to a rational, the exact values must
   also agree (math-verify rounds floats to 6 places, which would accept `0.0000002` for `0.0000001`). For an
   irrational gold (`\\sqrt{2}`) math-verify's own float rounding applies; that is the verifier's documented
   behaviour, not a relative tolerance. `math-verify` is a base dependency; should it be missing all the
   same (an older environment), votes skip this step rather than fail, while the scorer refuses to load.
3. Normalised LaTeX string equality (spacing, `\\left`/`\\right`, `\\dfrac`, `\\text{}`), for answers no
   parser understands (`\\text{Evelyn}` vs `Evelyn` is left to math-verify, which handles it).

Timeouts: math-verify bounds parsing and comparison with SIGALRM, which only works in the main thread. In any
other thread the timeouts are off, so oversized inputs are refused up front (`_too_risky_for_sympy`).
"""

from __future__ import annotations

import importlib.util
import re
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import structlog

from operators.answers.exact_numbers import ExactNumber, numbers_match, parse_exact_number
from operators.answers.extract import boxed_contents, clean_answer

__all__ = [
    "MAX_SYMBOLIC_CHARS",
    "MathVerdict",
    "answers_equivalent",
    "check_math",
    "gold_answer_text",
    "normalise_latex_string",
    "symbolic_available",
]

log = structlog.get_logger(__name__)

MAX_SYMBOLIC_CHARS = 300
_HUGE_POWER = re.compile(r"\^\s*\{?\s*[+-]?\d{4,}|\*\*\s*\(?\s*[+-]?\d{4,}|\d{4,}\s*!")
_NESTED_POWER = re.compile(r"\^\s*\{[^{}]*\^")


@dataclass
class MathVerdict:
    correct: bool
    method: str
    details: dict[str, Any] = field(default_factory=dict)


def symbolic_available() -> bool:
    """Whether math-verify is installed (a base dependency, checked so a stale environment degrades)."""
    return importlib.util.find_spec("math_verify") is not None


def gold_answer_text(gold: str) -> str:
    """The comparable part of a math gold: the last `\\boxed{}` or the text after `####` if present (the
    released dataset keeps those in some golds), else the gold itself, cleaned."""
    boxed = boxed_contents(gold)
    if boxed:
        return clean_answer(boxed[-1])
    if "####" in gold:
        return clean_answer(gold.rsplit("####", 1)[1])
    return clean_answer(gold)


_LATEX_NOISE = re.compile(r"\\left|\\right|\\[!,;: ]|\\displaystyle|\s+")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textrm|mbox)\{([^{}]*)\}")


def normalise_latex_string(text: str) -> str:
    s = _TEXT_WRAP.sub(r"\1", clean_answer(text))
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("^\\circ", "").replace("^{\\circ}", "")
    s = s.replace("\\$", "")
    return _LATEX_NOISE.sub("", s).rstrip(".")


def _timeout_seconds(configured: int) -> int | None:
    """math-verify's signal-based timeout works only in the main thread; elsewhere it must be off."""
    return configured if threading.current_thread() is threading.main_thread() else None


def _too_risky_for_sympy(text: str) -> bool:
    return len(text) > MAX_SYMBOLIC_CHARS or bool(_HUGE_POWER.search(text) or _NESTED_POWER.search(text))


def _as_fraction(expr: Any) -> Fraction | None:
    """The exact value of a parsed sympy expression when it is a rational number."""
    import sympy

    if not isinstance(expr, sympy.Basic) or not expr.is_number:
        return None
    try:
        value = expr.doit()
    except Exception:  # sympy can fail in many ways on odd input; then no exact value is known
        return None
    if isinstance(value, sympy.Rational):
        return Fraction(int(value.p), int(value.q))
    return None


def _symbolic_equal(gold: str, predicted: str, timeout_s: int) -> tuple[bool | None, dict[str, Any]]:
    """math-verify's verdict, or None when it could not be asked (not installed, input refused, not parseable)."""
    if not symbolic_available():
        return None, {"symbolic": "skipped: math-verify is not installed"}
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    if _too_risky_for_sympy(gold) or _too_risky_for_sympy(predicted):
        return None, {"symbolic": "skipped: expression too large for a safe symbolic check"}
    timeout = _timeout_seconds(timeout_s)
    config = [LatexExtractionConfig(), ExprExtractionConfig()]
    gold_parsed = parse(f"\\boxed{{{gold}}}", extraction_config=config, parsing_timeout=timeout)
    pred_parsed = parse(f"\\boxed{{{predicted}}}", extraction_config=config, parsing_timeout=timeout)
    details: dict[str, Any] = {
        "gold_parsed": [str(x) for x in gold_parsed[:1]],
        "pred_parsed": [str(x) for x in pred_parsed[:1]],
    }
    if not gold_parsed or not pred_parsed:
        return None, details
    equal = bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    if equal:
        # Guard against float rounding when an exact comparison is possible.
        pred_number = parse_exact_number(predicted)
        gold_number = parse_exact_number(gold)
        gold_value = _as_fraction(gold_parsed[0])
        pred_value = _as_fraction(pred_parsed[0])
        if pred_number is not None and not pred_number.percent and gold_value is not None:
            equal = pred_number.value == gold_value
        elif gold_number is not None and not gold_number.percent and pred_value is not None:
            equal = gold_number.value == pred_value
        if not equal:
            details["symbolic"] = "rejected: equal only after float rounding"
    return equal, details


def check_math(predicted: str, gold: str, *, timeout_s: int = 5) -> MathVerdict:
    """Is the extracted answer `predicted` equivalent to the math gold? (see module docstring)"""
    gold_text = gold_answer_text(gold)
    if not predicted.strip():
        return MathVerdict(False, "no_answer", {"gold": gold_text, "reason": "no final answer found"})
    pred_number: ExactNumber | None = parse_exact_number(predicted)
    gold_number: ExactNumber | None = parse_exact_number(gold_text)
    if pred_number is not None and gold_number is not None:
        return MathVerdict(numbers_match(pred_number, gold_number), "exact_number", {"gold": gold_text})
    symbolic, details = _symbolic_equal(gold_text, predicted, timeout_s)
    details["gold"] = gold_text
    if symbolic:
        return MathVerdict(True, "math_verify", details)
    if normalise_latex_string(predicted) == normalise_latex_string(gold_text):
        return MathVerdict(True, "string", details)
    return MathVerdict(False, "math_verify" if symbolic is not None else "string", details)


_COMPUTED_PLACES = 9  # a decimal this long is a computed float (Programmer rounds to 12 places), not a written one
_DECIMAL = re.compile(r"^-?\d+\.(\d+)$")


def _computed_float_matches(first: str, second: str) -> bool:
    """`0.333333333333` (a program's float) matches `1/3` when the fraction rounds to exactly that decimal.

    Only for votes: the scorer stays exact. Without this an executed answer could never join a written one
    whose value is not a terminating decimal."""
    for computed, written in ((first, second), (second, first)):
        match = _DECIMAL.match(computed.strip())
        if match is None or len(match.group(1)) < _COMPUTED_PLACES:
            continue
        exact = parse_exact_number(written)
        if exact is not None and not exact.percent:
            return round(exact.value, len(match.group(1))) == Fraction(computed.strip())
    return False


def answers_equivalent(first: str, second: str, *, timeout_s: int = 2) -> bool:
    """Are two extracted math answers the same answer, as the scorer would judge them? Never raises: a
    comparison that fails (a parser error, a timeout) counts as "not equivalent", so a vote stays a vote."""
    if not first.strip() or not second.strip():
        return False
    try:
        return check_math(first, second, timeout_s=timeout_s).correct or _computed_float_matches(first, second)
    except Exception as error:  # a broken comparison must not fail the operator that votes
        log.warning("math_equivalence_failed", first=first[:80], second=second[:80], error=repr(error))
        return False
