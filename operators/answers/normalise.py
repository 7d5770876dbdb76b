"""Short-answer normalisation, shared by the QA scorer and by answer votes.

Why one module: a vote among workflow candidates must count two answers as the same exactly when the grader
would, so the SQuAD recipe lives here and `training/scoring/qa_check.py` imports it. The recipe, in order:
lower-case; delete ASCII punctuation; delete the articles "a", "an", "the" as whole words; collapse runs of
whitespace. Declining to answer (SQuAD 2.0) is recognised here too (`is_no_answer`), for the same reason.
"""

from __future__ import annotations

import re
import string

from operators.answers.extract import extract_short_answer

__all__ = [
    "NO_ANSWER_KEY",
    "NO_ANSWER_PHRASES",
    "NO_ANSWER_PREFIXES",
    "is_no_answer",
    "normalise_answer",
    "short_answer_key",
]

# Normalised forms (see `normalise_answer`): "N/A" -> "na", "can't" -> "cant", "the context" -> "context".
NO_ANSWER_PHRASES: frozenset[str] = frozenset(
    {
        "",
        "unanswerable",
        "not answerable",
        "no answer",
        "no answer found",
        "none",
        "unknown",
        "na",
        "cannot be answered",
        "can not be answered",
        "cant be answered",
        "cannot answer",
        "cannot be determined",
        "cannot be determined from context",
        "cannot be answered from context",
        "not enough information",
        "insufficient information",
        "no information",
        "not mentioned",
        "not mentioned in context",
        "not in context",
        "not provided",
        "not provided in context",
        "not stated",
        "not given",
        "no answer in context",
    }
)
NO_ANSWER_PREFIXES: tuple[str, ...] = ("it is", "this is", "question is", "this question is", "answer is")

NO_ANSWER_KEY = "unanswerable"
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalise_answer(text: str) -> str:
    """SQuAD normalisation: "The Eiffel Tower." -> "eiffel tower"."""
    lowered = text.lower()
    no_punctuation = "".join(char for char in lowered if char not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punctuation)
    return " ".join(no_articles.split())


def is_no_answer(predicted: str) -> bool:
    """Does `predicted` decline to answer (a `NO_ANSWER_PHRASES` entry, optionally after a prefix)?"""
    norm = normalise_answer(predicted)
    if norm in NO_ANSWER_PHRASES:
        return True
    for prefix in NO_ANSWER_PREFIXES:
        if norm.startswith(prefix + " ") and norm[len(prefix) + 1 :] in NO_ANSWER_PHRASES:
            return True
    return False


def short_answer_key(response: str) -> str:
    """The normalised answer a QA response commits to, as the scorer reads it (boxed, `<answer>`, a
    final-answer phrase, else the whole response). Every way of declining ("N/A", "not in the context")
    shares the key "unanswerable", as the scorer treats them alike; an empty response has no key ("")."""
    key = normalise_answer(extract_short_answer(response).text)
    if key and is_no_answer(key):
        return NO_ANSWER_KEY
    return key
