"""operators/answers: QA normalisation, math equivalence and the answer vote shared with the scorer."""

from __future__ import annotations

import threading

import pytest

from operators.answers import answers_equivalent, majority_index, math_equivalence, normalise_answer
from operators.answers.extract import extract_final_answer
from operators.answers.voting import answer_classes, final_answer
from operators.library._answers import answers_agree
from training.scoring import builtin as builtin_scorers
from training.scoring import qa_check


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("0.5", "1/2"),
        ("1/2", r"\frac{1}{2}"),
        ("0.5", r"\frac{1}{2}"),
        ("$1,000", "1000"),
        (r"\$1,000", "1000.0"),
        ("0.333333333333", r"\frac{1}{3}"),  # a program's rounded float joins the written fraction
        (r"2\pi+18", r"18+2\pi"),  # math-verify
    ],
)
def test_equivalent_math_answers(first: str, second: str) -> None:
    assert answers_equivalent(first, second)
    assert answers_equivalent(second, first)


@pytest.mark.parametrize(
    ("first", "second"),
    [("0.5", "0.25"), ("-3", "3"), ("0.333", "1/3"), ("1000", "100"), ("", ""), ("x", "")],
)
def test_different_math_answers(first: str, second: str) -> None:
    assert not answers_equivalent(first, second)


def test_equivalence_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object, **_kwargs: object) -> object:
        raise RuntimeError("parser exploded")

    monkeypatch.setattr(math_equivalence, "check_math", broken)
    assert answers_equivalent("x+1", "1+x") is False


def test_without_math_verify_numbers_still_compare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(math_equivalence, "symbolic_available", lambda: False)
    assert answers_equivalent(r"\frac{1}{2}", "0.5")
    assert answers_equivalent(r"\dfrac{\sqrt{2}}{2}", r"\frac{\sqrt{2}}{2}")  # normalised LaTeX strings
    assert not answers_equivalent(r"2\pi+18", r"18+2\pi")  # needs the symbolic step
    assert "not installed" in math_equivalence.check_math("x", "y").details["symbolic"]


def test_equivalence_works_off_the_main_thread() -> None:
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.append(answers_equivalent(r"2\pi+18", r"18+2\pi")))
    worker.start()
    worker.join(timeout=60)
    assert results == [True]


def test_the_scorer_uses_the_shared_code() -> None:
    assert qa_check.normalise_answer is normalise_answer
    assert builtin_scorers.check_math is math_equivalence.check_math
    assert extract_final_answer("so \\boxed{7}").text == "7"


@pytest.mark.parametrize(
    ("text", "normalised"),
    [("The Eiffel Tower.", "eiffel tower"), ("  an  Apple, a day ", "apple day"), ("eiffel tower", "eiffel tower")],
)
def test_qa_normalisation(text: str, normalised: str) -> None:
    assert normalise_answer(text) == normalised


def test_final_answers_are_read_as_the_scorer_reads_them() -> None:
    assert final_answer("3 + 4 = 7, so the answer is 7.", "math") == "7"
    assert final_answer(r"We get \boxed{\frac{1}{2}} in the end", "math") == r"\frac{1}{2}"
    assert final_answer("I think 12 then 13 apples", "math") == "13"
    assert final_answer("Reasoning...\nThe answer is: The Eiffel Tower.", "qa") == "eiffel tower"
    assert final_answer("", "math") == final_answer("  ", "qa") == ""


def test_math_majority_over_written_and_executed_answers() -> None:
    candidates = [
        "Half of the pie is left, so the answer is 3/4.",  # a lone wrong answer
        "0.5",  # Programmer: the value its program returned
        r"Each gets half: $\boxed{\frac{1}{2}}$",
        "We have 1 - 1/2 = 1/2. Final Answer: 0.50",
    ]
    assert majority_index(candidates, "math") == 1
    assert answer_classes(candidates, "math") == [[0], [1, 2, 3]]


def test_qa_majority_over_normalised_short_answers() -> None:
    candidates = ["Paris is famous. The answer is: the Louvre", "The Eiffel Tower.", "eiffel tower", "Big Ben"]
    assert majority_index(candidates, "qa") == 1
    assert majority_index(["Eiffel Tower", "The eiffel tower!"], "general") == 0


def test_qa_votes_count_every_way_of_declining_as_one_answer() -> None:
    candidates = ["Paris", "N/A", "It is not mentioned in the context.", "London"]
    assert final_answer(candidates[2], "qa") == "unanswerable"
    assert majority_index(candidates, "qa") == 1


@pytest.mark.parametrize(
    ("candidates", "task_type"),
    [
        ([], "math"),
        (["42"], "math"),  # one vote is no majority
        (["1", "2", "3"], "math"),  # all different
        (["1", "1.0", "2", r"\boxed{2}"], "math"),  # a tie between two classes of two
        (["", "", "no number here at all, nothing to extract because it goes on and on" * 3], "math"),
        (["Paris", "London"], "qa"),
    ],
)
def test_no_majority_gives_none(candidates: list[str], task_type: str) -> None:
    assert majority_index(candidates, task_type) is None


def test_candidates_without_an_answer_do_not_vote() -> None:
    assert majority_index(["", "7", "  ", "The answer is 7."], "math") == 1
    assert majority_index(["", "", "7"], "math") is None


@pytest.mark.parametrize(
    ("first", "second", "agree"),
    [
        (r"\$1,000", "1000.0", True),
        ("18 dollars", r"\boxed{18}", True),
        ("**0.5**.", r"$\frac{1}{2}$", True),
        ("Eiffel  Tower", "eiffel tower", True),
        ("25%", "25", False),
        ("-3", "3", False),
    ],
)
def test_operator_answer_keys_use_the_shared_number_reading(first: str, second: str, agree: bool) -> None:
    assert answers_agree(first, second) is agree
