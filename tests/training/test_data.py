"""Dataset loader: our record format, the released FlowSteer-Dataset layout, errors, filters, public views."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.data import (
    DatasetError,
    Problem,
    guess_entry_point,
    infer_problem_type,
    load_dataset,
    load_problems,
    parse_record,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"

HUMANEVAL_LIKE: dict[str, Any] = {
    "id": "humaneval/HumanEval/0",
    "source": "humaneval",
    "problem_type": "code",
    "problem": 'def add(a, b):\n    """Add two numbers."""\n',
    "ground_truth": 'def add(a, b):\n    """Add two numbers."""\n    return a + b\n',
    "meta": {
        "entry_point": "add",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
        "public_tests": "assert add(1, 1) == 2",
        "prompt": 'def add(a, b):\n    """Add two numbers."""\n',
    },
}
APPS_LIKE: dict[str, Any] = {
    "id": "apps/1",
    "source": "apps",
    "problem_type": "code",
    "problem": "Double the number.",
    "ground_truth": "",
    "meta": {
        "test_type": "stdin",
        "entry_point": "",
        "starter_code": "",
        "test": "",
        "test_cases": [{"input": "2\n", "output": ["4\n"]}, {"input": "5\n", "output": ["10\n"]}],
        "public_tests": [{"input": "2\n", "output": ["4\n"]}],
    },
}
GSM8K_LIKE: dict[str, Any] = {
    "id": "gsm8k/test-0",
    "source": "gsm8k",
    "problem_type": "math",
    "problem": "How many?",
    "ground_truth": "18",
    "meta": {"solution": "16 - 3 - 4 = <<16-3-4=9>>9\n#### 18"},
}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_our_format_round_trips_every_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mix.jsonl", [GSM8K_LIKE, HUMANEVAL_LIKE])
    gsm, human = load_problems(path)
    assert (gsm.id, gsm.source, gsm.problem_type, gsm.ground_truth) == ("gsm8k/test-0", "gsm8k", "math", "18")
    assert gsm.meta["solution"].endswith("#### 18")
    assert human.code.entry_point == "add"
    assert "def check(candidate)" in human.code.test
    assert human.code.public_tests == "assert add(1, 1) == 2"
    assert human.code.prompt is not None and human.code.prompt.startswith("def add")


def test_apps_meta_is_typed(tmp_path: Path) -> None:
    (apps,) = load_problems(write_jsonl(tmp_path / "apps.jsonl", [APPS_LIKE]))
    code = apps.code
    assert code.test_type == "stdin"
    assert code.entry_point is None  # "" in the data means none
    assert [case.input for case in code.test_cases] == ["2\n", "5\n"]
    assert [case.expected for case in code.test_cases] == ["4\n", "10\n"]
    assert [case.expected for case in code.public_test_cases] == ["4\n"]
    assert code.public_tests == ""


def test_released_layout_is_mapped_and_problem_type_inferred(tmp_path: Path) -> None:
    rows = [
        {"question": "What is 2+2?", "answer": 4, "dataset": "gsm8k"},
        {"question": "Pick one.", "answer": "b", "source": "mathqa", "problem_type": "mathqa_mc"},
        {"problem": "Who?", "ground_truth": "Ada | Ada Lovelace", "source": "hotpotqa", "context": "ctx"},
        {
            "problem": "Write f.",
            "answer": "def f():\n    return 1",
            "source": "mbpp",
            "meta": {"test": "assert f() == 1", "task_id": 7},
        },
    ]
    problems = load_problems(write_jsonl(tmp_path / "released.jsonl", rows))
    assert [p.problem_type for p in problems] == ["math", "math", "qa", "code"]
    assert problems[0].ground_truth == "4"
    assert problems[0].id == "gsm8k/released-1"  # no id, no task_id: source + file + line
    assert problems[2].meta["context"] == "ctx"  # unknown top-level fields are kept in meta
    assert problems[2].gold_alternatives == ["Ada", "Ada Lovelace"]
    assert problems[3].id == "mbpp/7"
    assert problems[3].code.entry_point == "f"  # guessed from the asserts and the reference code


def test_missing_source_falls_back_to_the_file_name(tmp_path: Path) -> None:
    (problem,) = load_problems(write_jsonl(tmp_path / "triviaqa.jsonl", [{"question": "q?", "answer": "x"}]))
    assert (problem.source, problem.problem_type) == ("triviaqa", "qa")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("gsm8k", "math"),
        ("math", "math"),
        ("MATH500", "math"),
        ("mathqa", "math"),
        ("aime2025", "math"),
        ("humaneval", "code"),
        ("mbpp", "code"),
        ("mbppplus", "code"),
        ("apps", "code"),
        ("bigcodebench", "code"),
        ("hotpotqa", "qa"),
        ("squad_v2", "qa"),
        ("triviaqa", "qa"),
        ("nq", "qa"),
        ("ds1000", None),
        ("unknown", None),
    ],
)
def test_problem_type_is_inferred_from_the_source(source: str, expected: str | None) -> None:
    assert infer_problem_type(source) == expected


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("{not json", "record"),
        ("[1, 2]", "record"),
        (json.dumps({"id": "a", "source": "gsm8k", "problem": "q"}), "ground_truth"),
        (json.dumps({"id": "a", "source": "gsm8k", "ground_truth": "1"}), "problem"),
        (json.dumps({"id": "a", "source": "gsm8k", "problem": "q", "ground_truth": "  "}), "ground_truth"),
        (json.dumps({"id": "a", "source": "zzz", "problem": "q", "ground_truth": "1"}), "problem_type"),
        (
            json.dumps({"id": "a", "source": "gsm8k", "problem_type": "poetry", "problem": "q", "ground_truth": "1"}),
            "problem_type",
        ),
        (json.dumps({"id": "a", "source": "gsm8k", "problem": "q", "ground_truth": "1", "meta": [1]}), "meta"),
        (json.dumps({"id": "a", "source": "mbpp", "problem": "q", "ground_truth": "x", "meta": {}}), "meta.test"),
        (
            json.dumps(
                {
                    "id": "a",
                    "source": "apps",
                    "problem": "q",
                    "ground_truth": "",
                    "meta": {"test_type": "stdin", "test_cases": [{"input": 3, "output": ["3"]}]},
                }
            ),
            "meta.test_cases.0.input",
        ),
        (
            json.dumps(
                {
                    "id": "a",
                    "source": "apps",
                    "problem": "q",
                    "ground_truth": "",
                    "meta": {"test_type": "sideways", "test_cases": [{"input": "1", "output": ["1"]}]},
                }
            ),
            "meta.test_type",
        ),
    ],
)
def test_malformed_lines_name_file_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [GSM8K_LIKE, line])
    with pytest.raises(DatasetError) as caught:
        load_problems(path)
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), 2, field)
    assert str(error).startswith(f"{path}:2: field {field!r}:")


def test_duplicate_ids_are_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "dup.jsonl", [GSM8K_LIKE, GSM8K_LIKE])
    with pytest.raises(DatasetError, match="duplicate id") as caught:
        load_problems(path)
    assert caught.value.line == 2


def test_skip_invalid_keeps_good_lines_and_reports_bad_ones(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "some_bad.jsonl", ["{oops", GSM8K_LIKE, "", '{"source": "gsm8k"}', HUMANEVAL_LIKE])
    report = load_dataset(path, skip_invalid=True)
    assert [p.id for p in report.problems] == ["gsm8k/test-0", "humaneval/HumanEval/0"]
    assert [(e.line, e.field) for e in report.skipped] == [(1, "record"), (4, "ground_truth")]
    assert load_problems(path, skip_invalid=True) == report.problems


def test_folder_loading_limit_per_source_and_source_filter(tmp_path: Path) -> None:
    math_rows = [dict(GSM8K_LIKE, id=f"gsm8k/test-{i}") for i in range(5)]
    write_jsonl(tmp_path / "b_gsm8k.jsonl", math_rows)
    write_jsonl(tmp_path / "a_humaneval.jsonl", [HUMANEVAL_LIKE])
    (tmp_path / "notes.txt").write_text("not data")
    everything = load_problems(tmp_path)
    assert [p.source for p in everything] == ["humaneval"] + ["gsm8k"] * 5  # files in name order
    limited = load_problems(tmp_path, limit=2)
    assert [p.id for p in limited] == ["humaneval/HumanEval/0", "gsm8k/test-0", "gsm8k/test-1"]
    only_math = load_problems(tmp_path, sources=["gsm8k"], limit=3)
    assert [p.id for p in only_math] == ["gsm8k/test-0", "gsm8k/test-1", "gsm8k/test-2"]


def test_missing_paths_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_problems(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match=r"no \*\.jsonl"):
        load_problems(tmp_path)
    with pytest.raises(ValueError, match="limit"):
        load_problems(tmp_path, limit=-1)


def test_public_view_hides_gold_and_hidden_tests() -> None:
    human = parse_record(HUMANEVAL_LIKE)
    view = human.public_view()
    dumped = view.model_dump_json()
    assert view.entry_point == "add"
    assert view.public_tests == "assert add(1, 1) == 2"
    assert "def check" not in dumped and "return a + b" not in dumped
    assert not hasattr(view, "ground_truth") and not hasattr(view, "meta")

    apps_view = parse_record(APPS_LIKE).public_view()
    assert [case.input for case in apps_view.public_test_cases] == ["2\n"]
    assert "5\\n" not in apps_view.model_dump_json()  # the hidden case never shows

    gsm_view = parse_record(GSM8K_LIKE).public_view()
    assert "####" not in gsm_view.model_dump_json() and "18" not in gsm_view.model_dump_json()


def test_code_accessor_only_on_code_problems() -> None:
    with pytest.raises(ValueError, match="not a code problem"):
        _ = parse_record(GSM8K_LIKE).code


def test_options_accessor_for_multiple_choice() -> None:
    problem = Problem(
        id="mathqa/1",
        source="mathqa",
        problem_type="math",
        problem="q",
        ground_truth="c",
        meta={"options": {"A": "1", "b": "2", "c": "700"}},
    )
    assert problem.options == {"a": "1", "b": "2", "c": "700"}
    assert parse_record(GSM8K_LIKE).options is None


@pytest.mark.parametrize(
    ("test", "reference", "expected"),
    [
        ("assert set(similar(a, b)) == {1}", "def similar(a, b):\n    pass", "similar"),
        ("assert math.isclose(area(2), 12.56, rel_tol=0.01)", "", "area"),
        ("import math\nassert not is_odd(2)", "", "is_odd"),
        ("assert len([1]) == 1", "", None),
    ],
)
def test_entry_point_is_guessed_from_asserts(test: str, reference: str, expected: str | None) -> None:
    assert guess_entry_point(test, reference) == expected


def test_shared_data_loads_completely() -> None:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared benchmark data not found at {SHARED_DATA}")
    report = load_dataset(SHARED_DATA)
    assert report.skipped == []
    counts: dict[str, int] = {}
    for problem in report.problems:
        counts[problem.source] = counts.get(problem.source, 0) + 1
    assert counts == {
        "aime2025": 15,
        "apps": 64,
        "gsm8k": 500,
        "hotpotqa": 300,
        "humaneval": 82,
        "math": 250,
        "mathqa": 500,
        "mbpp": 214,
        "nq": 500,
        "squad_v2": 500,
        "triviaqa": 317,
    }
    code = [p for p in report.problems if p.problem_type == "code"]
    assert all(p.code.entry_point for p in code if p.code.test_type != "stdin")
    for problem in code:
        visible = [v for v in problem.public_view().model_dump().values() if isinstance(v, str)]
        assert not any(problem.code.test.strip() and problem.code.test.strip() in text for text in visible)
        assert not any(problem.ground_truth.strip() and problem.ground_truth.strip() in text for text in visible)


def test_our_field_names_win_over_released_aliases_which_stay_in_meta() -> None:
    raw = {"answer": "Work... #### 72", "ground_truth": "72", "question": "old", "problem": "new", "source": "gsm8k"}
    problem = parse_record(raw)
    assert (problem.ground_truth, problem.problem) == ("72", "new")
    assert (problem.meta["answer"], problem.meta["question"]) == ("Work... #### 72", "old")


def test_load_inputs_skips_then_limits_per_source_and_refuses_an_id_in_two_inputs(tmp_path: Path) -> None:
    from training.data import load_inputs

    rows = [
        {"id": f"a/{i}", "source": "a", "problem_type": "math", "problem": "q", "ground_truth": "1"} for i in range(5)
    ]
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [p.id for p in load_inputs([first], skip=1, limit=2)] == ["a/1", "a/2"]
    assert [p.id for p in load_inputs([first], skip=4)] == ["a/4"]
    second = tmp_path / "second.jsonl"
    second.write_text(json.dumps(rows[3]) + "\n")
    with pytest.raises(ValueError, match="more than one data input"):
        load_inputs([first, second])
