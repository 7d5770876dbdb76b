"""CodeT: choosing among code candidates by dual execution agreement with tests the executor writes.

Why: a peer to compare with (docs/design/evaluation.md, "Peers"), not a step we recommend. CodeT (Chen et al.
2022, "CodeT: Code Generation with Generated Tests", arXiv 2207.10397) has the model write test cases with
expected outputs and runs every candidate on every generated test. Candidates that pass exactly the same tests
form a consensus set; a set scores (its candidates) x (the tests they pass), and the best set's earliest
candidate (the greedy draw first) wins. ScEnsemble's selection (`code_selection`) differs: it never trusts
expected outputs the executor writes, and groups candidates by their behaviour on inputs alone. Every workflow
in our harness sees the public tests, so, as ScEnsemble does, CodeT first keeps the candidates that pass the
most of them; without that the peer would know less than our own selection.

Safety: generated tests are untrusted text. A line is kept only when it parses as
`assert <entry_point>(<literal args>) == <literal>` whose arguments and expected value survive
`ast.literal_eval` and a repr round trip, bounded in count and size. Nothing else the executor wrote is run:
each candidate runs once in the sandbox on the tests rebuilt from those literals (`capture_behaviour` with
expected values, printing `pass` or `fail` per test after a random marker, with a per-call time limit). As
with behaviour capture, a candidate that inspects its driver could misreport its own results; that can
mislead the selection, never the grading.
"""

from __future__ import annotations

import ast
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

import structlog
from pydantic import BaseModel, ConfigDict, Field

from operators.base import Operator, OperatorInput, OperatorRuntime, OperatorSpec, PublicTestScore
from operators.library._dialogue import Failure, ask
from operators.library.code_selection import (
    best_by_public_tests,
    capture_behaviour,
    for_each_distinct,
    literal_args,
    literal_source,
)
from operators.library.ensemble import EnsembleOutput, _program, with_agreement
from operators.prompting import compose_prompt, context_sections, no_candidates_error
from operators.specs import BUILTIN_SPECS

__all__ = [
    "MAX_GENERATED_TESTS",
    "MAX_TEST_CHARS",
    "CodeT",
    "CodeTOutput",
    "ConsensusSet",
    "DualAgreement",
    "GeneratedTest",
    "best_consensus",
    "consensus_sets",
    "judge_by_dual_agreement",
    "parse_generated_tests",
    "tests_format",
    "tests_job",
]

log = structlog.get_logger(__name__)

MAX_GENERATED_TESTS = 8  # assertions kept from the executor's reply
MAX_TEST_CHARS = 800  # characters of one assertion line (its arguments and expected value are bounded again)


class GeneratedTest(BaseModel):
    """One generated test, as the literal sources it was rebuilt from: `entry_point(*args) == expected`."""

    model_config = ConfigDict(frozen=True)

    args: str  # a tuple literal, e.g. "(1, [2])"
    expected: str

    def assertion(self, entry_point: str) -> str:
        return f"assert {entry_point}{self.args} == {self.expected}"


TestWriter = Callable[[], Awaitable[list[GeneratedTest] | Failure]]


def _parse_assertion(line: str, entry_point: str) -> GeneratedTest | None:
    try:
        module = ast.parse(line)  # parsing runs nothing; the values are read with literal_eval only
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if len(module.body) != 1 or not isinstance(statement := module.body[0], ast.Assert) or statement.msg:
        return None
    check = statement.test
    if not (isinstance(check, ast.Compare) and len(check.ops) == 1 and isinstance(check.ops[0], ast.Eq)):
        return None
    call = check.left
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == entry_point):
        return None
    args = literal_args(call.args) if not call.keywords else None
    expected = literal_args(check.comparators)
    args_source = literal_source(args) if args is not None else None
    expected_source = literal_source(expected[0]) if expected is not None else None
    if args_source is None or expected_source is None:
        return None
    return GeneratedTest(args=args_source, expected=expected_source)


def parse_generated_tests(reply: str, entry_point: str, *, limit: int = MAX_GENERATED_TESTS) -> list[GeneratedTest]:
    """The tests in the executor's reply (inside `<tests>` when present); every other line is dropped.

    Strict: a line must be exactly `assert <entry_point>(<literal args>) == <literal>` (no names, calls,
    keywords, messages or other comparisons), at most `MAX_TEST_CHARS` long, with values that survive a repr
    round trip. Duplicates are dropped and at most `limit` are kept.
    """
    body = reply
    if "<tests>" in reply:
        body = reply.split("<tests>", 1)[1].split("</tests>", 1)[0]
    kept: list[GeneratedTest] = []
    for raw_line in body.splitlines():
        line = raw_line.strip()
        if not line.startswith("assert") or len(line) > MAX_TEST_CHARS:
            continue  # prose, fences and runaway lines are never parsed
        test = _parse_assertion(line, entry_point)
        if test is not None and test not in kept:
            kept.append(test)
        if len(kept) >= limit:
            break
    return kept


