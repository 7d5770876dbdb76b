"""Multiple-choice answers (MathQA: gold is an option letter a-e, `meta.options` maps letters to texts).

A response chooses an option only in one of these explicit ways, applied to its extracted final answer:
- the letter alone: `c`, `(c)`, `C)`, `c.`, `option c`, `choice: (c)`;
- the letter followed by its option text: `c) 700` (if the text is not that option's text, the response
  contradicts itself and chooses nothing);
- exactly one option's text: `700` when option c is `700` (compared after normalisation).
No letter is ever guessed from stray characters elsewhere in the response.
"""

from __future__ import annotations

import re

from operators.answers.exact_numbers import parse_exact_number
from operators.answers.extract import Extraction, extract_final_answer

_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")
_DEFAULT_LETTERS = "abcde"


def normalise_option_text(text: str) -> str:
    """Lowercase with all whitespace removed: MathQA's tokenised `rs . 400` equals `Rs.400`."""
    return re.sub(r"\s+", "", _TEXT_WRAP.sub(r"\1", text).lower()).strip("*$").rstrip(".")


def option_texts_match(answer_text: str, option_text: str) -> bool:
    a, b = normalise_option_text(answer_text), normalise_option_text(option_text)
    if not a or not b:
        return False
    if a == b:
        return True
    a_number, b_number = parse_exact_number(a), parse_exact_number(b)
    return a_number is not None and b_number is not None and a_number == b_number


def _without_own_letter(letter: str, text: str) -> str:
    """Some MathQA option strings repeat their label (`a ) 350` for option a); drop that label."""
    return re.sub(rf"^\s*\(?{re.escape(letter)}\s*\)\s*", "", text, flags=re.IGNORECASE)


def choose_option(candidate: str, options: dict[str, str] | None) -> str | None:
    """The option letter `candidate` explicitly chooses, or None."""
    if options is not None:
        options = {letter: _without_own_letter(letter, text) for letter, text in options.items()}
    letters = "".join(sorted(options)) if options else _DEFAULT_LETTERS
    letter_class = f"[{re.escape(letters)}]"
    s = _TEXT_WRAP.sub(r"\1", candidate).strip().strip("*$").strip().lower()
    alone = re.fullmatch(rf"(?:(?:option|choice|answer)\s*:?\s*)?\(?\s*({letter_class})\s*\)?[.:]?", s)
    if alone:
        return alone.group(1)
    with_text = re.fullmatch(rf"(?:(?:option|choice)\s*)?\(?({letter_class})\s*[).:]\s*(.+)", s)
    if with_text:
        letter = with_text.group(1)
        if options is None or option_texts_match(with_text.group(2), options[letter]):
            return letter
        return None
    if options:
        by_text = [letter for letter, text in options.items() if option_texts_match(s, text)]
        if len(by_text) == 1:
            return by_text[0]
    return None


def extract_choice(answer: str, options: dict[str, str] | None) -> tuple[str | None, Extraction]:
    """Extract the final answer (no last-number fallback) and read the chosen letter from it."""
    extraction = extract_final_answer(answer, allow_last_number=False)
    return choose_option(extraction.text, options), extraction
