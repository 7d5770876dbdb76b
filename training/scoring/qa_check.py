"""Short-answer QA scoring: SQuAD-style normalisation, multiset token F1 and exact match, best over the gold
alternatives, with unanswerable questions handled explicitly.

Normalisation (the SQuAD recipe, in this order; it lives in `operators.answers.normalise`, shared with the QA
answer votes inside workflows): lower-case; delete ASCII punctuation; delete the articles "a", "an", "the" as
whole words; collapse runs of whitespace. F1 counts shared tokens as a multiset
(a token that appears twice must be predicted twice). If either side normalises to no tokens, F1 and EM are
1 when both are empty and 0 otherwise.

Unanswerable (SQuAD 2.0, gold "unanswerable"): the prediction is right (F1 = EM = 1) exactly when it
normalises to an entry of `NO_ANSWER_PHRASES`, optionally after one of `NO_ANSWER_PREFIXES` (both in
`operators.answers.normalise`); anything else scores 0. For an answerable gold, a no-answer prediction is
scored by plain F1 (so it gets 0 unless the gold itself shares tokens with it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from operators.answers.normalise import is_no_answer, normalise_answer

__all__ = ["UNANSWERABLE_GOLD", "QAVerdict", "check_qa", "exact_match", "token_f1"]

UNANSWERABLE_GOLD = "unanswerable"


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