def tests_job(entry_point: str, count: int = MAX_GENERATED_TESTS) -> str:
    return (
        f"Several candidate programs implement `{entry_point}` for the problem below. Write up to {count} test "
        f"cases for `{entry_point}`: each calls it on literal arguments and compares the result with the exact "
        "expected value. Work each expected value out from the problem statement; cover typical cases and edge "
        "cases."
    )


def tests_format(entry_point: str) -> str:
    return (
        "Reply with a <tests> block holding one assertion per line, using literal values only, for example:\n"
        f"<tests>\nassert {entry_point}([1, 2, 3], 2) == 5\nassert {entry_point}('abc', 0) == ''\n</tests>"
    )


class ConsensusSet(BaseModel):
    """Candidates that pass exactly the same generated tests (indices into their lists, ascending)."""

    model_config = ConfigDict(frozen=True)

    candidates: tuple[int, ...]
    tests: tuple[int, ...]

    @property
    def score(self) -> int:
        return len(self.candidates) * len(self.tests)


def consensus_sets(passing: Mapping[int, Collection[int]]) -> list[ConsensusSet]:
    """Group candidates (index -> the generated tests it passes) by the exact set of tests they pass."""
    grouped: dict[tuple[int, ...], list[int]] = {}
    for index in sorted(passing):
        grouped.setdefault(tuple(sorted(passing[index])), []).append(index)
    return [ConsensusSet(candidates=tuple(members), tests=tests) for tests, members in grouped.items()]


def best_consensus(sets: Sequence[ConsensusSet]) -> ConsensusSet:
    """The highest-scoring set; among equal scores the one holding the earliest candidate."""
    return min(sets, key=lambda found: (-found.score, found.candidates[0]))


class DualAgreement(BaseModel):
    """The verdict over a list of candidates (indices refer to that list)."""

    index: int
    group_sizes: list[int]  # per candidate: the size of its consensus set (0 outside the public-test best)
    scores: list[int]  # per candidate: its consensus set's score
    tests: list[str]  # the generated tests that were run, as assertions
    executed: bool  # whether the sandbox decided (public or generated tests); False: the earliest was kept
    note: str
    public_tests: PublicTestScore | None = None  # the chosen candidate's score, when the public tests ran


async def _passing(
    programs: Mapping[int, str], entry_point: str, tests: list[GeneratedTest], timeout_s: float
) -> dict[int, frozenset[int]]:
    """Per candidate, the generated tests it passes; identical programs run once, each in one sandbox run."""
    inputs = [test.args for test in tests]
    expected = [test.expected for test in tests]

    async def run(program: str) -> frozenset[int]:
        outcomes = await capture_behaviour(program, entry_point, inputs, timeout_s, expected=expected)
        return frozenset(i for i, outcome in enumerate(outcomes) if outcome == "pass")

    by_program = await for_each_distinct(list(programs.values()), run)
    return {index: by_program[program] for index, program in programs.items()}


