"""Benchmark problems: one validated record type and a loader for our JSONL files and the released
FlowSteer-Dataset layout.

Why a strict loader: a silently mis-read gold answer or hidden test corrupts every score computed from it,
so every malformed line is reported with its file, line number and field. Hidden grading material
(`ground_truth`, `meta.test`, `meta.test_cases`) never leaves a `Problem` through `public_view()`, which is
all the policy and the operators may see.

`problem_type` is open: any type a scorer is registered for (`training.scoring.registry`: math, qa, code built
in, more by plug-in) is a valid one, and any other is refused when the record is validated, naming the
registered types, so a problem no scorer can grade never enters a run.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from training.errors import TrainingError

log = structlog.get_logger(__name__)

# Source-name prefixes -> problem type; the first match wins, so "mathqa" comes before "math".
_SOURCE_TYPES: tuple[tuple[str, str], ...] = (
    ("bigcodebench", "code"),
    ("humaneval", "code"),
    ("triviaqa", "qa"),
    ("hotpotqa", "qa"),
    ("squad_v2", "qa"),
    ("squadv2", "qa"),
    ("mathqa", "math"),
    ("aime", "math"),
    ("gsm8k", "math"),
    ("mbpp", "code"),
    ("apps", "code"),
    ("math", "math"),
    ("nq", "qa"),
)
# Problem-type spellings of the released dataset that we fold into ours (multiple choice is graded as math).
_TYPE_ALIASES: dict[str, str] = {
    "mathqa_mc": "math",
    "mc": "math",
    "multiple_choice": "math",
}
# The built-in types graded against `ground_truth`; a plugged-in type's scorer says for itself what it needs.
_GOLD_GRADED = frozenset({"math", "qa"})
_OUR_KEYS = frozenset({"id", "source", "problem_type", "problem", "ground_truth", "meta"})
_RELEASED_ALIASES = {"question": "problem", "answer": "ground_truth", "dataset": "source"}


class RecordFieldError(TrainingError, ValueError):
    """Raised inside validation to name the offending field of a record."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class DatasetError(TrainingError, ValueError):
    """A record that cannot be used, located precisely so the data can be fixed."""

    def __init__(self, path: Path | str, line: int, field: str, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        super().__init__(f"{self.path}:{line}: field {field!r}: {message}")


def registered_problem_types() -> list[str]:
    """The problem types a scorer is registered for, built-ins first: the valid values of `problem_type`."""
    from training.scoring.registry import scorers  # the registry grades `Problem`s, so it imports this module

    return scorers().names()


def infer_problem_type(source: str) -> str | None:
    """The problem type implied by a dataset name (`gsm8k`, `mbpp_plus`, `squad_v2` ...), or None if unknown."""
    key = source.strip().lower().replace("-", "_")
    for prefix, problem_type in _SOURCE_TYPES:
        if key.startswith(prefix):
            return problem_type
    return None


class IOCase(BaseModel):
    """One input/output test case (APPS, MapCoder format): `output` holds a one-element list [expected]."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: str
    output: list[Any] = Field(min_length=1)

    @property
    def expected(self) -> Any:
        """Expected stdout (stdin problems) or expected return value (call-based problems)."""
        return self.output[0]


class CodeMeta(BaseModel):
    """Typed view of a code problem's `meta`. `test` and `test_cases` are hidden grading material."""

    model_config = ConfigDict(frozen=True)

    entry_point: str | None = None
    test: str = ""  # hidden grading test: HumanEval `check(candidate)` harness or MBPP asserts
    public_tests: str = ""  # visible asserts (HumanEval / MBPP)
    prompt: str | None = None
    starter_code: str | None = None
    test_type: Literal["call", "stdin"] | None = None  # APPS only
    test_cases: list[IOCase] = Field(default_factory=list)  # APPS hidden cases
    public_test_cases: list[IOCase] = Field(default_factory=list)  # APPS sample cases (visible)

    @field_validator("entry_point", "prompt", "starter_code", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("test_type", mode="before")
    @classmethod
    def _blank_type_is_none(cls, value: Any) -> Any:
        return None if value in ("", None) else value

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> CodeMeta:
        data = {k: meta[k] for k in ("entry_point", "test", "prompt", "starter_code", "test_type") if k in meta}
        data["test_cases"] = meta.get("test_cases") or []
        public = meta.get("public_tests")
        if isinstance(public, list):  # APPS keeps its sample cases under the same key as a list
            data["public_test_cases"] = public
        elif public is not None:
            data["public_tests"] = public
        return cls.model_validate(data)

    @property
    def has_hidden_tests(self) -> bool:
        return bool(self.test.strip()) or bool(self.test_cases)


class PublicProblem(BaseModel):
    """What a policy, an operator or a prompt may see: the task and its visible tests, never the grading."""

    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    problem_type: str
    problem: str
    entry_point: str | None = None
    public_tests: str = ""
    public_test_cases: list[IOCase] = Field(default_factory=list)
    starter_code: str | None = None
    test_type: Literal["call", "stdin"] | None = None


class Problem(BaseModel):
    """One benchmark item in our record format (docs/design/evaluation.md, "Datasets")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    problem_type: str
    problem: str = Field(min_length=1)
    ground_truth: str
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("problem_type")
    @classmethod
    def _has_a_scorer(cls, value: str) -> str:
        if value not in registered_problem_types():
            raise RecordFieldError(
                "problem_type",
                f"unknown problem type {value!r}; registered: {', '.join(registered_problem_types())}",
            )
        return value

    @model_validator(mode="after")
    def _check_grading_material(self) -> Problem:
        if self.problem_type == "code":
            self._code_meta()  # raises RecordFieldError for a malformed or test-less code record
        elif self.problem_type in _GOLD_GRADED and not self.ground_truth.strip():
            raise RecordFieldError("ground_truth", f"a {self.problem_type} problem needs a non-empty gold")
        return self

    def _code_meta(self) -> CodeMeta:
        try:
            code = CodeMeta.from_meta(self.meta)
        except ValidationError as exc:
            loc, msg = _field_of(exc)
            raise RecordFieldError(f"meta.{loc}", msg) from exc
        if code.entry_point is None:
            guessed = guess_entry_point(code.test, self.ground_truth)
            if guessed is not None:
                code = code.model_copy(update={"entry_point": guessed})
        if not code.has_hidden_tests:
            raise RecordFieldError("meta.test", "code problem has no hidden test (meta.test or meta.test_cases)")
        return code

    @property
    def code(self) -> CodeMeta:
        """Typed code meta (derived from `meta` on each access, so it can never go stale)."""
        if self.problem_type != "code":
            raise ValueError(f"problem {self.id!r} is a {self.problem_type} problem, not a code problem")
        return self._code_meta()

    @property
    def options(self) -> dict[str, str] | None:
        """Multiple-choice options (MathQA: letter -> option text) when the record has them."""
        raw = self.meta.get("options")
        if isinstance(raw, Mapping) and raw:
            return {str(k).strip().lower(): str(v) for k, v in raw.items()}
        return None

    @property
    def gold_alternatives(self) -> list[str]:
        """QA golds: the alternatives joined by '|' in `ground_truth`, stripped, empties dropped."""
        return [part.strip() for part in self.ground_truth.split("|") if part.strip()]

    def public_view(self) -> PublicProblem:
        view = PublicProblem(id=self.id, source=self.source, problem_type=self.problem_type, problem=self.problem)
        if self.problem_type != "code":
            return view
        code = self.code
        return view.model_copy(
            update={
                "entry_point": code.entry_point,
                "public_tests": code.public_tests,
                "public_test_cases": list(code.public_test_cases),
                "starter_code": code.starter_code,
                "test_type": code.test_type,
            }
        )


_CALLED_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_DEFINED_NAME = re.compile(r"^(?:def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)


def guess_entry_point(test: str, reference_code: str = "") -> str | None:
    """The function the asserts exercise: a name defined in the reference code and called in the test,
    else the first called name that is not a builtin or `check`. None when nothing fits."""
    called = [name for name in _CALLED_NAME.findall(test) if name not in ("assert", "check")]
    defined = _DEFINED_NAME.findall(reference_code)
    for name in defined:
        if name in called:
            return name
    for name in called:
        if not hasattr(builtins, name):
            return name
    return None


# --------------------------------------------------------------------------------------------- loading


@dataclass
class LoadReport:
    """Outcome of reading one file or folder: the problems, and the lines that were skipped and why."""

    problems: list[Problem] = field(default_factory=list)
    skipped: list[DatasetError] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)


def _field_of(error: ValidationError) -> tuple[str, str]:
    """The dotted location and message of the first error, unwrapping our own `RecordFieldError`."""
    first = error.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, RecordFieldError):
        return cause.field, cause.message
    loc = ".".join(str(part) for part in first["loc"]) or "record"
    return loc, first["msg"]


def _normalise_record(raw: Mapping[str, Any], path: Path, line: int) -> dict[str, Any]:
    """Map our format and the released FlowSteer-Dataset layout onto the `Problem` fields."""
    record: dict[str, Any] = {}
    meta_raw = raw.get("meta", {})
    if meta_raw is None:
        meta_raw = {}
    if not isinstance(meta_raw, Mapping):
        raise DatasetError(path, line, "meta", f"must be an object, got {type(meta_raw).__name__}")
    meta = dict(meta_raw)
    for key, value in raw.items():
        if key in _OUR_KEYS:
            record[key] = value
    for key, value in raw.items():
        if key in _OUR_KEYS:
            continue
        target = _RELEASED_ALIASES.get(key)
        if target is not None and target not in record:
            record[target] = value
        else:  # extra fields (task_id, context ...) and aliases shadowed by our own names are kept as meta
            meta.setdefault(key, value)
    record["meta"] = meta

    if "source" not in record or record["source"] in (None, ""):
        record["source"] = path.stem  # released eval files are named after their dataset
    if not isinstance(record["source"], str):
        raise DatasetError(path, line, "source", "must be a string")

    truth = record.get("ground_truth")
    if isinstance(truth, bool):
        raise DatasetError(path, line, "ground_truth", "must be a string, got a boolean")
    if isinstance(truth, int | float):
        record["ground_truth"] = str(truth)
    elif isinstance(truth, list) and all(isinstance(t, str) for t in truth):
        record["ground_truth"] = " | ".join(truth)
    elif truth is None:
        raise DatasetError(path, line, "ground_truth", "missing (expected 'ground_truth' or 'answer')")

    if "problem" not in record:
        raise DatasetError(path, line, "problem", "missing (expected 'problem' or 'question')")

    declared = record.get("problem_type")
    if declared in (None, ""):
        inferred = infer_problem_type(record["source"])
        if inferred is None:
            raise DatasetError(
                path,
                line,
                "problem_type",
                f"missing, and source {record['source']!r} does not imply one "
                f"(registered: {', '.join(registered_problem_types())})",
            )
        record["problem_type"] = inferred
    elif isinstance(declared, str) and declared.lower() in _TYPE_ALIASES:
        record["problem_type"] = _TYPE_ALIASES[declared.lower()]

    if record.get("id") in (None, ""):
        task_id = meta.get("task_id")
        suffix = str(task_id) if task_id not in (None, "") else f"{path.stem}-{line}"
        record["id"] = f"{record['source']}/{suffix}"
    elif isinstance(record["id"], int):
        record["id"] = str(record["id"])
    return record


def parse_record(raw: Any, path: Path | str = "<memory>", line: int = 1) -> Problem:
    """Validate one decoded JSON value as a `Problem`; raises `DatasetError` naming the bad field."""
    path = Path(path)
    if not isinstance(raw, Mapping):
        raise DatasetError(path, line, "record", f"must be a JSON object, got {type(raw).__name__}")
    record = _normalise_record(raw, path, line)
    try:
        return Problem.model_validate(record)
    except ValidationError as exc:
        loc, msg = _field_of(exc)
        raise DatasetError(path, line, loc, msg) from exc


def _files_in(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.glob("*.jsonl") if p.is_file())
        if not files:
            raise FileNotFoundError(f"no *.jsonl files in {path}")
        return files
    if not path.exists():
        raise FileNotFoundError(f"dataset path does not exist: {path}")
    return [path]


def _read_file(
    path: Path, report: LoadReport, *, skip_invalid: bool, sources: frozenset[str] | None, seen: set[str]
) -> Iterable[Problem]:
    with path.open(encoding="utf-8") as handle:
        for line_no, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                try:
                    raw = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise DatasetError(path, line_no, "record", f"invalid JSON: {exc.msg}") from exc
                problem = parse_record(raw, path, line_no)
                if problem.id in seen:
                    raise DatasetError(path, line_no, "id", f"duplicate id {problem.id!r}")
            except DatasetError as exc:
                if not skip_invalid:
                    raise
                report.skipped.append(exc)
                continue
            seen.add(problem.id)
            if sources is None or problem.source in sources:
                yield problem


def load_dataset(
    path_or_dir: str | Path,
    *,
    limit: int | None = None,
    sources: Iterable[str] | None = None,
    skip_invalid: bool = False,
    skip: int = 0,
) -> LoadReport:
    """Read a JSONL file, or every `*.jsonl` file of a folder (sorted by name, not recursive).

    limit: at most this many problems *per source*, in file order (so `--limit 30` on a folder gives 30 of
    each dataset). skip: leave out each source's first N first (e.g. the items an evaluation uses).
    sources: keep only these source names. skip_invalid: collect malformed lines in `report.skipped` instead
    of raising the first `DatasetError`.
    """
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    if skip < 0:
        raise ValueError("skip must be >= 0")
    wanted = frozenset(sources) if sources is not None else None
    report = LoadReport(files=_files_in(Path(path_or_dir)))
    per_source: dict[str, int] = {}
    seen: set[str] = set()
    for file in report.files:
        for problem in _read_file(file, report, skip_invalid=skip_invalid, sources=wanted, seen=seen):
            count = per_source.get(problem.source, 0)
            per_source[problem.source] = count + 1
            if count < skip or (limit is not None and count >= skip + limit):
                continue
            report.problems.append(problem)
    if report.skipped:
        log.warning(
            "dataset_lines_skipped",
            count=len(report.skipped),
            first=str(report.skipped[0]),
        )
    return report


def load_problems(
    path_or_dir: str | Path,
    *,
    limit: int | None = None,
    sources: Iterable[str] | None = None,
    skip_invalid: bool = False,
    skip: int = 0,
) -> list[Problem]:
    """The problems of `load_dataset` (same arguments); use `load_dataset` to see what was skipped."""
    return load_dataset(path_or_dir, limit=limit, sources=sources, skip_invalid=skip_invalid, skip=skip).problems


def load_inputs(
    paths: Iterable[str | Path],
    *,
    limit: int | None = None,
    sources: Iterable[str] | None = None,
    skip: int = 0,
) -> list[Problem]:
    """The problems of several files or folders, in order; an id found in two inputs is an error, since ids
    name episodes, groups and report rows."""
    wanted = list(sources) if sources is not None else None
    problems: list[Problem] = []
    seen: set[str] = set()
    for path in paths:
        for problem in load_problems(path, limit=limit, sources=wanted, skip=skip):
            if problem.id in seen:
                raise ValueError(f"problem id {problem.id!r} occurs in more than one data input ({path})")
            seen.add(problem.id)
            problems.append(problem)
    return problems
