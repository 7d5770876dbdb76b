"""QA scoring: SQuAD normalisation, multiset F1, EM, alternatives and unanswerable questions."""

from __future__ import annotations

import pytest

from operators.answers.normalise import NO_ANSWER_PHRASES, normalise_answer
from training.data import Problem
from training.scoring import JudgeVerdict, ScoreResult, ScoringConfig, score, score_text
from training.scoring.qa_check import token_f1


def qa_problem(gold: str) -> Problem:
    return Problem(
        id="t/1", source="squad_v2", problem_type="qa", problem="Context: c\n\nQuestion: q", ground_truth=gold
    )


def grade(gold: str, answer: str, **config: str) -> ScoreResult:
    return score_text(qa_problem(gold), answer, config=ScoringConfig(**config) if config else None)


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a   cat, an owl and THE dog. ", "cat owl and dog"),
        ("U.S.A.", "usa"),
        ("theory of the atom", "theory of atom"),  # "the" only as a whole word
        ("Anna's", "annas"),
        ("", ""),
    ],
)
def test_normalisation(text: str, normalised: str) -> None:
    assert normalise_answer(text) == normalised


def test_f1_is_multiset_token_overlap() -> None:
    assert token_f1("paris paris", "paris") == pytest.approx(2 / 3)  # precision 1/2, recall 1
    assert token_f1("paris france", "paris") == pytest.approx(2 / 3)
    assert token_f1("new york city", "york new") == pytest.approx(0.8)
    assert token_f1("london", "paris") == 0.0
    assert token_f1("the", "a") == 1.0  # both normalise to nothing
    assert token_f1("", "paris") == 0.0


@pytest.mark.parametrize(
    ("gold", "answer", "f1", "em"),
    [
        ("Denver Broncos", "denver broncos", 1.0, 1.0),
        ("Denver Broncos", "The Denver Broncos.", 1.0, 1.0),  # articles and punctuation
        ("Denver Broncos", "Broncos", 2 / 3, 0.0),
        ("1998 | in 1996 | 1996", "1996", 1.0, 1.0),  # best alternative
        ("Ada Lovelace | Lovelace", "Ada", 2 / 3, 0.0),
        ("Ada Lovelace | Lovelace", "lovelace ada", 1.0, 0.0),  # F1 ignores order, EM does not
        ("Paris", "The answer is Paris.", 1.0, 1.0),  # explicit answer phrase
        ("Paris", r"\boxed{Paris}", 1.0, 1.0),
        ("Mr. Smith", "Answer: Mr. Smith", 1.0, 1.0),  # no cut at "Mr."
        ("Paris", "Paris is the capital of France", 2 / 6, 0.0),  # no containment bonus
        ("Paris", "", 0.0, 0.0),
        ("Paris", "unanswerable", 0.0, 0.0),
    ],
)
def test_answerable_questions(gold: str, answer: str, f1: float, em: float) -> None:
    result = grade(gold, answer)
    assert result.details["f1"] == pytest.approx(f1)
    assert result.details["em"] == em
    assert result.score == pytest.approx(f1)  # F1 is the reward by default
    assert result.correct is (em == 1.0)


def test_em_metric_is_configurable() -> None:
    assert grade("Denver Broncos", "Broncos", qa_metric="em").score == 0.0
    assert grade("Denver Broncos", "the denver broncos", qa_metric="em").score == 1.0
    assert grade("Denver Broncos", "Broncos").method == "qa_f1"
    assert grade("Denver Broncos", "Broncos", qa_metric="em").method == "qa_em"


@pytest.mark.parametrize(
    "answer",
    [
        "unanswerable",
        "Unanswerable.",
        "",
        "   ",
        "No answer",
        "N/A",
        "none",
        "Unknown",
        "It is unanswerable.",
        "This question is unanswerable",
        "Cannot be answered from the context.",
        "Not mentioned in the context",
        "There is not enough information",  # normalises with a prefix outside the explicit list
    ],
)
def test_unanswerable_gold_accepts_only_no_answer_phrases(answer: str) -> None:
    result = grade("unanswerable", answer)
    expected = answer != "There is not enough information"
    assert result.method == "qa_unanswerable"
    assert result.correct is expected
    assert result.score == (1.0 if expected else 0.0)


@pytest.mark.parametrize("answer", ["Denver", "the 1990s", "unanswerable because of the 1990s", "no"])
def test_unanswerable_gold_rejects_answers(answer: str) -> None:
    result = grade("unanswerable", answer)
    assert (result.score, result.correct) == (0.0, False)


def test_no_answer_phrase_list_is_normalised() -> None:
    assert all(normalise_answer(phrase) == phrase for phrase in NO_ANSWER_PHRASES)


async def test_async_score_for_qa() -> None:
    result = await score(qa_problem("Denver Broncos | Broncos"), "broncos")
    assert (result.score, result.correct, result.details["best_gold"]) == (1.0, True, "Broncos")


class ScriptedJudge:
    """Test double for the optional LLM-judge hook: returns a fixed verdict and records its calls."""

    name = "scripted-judge"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    async def judge(self, problem: Problem, answer: str, deterministic_score: float) -> JudgeVerdict:
        self.calls.append((problem.id, answer, deterministic_score))
        return JudgeVerdict(judge=self.name, correct=True, score=1.0, rationale="scripted")


async def test_judge_is_off_by_default_and_reported_separately() -> None:
    problem = qa_problem("Denver Broncos")
    assert (await score(problem, "Chicago Bears")).judge is None
    judge = ScriptedJudge()
    result = await score(problem, "Chicago Bears", config=ScoringConfig(judge=judge))
    assert (result.score, result.correct) == (0.0, False)  # the judge never changes the score
    assert result.judge is not None and (result.judge.judge, result.judge.correct) == ("scripted-judge", True)
    assert judge.calls == [("t/1", "Chicago Bears", 0.0)]