async def judge_by_dual_agreement(
    programs: list[str | None],
    *,
    entry_point: str,
    public_tests: str | None,
    timeout_s: float,
    write_tests: TestWriter,
) -> DualAgreement | Failure:
    """Pick a candidate by public tests, then dual agreement; a `Failure` only when writing tests failed.

    `programs` is aligned with the candidates (None: not a program) and holds at least one program. Raises
    `SandboxRefusedError` when the sandbox runs nothing here.
    """
    count = len(programs)
    pool = [i for i, program in enumerate(programs) if program]
    executed = False
    public_note = "public tests: none"
    score: PublicTestScore | None = None
    if public_tests and public_tests.strip():
        scored = await best_by_public_tests(
            programs, entry_point=entry_point, public_tests=public_tests, timeout_s=timeout_s
        )
        pool, executed = scored.pool, True
        score = PublicTestScore(passed=scored.passed, total=scored.total)
        public_note = f"public tests: {len(pool)}/{count} pass {scored.passed}/{scored.total}"
    code = {i: str(programs[i]) for i in pool}

    def undivided(why: str) -> DualAgreement:
        sizes = [len(pool) if i in code else 0 for i in range(count)]
        note = f"codet: {why}; {public_note}"
        log.info("codet_undivided", note=note)
        return DualAgreement(
            index=pool[0],
            group_sizes=sizes,
            scores=[0] * count,
            tests=[],
            executed=executed,
            note=note,
            public_tests=score,
        )

    if len(set(code.values())) == 1:
        return undivided(f"one program left in {len(pool)} candidate(s), no tests written")
    tests = await write_tests()
    if isinstance(tests, Failure):
        return tests
    if not tests:
        return undivided("no usable generated test, so the earliest of the public-test best is kept")
    sets = consensus_sets(await _passing(code, entry_point, tests, timeout_s))
    best = best_consensus(sets)
    sizes, scores = [0] * count, [0] * count
    for found in sets:
        for index in found.candidates:
            sizes[index], scores[index] = len(found.candidates), found.score
    if best.score == 0:
        why = f"no candidate passes any of the {len(tests)} generated tests, so the earliest is kept"
    else:
        why = (
            f"{len(best.candidates)}/{count} candidates agree on {len(best.tests)}/{len(tests)} generated tests "
            f"(score {best.score})"
        )
    note = f"codet: {why}; {public_note}"
    log.info("codet_judged", note=note, sets=[(len(s.candidates), len(s.tests)) for s in sets])
    return DualAgreement(
        index=best.candidates[0],
        group_sizes=sizes,
        scores=scores,
        tests=[test.assertion(entry_point) for test in tests],
        executed=True,
        note=note,
        public_tests=score,
    )


class CodeTOutput(EnsembleOutput):
    """ScEnsemble's code pick (the chosen candidate as `text`, its program as `code`) plus CodeT's evidence."""

    scores: list[int] = Field(default_factory=list)  # per candidate: its consensus set's score
    tests: list[str] = Field(default_factory=list)  # the generated tests that were run


class CodeT(Operator):
    """CodeT's dual execution agreement over program candidates (a peer; ScEnsemble is our selection)."""

    spec = BUILTIN_SPECS["CodeT"]
    output_model = CodeTOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> CodeTOutput:
        return with_agreement(await self._select(inputs, runtime), inputs.task_type)

    async def _select(self, inputs: OperatorInput, runtime: OperatorRuntime) -> CodeTOutput:
        candidates = inputs.candidates
        present = [i for i, candidate in enumerate(candidates) if candidate.strip()]
        if not present:
            return CodeTOutput(ok=False, error=no_candidates_error("CodeT"))
        if inputs.task_type != "code":
            error = f"CodeT: selects programs by running them; this is a {inputs.task_type} task (use ScEnsemble)"
            return CodeTOutput(ok=False, error=error)
        entry_point = inputs.entry_point
        if not entry_point:
            return CodeTOutput(ok=False, error="CodeT: the task names no entry point to write tests for")
        programs = [_program(candidate, entry_point) for candidate in candidates]
        if len(present) == 1 or not any(programs):
            first = present[0]
            note = None if len(present) == 1 else f"codet could not judge: no candidate defines `{entry_point}`"
            return CodeTOutput(
                text=candidates[first],
                code=programs[first],
                index=first,
                votes=[1 if i == first else 0 for i in range(len(candidates))],
                decided_by="single" if len(present) == 1 else None,
                note=note,
            )
        judged = await judge_by_dual_agreement(
            programs,
            entry_point=entry_point,
            public_tests=inputs.public_tests,
            timeout_s=runtime.sandbox_timeout_s,
            write_tests=lambda: _write_tests(inputs, entry_point, runtime, self.spec),
        )
        if isinstance(judged, Failure):
            return judged.as_output(CodeTOutput)
        return CodeTOutput(
            text=candidates[judged.index],
            code=programs[judged.index],
            index=judged.index,
            votes=judged.group_sizes,
            scores=judged.scores,
            tests=judged.tests,
            decided_by="execution" if judged.executed else None,
            note=judged.note,
            public_tests=judged.public_tests,
        )


async def _write_tests(
    inputs: OperatorInput, entry_point: str, runtime: OperatorRuntime, spec: OperatorSpec
) -> list[GeneratedTest] | Failure:
    """One executor call; a reply with no usable test yields none (never a re-ask), a failed call a Failure."""
    reply_format = tests_format(entry_point)
    prompt = compose_prompt(
        job=tests_job(entry_point),
        sections=context_sections(inputs),  # the problem, the required function and the example tests
        instruction=inputs.instruction,
        reply_format=reply_format,
    )

    async def accept(reply: str) -> list[GeneratedTest]:
        return parse_generated_tests(reply, entry_point)

    written = await ask(runtime, spec, prompt, accept, reply_format=reply_format)
    if isinstance(written, Failure) and not written.from_backend:
        return []
    return written
