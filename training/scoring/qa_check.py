"""Short-answer QA scoring: SQuAD-style normalisation, multiset token F1 and exact match, best over the gold
alternatives, with unanswerable questions handled explicitly.

Normalisation (the SQuAD evaluation recipe, in this order): lower-case; delete ASCII punctuation; delete the
articles "a", "an", "the" as whole words; collapse runs of whitespace. F1 counts shared tokens as a multiset
(a token that appears twice must be predicted twice). If either side normalises to no tokens, F1 and EM are
1 when both are empty and 0 otherwise.

Unanswerable (SQuAD 2.0, gold "unanswerable"): the prediction is right (F1 = EM = 1) exactly when it
normalises to an entry of `NO_ANSWER_PHRASES`, optionally after one of `NO_ANSWER_PREFIXES`; anything else
scores 0. For an answerable gold, a no-answer prediction is scored by plain F1 (so it gets 0 unless the gold
itself shares tokens with it).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass

UNANSWERABLE_GOLD = "unanswerable"

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

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalise_answer(text: str) -> str:
    lowered = text.lower()
    no_punctuation = "".join(char for char in lowered if char not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punctuation)
    return " ".join(no_articles.split())


def token_f1(predicted: str, gold: str) -> float:
    pred_tokens = normalise_answer(predicted).split()
    gold_tokens = normalise_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    shared = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(pred_tokens)
    recall = shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(predicted: str, gold: str) -> float:
    return float(normalise_answer(predicted) == normalise_answer(gold))


def is_no_answer(predicted: str) -> bool:
    norm = normalise_answer(predicted)
    if norm in NO_ANSWER_PHRASES:
        return True
    for prefix in NO_ANSWER_PREFIXES:
        if norm.startswith(prefix + " ") and norm[len(prefix) + 1 :] in NO_ANSWER_PHRASES:
            return True
    return False


@dataclass(frozen=True)
class QAVerdict:
    f1: float
    em: float
    best_gold: str
    unanswerable: bool


def check_qa(predicted: str, golds: list[str]) -> QAVerdict:
    """Best F1 and EM of `predicted` over the gold alternatives (F1 and EM maximised separately)."""
    if any(normalise_answer(gold) == UNANSWERABLE_GOLD for gold in golds):
        hit = float(is_no_answer(predicted))
        return QAVerdict(hit, hit, UNANSWERABLE_GOLD, unanswerable=True)
    best_gold, best_f1, best_em = "", 0.0, 0.0
    for gold in golds:
        f1 = token_f1(predicted, gold)
        if f1 > best_f1 or not best_gold:
            best_gold, best_f1 = gold, f1
        best_em = max(best_em, exact_match(predicted, gold))
    return QAVerdict(best_f1, best_em, best_gold, unanswerable=False)
