"""Scorers plug in from outside the package, one per problem type: by `register_scorer`, and by a real entry
point in the `flowsteer.scorers` group. A dataset may then declare that type: the normal loader accepts it,
`score` (and `score_text` for a synchronous scorer) grade it, and an evaluation episode poses it to a director
as the canvas task type its scorer names. A type nothing registered is a clear error, at loading and at
scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowsteer_mcp.canvas.execution import NoRunner
from flowsteer_mcp.director.direct import DirectDirector
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from operators.backends.base import ChatRequest
from operators.backends.scripted import ScriptedBackend
from operators.direct_call import INSTRUCTIONS
from tests.support.distributions import install_distribution, module_name
from training.data import DatasetError, Problem, load_problems
from training.evaluate import task_for
from training.evaluate.clients import in_process_clients
from training.evaluate.runner import run_episode
from training.scoring import ScoreResult, ScorerSpec, ScoringConfig, register_scorer, score, score_text
from training.scoring.registry import ENTRY_POINT_GROUP, scorers

TOY_MODULE = """
from training.scoring import ScoreResult, ScorerSpec


async def score_palindrome(problem, answer, config):
    word = answer.strip().lower()
    correct = bool(word) and word == word[::-1]
    return ScoreResult(score=float(correct), correct=correct, method="palindrome", extracted=word)


SCORER = ScorerSpec("palindrome", score=score_palindrome)
"""


def write_toy(tmp_path: Path, problem_type: str, gold: str = "") -> Path:
    """A one-record dataset file of `problem_type`, in our JSONL record format."""
    path = tmp_path / "toy.jsonl"
    record = {"id": f"{problem_type}/1", "source": "toy", "problem_type": problem_type, "problem": "Answer."}
    path.write_text(json.dumps({**record, "ground_truth": gold}) + "\n", encoding="utf-8")
    return path


def load_toy(tmp_path: Path, problem_type: str, gold: str = "") -> Problem:
    (problem,) = load_problems(write_toy(tmp_path, problem_type, gold))
    return problem


def score_anagram(problem: Problem, answer: str, config: ScoringConfig) -> ScoreResult:
    extracted = answer.strip().lower()
    correct = sorted(extracted) == sorted(problem.ground_truth) and extracted != problem.ground_truth
    return ScoreResult(score=float(correct), correct=correct, method="anagram", extracted=extracted)


ANAGRAM = ScorerSpec("anagram", score_text=score_anagram)


async def test_a_scorer_registered_from_outside_grades_its_problem_type(tmp_path: Path) -> None:
    assert register_scorer(ANAGRAM) is ANAGRAM
    problem = load_toy(tmp_path, "anagram", gold="listen")
    assert (problem.problem_type, problem.ground_truth) == ("anagram", "listen")
    graded = await score(problem, " Silent ")
    assert (graded.score, graded.correct, graded.method, graded.extracted) == (1.0, True, "anagram", "silent")
    assert score_text(problem, "listen").correct is False  # synchronous too, since the spec has score_text
    assert (await score(problem, None)).score == 0.0


async def test_an_unknown_problem_type_is_refused_naming_the_registered_ones(tmp_path: Path) -> None:
    register_scorer(ANAGRAM)
    with pytest.raises(DatasetError, match=r"toy.jsonl:1: field 'problem_type': unknown problem type 'poem'; "):
        load_toy(tmp_path, "poem", gold="roses")
    with pytest.raises(ValueError, match=r"unknown problem type 'poem'; registered: math, qa, code, anagram\b"):
        Problem(id="p/1", source="toy", problem_type="poem", problem="Answer.", ground_truth="roses")

    problem = load_toy(tmp_path, "anagram", gold="listen")
    scorers().unregister("anagram")  # a problem whose scorer is gone by the time it is graded
    with pytest.raises(ValueError, match=r"unknown problem type 'anagram'; registered: math, qa, code$"):
        await score(problem, "silent")
    with pytest.raises(ValueError, match="unknown problem type 'anagram'"):
        score_text(problem, "silent")


async def test_a_scorer_published_as_an_entry_point_is_loaded_and_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(DatasetError, match="unknown problem type 'palindrome'"):
        load_toy(tmp_path, "palindrome")  # not installed yet
    scorers.cache_clear()  # a fresh process: the registry is built on first use

    module = module_name("fs_scorer_plugin", tmp_path)
    install_distribution(
        tmp_path / "site", module, TOY_MODULE, ENTRY_POINT_GROUP, {"palindrome": f"{module}:SCORER"}, monkeypatch
    )

    problem = load_toy(tmp_path, "palindrome")
    assert [(await score(problem, word)).correct for word in ("Level", "levels")] == [True, False]
    assert (await score(problem, "noon")).method == "palindrome"
    with pytest.raises(ValueError, match=r"palindrome answers are graded asynchronously.*await score"):
        score_text(problem, "noon")  # its spec has no synchronous scorer


async def test_an_evaluation_episode_poses_and_grades_a_plugged_in_type(tmp_path: Path) -> None:
    register_scorer(ANAGRAM)
    problem = load_toy(tmp_path, "anagram", gold="listen")
    prompts: list[str] = []

    def executor(request: ChatRequest) -> str:
        prompts.append(request.messages[-1].content)
        return "Silent"

    server = build_server(ServerSettings(), runner=NoRunner(), store=MemoryStore())
    director = DirectDirector(ScriptedBackend(rules=[executor]))
    item = await run_episode(director, problem, make_client=in_process_clients(server.mcp))

    assert (item.problem_type, item.answer, item.error) == ("anagram", "Silent", None)
    assert (item.score, item.correct, item.score_method) == (1.0, True, "anagram")
    (prompt,) = prompts
    assert prompt == f"Answer.\n{INSTRUCTIONS['general']}"  # posed as a general task; the gold never shown


def test_a_scorer_spec_names_the_canvas_task_type_of_its_problems(tmp_path: Path) -> None:
    register_scorer(ANAGRAM)
    register_scorer(ScorerSpec("trivia", score_text=score_anagram, task_type="qa"))
    assert task_for(load_toy(tmp_path, "anagram", gold="listen")).task_type == "general"
    assert task_for(load_toy(tmp_path, "trivia", gold="paris")).task_type == "qa"
    with pytest.raises(ValueError, match=r"task_type 'poem' is not one of \('math', 'code', 'qa', 'general'\)"):
        ScorerSpec("verse", score_text=score_anagram, task_type="poem")  # type: ignore[arg-type]


def test_a_scorer_spec_needs_a_scoring_function() -> None:
    with pytest.raises(TypeError, match="give score_text, score, or both"):
        ScorerSpec("empty")


def test_the_report_interval_follows_what_the_scorer_declares() -> None:
    from training.evaluate.report import interval_method

    register_scorer(ANAGRAM)  # graded: not declared pass/fail
    register_scorer(ScorerSpec("yesno", score_text=score_anagram, binary=True))
    assert [interval_method(kind) for kind in ("math", "code", "qa")] == ["wilson", "wilson", "student_t"]
    assert interval_method("anagram") == "student_t"  # any score in [0, 1], not only 0/1
    assert interval_method("yesno") == "wilson"
    assert interval_method("not-installed-here") == "student_t"  # a journal of a plug-in this process lacks
