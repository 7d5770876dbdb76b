"""Find the final answer inside a free-form response.

Shared by the scorer (`training/scoring`) and by answer votes inside workflows, so both read the same answer
out of a response.

Why explicit, ordered rules: a workflow's last output is often a whole explanation. The grader must compare
the answer the response commits to, and say which rule found it (`Extraction.how`), so a surprising score
can be traced. The rules, first match wins:

1. `boxed`       the last `\\boxed{...}` / `\\fbox{...}` (nested braces and escaped `\\{ \\}` handled)
2. `answer_tag`  the last `<answer>...</answer>`
3. `hashes`      the text after the last `####` (GSM8K style), to the end of that line
4. `phrase`      the text after the last final-answer phrase ("the answer is", "Final Answer:", "answer =",
                 "the correct option is" ...), to the end of the sentence or line
5. `bare`        the whole response when it is one short line that reads as a math expression
6. `last_number` the last number in the response (callers may disable it, e.g. multiple choice)
7. `last_line`   the last non-empty line when it is short

Short-answer QA uses `extract_short_answer`: rules 1, 2 and 4 (without cutting at a full stop, so
"Mr. Smith" survives), else the `whole` response.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ExtractionRule = Literal["boxed", "answer_tag", "hashes", "phrase", "bare", "last_number", "last_line", "whole", "none"]

_SHORT_LINE = 120

_BOX_COMMANDS = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_PHRASE = re.compile(
    r"\b(?:"
    r"(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:|=)"
    r"|(?:the\s+)?(?:correct\s+)?(?:option|choice)\s+is\s*:?"
    r"|(?:correct\s+)?(?:option|choice)\s*:"
    r")",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
_NUMBER = re.compile(
    r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?(?:\s*\\?%)?"
    r"|(?<![\w.])-?\.\d+(?:\s*\\?%)?"
)
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_LONG_WORD = re.compile(r"[A-Za-z]{4,}")
_MATH_WORDS = frozenset(
    {"sqrt", "infty", "infinity", "pmatrix", "bmatrix", "vmatrix", "matrix", "array", "cases", "begin"}
)


@dataclass(frozen=True)
class Extraction:
    text: str
    how: ExtractionRule


def _matching_brace(text: str, open_index: int) -> int | None:
    """Index of the `}` closing the `{` at open_index; backslash-escaped braces do not count."""
    depth = 0
    i = open_index
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def boxed_contents(text: str) -> list[str]:
    """Contents of every complete `\\boxed{...}` / `\\fbox{...}` (and `\\boxed 5`), in order."""
    found: list[str] = []
    for match in _BOX_COMMANDS.finditer(text):
        i = match.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            close = _matching_brace(text, i)
            if close is not None:
                found.append(text[i + 1 : close])
        elif i > match.end():  # "\boxed 5": the next space-delimited token
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                found.append(token.group(0))
    return found


def clean_answer(text: str) -> str:
    """Strip the packaging around an answer: whitespace, `$...$`, `\\(...\\)`, `\\[...\\]`, markdown bold,
    a leading colon or equals sign, and one final full stop."""
    s = text.strip()
    for _ in range(3):  # nested packaging such as "**$42$**."
        before = s
        s = s.strip().strip("*").strip()
        s = re.sub(r"^[:=]\s*", "", s)
        if s.endswith("."):
            s = s[:-1].rstrip()
        for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
                s = s[len(left) : len(s) - len(right)].strip()
        if s == before:
            break
    return s


def _phrase_answer(text: str, *, cut_sentence: bool = True) -> str | None:
    matches = list(_PHRASE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]
    lines = rest.split("\n")
    line = lines[0].strip()
    if not line:  # "Final Answer:\n42"
        line = next((candidate.strip() for candidate in lines[1:] if candidate.strip()), "")
    end = _SENTENCE_END.search(line) if cut_sentence else None
    if end is not None:
        line = line[: end.start()]
    return line.strip() or None


def looks_like_bare_expression(text: str) -> bool:
    """One short line with no prose words: `-3`, `\\frac{1}{2}`, `(3, -1)`, `x \\in [-2,7]`, `c`."""
    s = text.strip()
    if not s or "\n" in s or len(s) > _SHORT_LINE:
        return False
    words = _LONG_WORD.findall(_LATEX_COMMAND.sub(" ", s))
    return all(word.lower() in _MATH_WORDS for word in words)


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1].strip() if found else None


def extract_final_answer(text: str, *, allow_last_number: bool = True) -> Extraction:
    """Apply the rules of the module docstring to `text`."""
    boxed = boxed_contents(text)
    if boxed:
        return Extraction(clean_answer(boxed[-1]), "boxed")
    tags = _ANSWER_TAG.findall(text)
    if tags and tags[-1].strip():
        return Extraction(clean_answer(tags[-1]), "answer_tag")
    if "####" in text:
        after = text.rsplit("####", 1)[1].strip().split("\n", 1)[0]
        if after.strip():
            return Extraction(clean_answer(after), "hashes")
    phrase = _phrase_answer(text)
    if phrase is not None and clean_answer(phrase):
        return Extraction(clean_answer(phrase), "phrase")
    if looks_like_bare_expression(clean_answer(text)):
        return Extraction(clean_answer(text), "bare")
    if allow_last_number:
        number = last_number(text)
        if number is not None:
            return Extraction(number, "last_number")
    lines = [line.strip() for line in text.strip().split("\n") if line.strip()]
    if lines and len(lines[-1]) <= _SHORT_LINE:
        return Extraction(clean_answer(lines[-1]), "last_line")
    return Extraction("", "none")


def extract_short_answer(text: str) -> Extraction:
    """The answer span of a QA response: boxed, `<answer>` tag, final-answer phrase, else the whole text."""
    boxed = boxed_contents(text)
    if boxed:
        return Extraction(clean_answer(boxed[-1]), "boxed")
    tags = _ANSWER_TAG.findall(text)
    if tags and tags[-1].strip():
        return Extraction(clean_answer(tags[-1]), "answer_tag")
    phrase = _phrase_answer(text, cut_sentence=False)
    if phrase is not None and clean_answer(phrase):
        return Extraction(clean_answer(phrase), "phrase")
    return Extraction(text.strip(), "whole")
