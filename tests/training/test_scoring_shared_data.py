"""Every gold answer of ../shared/data scores 1 against itself; canonical code solutions pass their hidden
tests. Negative controls show the same checks can fail."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from training.data import Problem, load_problems
from training.scoring import score, score_text
from training.scoring.code_check import hidden_test_for

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"

MATH_FILES = ["gsm8k", "math", "mathqa", "aime2025"]
QA_FILES = ["hotpotqa", "squad_v2", "triviaqa", "nq"]


def load(name: str) -> list[Problem]:
    path = SHARED_DATA / f"{name}.jsonl"
    if not path.is_file():
        pytest.skip(f"shared benchmark file not found: {path}")
    problems = load_problems(path)
    assert problems, f"{path} is empty"
    return problems


# ------------------------------------------------------------------------------------------------- math


def unlabelled(option_text: str) -> str:
    """Some MathQA option texts repeat their label (`a ) 350`)."""
    return re.sub(r"^\(?[a-e]\s*\)\s*", "", option_text.strip())


@pytest.mark.parametrize("name", MATH_FILES)
def test_math_golds_score_one_boxed_and_plain(name: str) -> None:
    problems = load(name)
    boxed = [p.id for p in problems if score_text(p, f"\\boxed{{{p.ground_truth}}}").score != 1.0]
    plain = [p.id for p in problems if score_text(p, p.ground_truth).score != 1.0]
    assert (boxed, plain) == ([], [])


@pytest.mark.parametrize("name", ["gsm8k", "math"])
def test_worked_solutions_score_one(name: str) -> None:
    """The datasets' own solutions end in `#### n` (GSM8K) or a final `\\boxed{}` (MATH)."""
    problems = load(name)
    failures = [p.id for p in problems if score_text(p, p.meta["solution"]).score != 1.0]
    assert failures == []


def test_gsm8k_raw_answers_with_thousands_commas_score_one() -> None:
    problems = load("gsm8k")
    with_commas = [p for p in problems if "," in p.meta["answer_raw"]]
    assert with_commas, "expected some golds like 2,125 in the dev portion"
    assert [p.id for p in problems if score_text(p, f"#### {p.meta['answer_raw']}").score != 1.0] == []


def test_mathqa_option_text_scores_one_unless_ambiguous() -> None:
    """The correct option's text identifies the letter, except when several options share that text (then
    no letter may be guessed)."""
    problems = load("mathqa")
    wrong: list[str] = []
    ambiguous = 0
    for problem in problems:
        options = problem.options or {}
        text = problem.meta["correct_option_text"]
        same_text = [k for k, v in options.items() if unlabelled(v) == unlabelled(text)]
        expected = len(same_text) == 1
        ambiguous += not expected
        if score_text(problem, text).correct is not expected:
            wrong.append(problem.id)
    assert wrong == []
    assert ambiguous < 10  # data quirk (e.g. test-1235: options a and b are both "3"), kept rare


@pytest.mark.parametrize("name", ["gsm8k", "aime2025", "math"])
def test_math_negative_control_off_by_one(name: str) -> None:
    problems = [p for p in load(name) if re.fullmatch(r"-?\d+", p.ground_truth)]
    accepted = [p.id for p in problems if score_text(p, f"\\boxed{{{int(p.ground_truth) + 1}}}").score != 0.0]
    assert problems and accepted == []


def test_mathqa_negative_control_wrong_letter() -> None:
    problems = load("mathqa")
    wrong_letter = {"a": "b", "b": "c", "c": "d", "d": "e", "e": "a"}
    accepted = [p.id for p in problems if score_text(p, wrong_letter[p.ground_truth]).score != 0.0]
    assert accepted == []


# --------------------------------------------------------------------------------------------------- qa


@pytest.mark.parametrize("name", QA_FILES)
def test_every_qa_gold_alternative_scores_one(name: str) -> None:
    problems = load(name)
    failures = [
        (p.id, alternative)
        for p in problems
        for alternative in p.gold_alternatives
        if (result := score_text(p, alternative)).score != 1.0 or not result.correct
    ]
    assert failures == []


@pytest.mark.parametrize("name", QA_FILES)
def test_qa_negative_control(name: str) -> None:
    problems = load(name)
    accepted = [p.id for p in problems if score_text(p, "zyzzyva quokka").score != 0.0]
    assert accepted == []


def test_squad_unanswerable_both_ways() -> None:
    problems = load("squad_v2")
    unanswerable = [p for p in problems if p.ground_truth == "unanswerable"]
    answerable = [p for p in problems if p.ground_truth != "unanswerable"]
    assert len(unanswerable) == sum(bool(p.meta["is_impossible"]) for p in problems) > 0
    assert [p.id for p in unanswerable if score_text(p, "No answer.").score != 1.0] == []
    assert [p.id for p in answerable if score_text(p, "unanswerable").score != 0.0] == []
    assert [p.id for p in unanswerable if score_text(p, p.meta["question"]).score != 0.0] == []


# ------------------------------------------------------------------------------------------------- code


@pytest.mark.slow
@pytest.mark.parametrize("name", ["humaneval", "mbpp"])
async def test_canonical_solutions_pass_their_hidden_tests(name: str) -> None:
    problems = load(name)
    results = await asyncio.gather(*(score(p, p.ground_truth) for p in problems))
    failures = [(p.id, r.details.get("reason")) for p, r in zip(problems, results, strict=True) if r.score != 1.0]
    assert failures == []
    assert all(r.method == "sandbox" for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["humaneval", "mbpp"])
async def test_code_negative_control_stub_solutions_fail(name: str) -> None:
    problems = load(name)[:10]
    stubs = [f"def {p.code.entry_point}(*args, **kwargs):\n    return None\n" for p in problems]
    results = await asyncio.gather(*(score(p, stub) for p, stub in zip(problems, stubs, strict=True)))
    assert [r.score for r in results] == [0.0] * len(problems)


# MBPP problems whose own function is named `check`: their asserts call it, so the HumanEval convention (the
# sandbox calls `check(<entry point>)`) must not apply to them. It did, and their reference solutions scored 0.
MBPP_CHECK_IDS = ["mbpp/train-349", "mbpp/train-899", "mbpp/train-967"]


async def test_mbpp_solutions_named_check_pass_their_asserts() -> None:
    problems = [p for p in load("train/mbpp_train") if p.id in MBPP_CHECK_IDS]
    assert sorted(p.id for p in problems) == MBPP_CHECK_IDS
    assert all(p.code.entry_point == "check" and "def check(" not in p.code.test for p in problems)
    results = await asyncio.gather(*(score(p, p.ground_truth) for p in problems))
    assert [(p.id, r.score, r.method) for p, r in zip(problems, results, strict=True)] == [
        (p.id, 1.0, "sandbox") for p in problems
    ]


async def test_humaneval_check_convention_still_grades_right_and_wrong_solutions() -> None:
    """HumanEval tests define `check(candidate)` and only run when the sandbox calls it: a wrong solution
    scoring 1 would mean `check` was never called."""
    problem = next(p for p in load("humaneval") if p.id == "humaneval/HumanEval/67")
    wrong = "def fruit_distribution(s, n):\n    return n\n"
    right_result, wrong_result = await asyncio.gather(score(problem, problem.ground_truth), score(problem, wrong))
    assert (right_result.score, right_result.method, right_result.details["test_kind"]) == (1.0, "sandbox", "check")
    assert (wrong_result.score, wrong_result.method) == (0.0, "sandbox")
    assert "AssertionError" in wrong_result.details["reason"]


def test_every_apps_record_yields_a_runnable_hidden_test() -> None:
    problems = load("apps")
    for problem in problems:
        hidden = hidden_test_for(problem)
        if hidden.kind == "stdin":
            assert hidden.stdin_cases and len(hidden.stdin_cases) == len(problem.code.test_cases)
        else:
            assert hidden.kind == "call" and hidden.entry_point == problem.code.entry_point
            compile(hidden.tests or "", problem.id, "exec")


def test_apps_has_no_reference_solutions() -> None:
    problems = load("apps")
    assert all(p.ground_truth == "" for p in problems)
    assert all(p.code.test_cases for p in problems)
    pytest.skip("APPS records carry no reference solutions (ground_truth is empty), so none can be replayed")
