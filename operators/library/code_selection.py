"""Execution as the judge for code candidates: public-test scores, then behaviour groups.

Why: a small executor is a poor judge of programs, while the sandbox never lies. Following CodeT / MBR-exec,
the candidates that pass the most public tests are kept, then grouped by behaviour: the same canonical
outputs (or exception types) on the public-test inputs plus a few extra inputs the executor may propose
(argument tuples only, no expected outputs). The largest group wins; a tie goes to the group holding the
earliest candidate (the greedy draw). Identical programs are run once.

Safety: proposed inputs are untrusted text. Each is parsed with `ast.literal_eval` here, must survive a
`repr` round trip, and is bounded in count and size; only its `repr` is embedded in the driver program,
which runs in the sandbox like any candidate.
"""

from __future__ import annotations

import ast
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import structlog
from pydantic import BaseModel

from operators.base import PublicTestScore
from operators.library._execution import TestTally, count_passing
from operators.sandbox import SandboxRefusedError, run_code

__all__ = [
    "MAX_INPUT_CHARS",
    "MAX_PROPOSED_INPUTS",
    "PROPOSAL_FORMAT",
    "CodeJudgement",
    "PublicTestFilter",
    "behaviour_driver",
    "best_by_public_tests",
    "capture_behaviour",
    "entry_arity",
    "for_each_distinct",
    "judge_code_candidates",
    "literal_args",
    "literal_source",
    "parse_proposed_inputs",
    "proposal_job",
    "public_test_inputs",
]

log = structlog.get_logger(__name__)

MAX_PROPOSED_INPUTS = 5  # extra inputs kept from the executor's proposal
MAX_INPUT_CHARS = 300  # characters of one proposed argument tuple (its source line and its repr)
MAX_PUBLIC_INPUTS = 20  # argument tuples taken from the public tests
_NO_RESULT = "<no result>"  # the run ended (timeout, crash) before this input was reached

Proposer = Callable[[], Awaitable[list[str]]]


class CodeJudgement(BaseModel):
    """The execution verdict over a list of candidates (indices refer to that list)."""

    index: int
    group_sizes: list[int]  # per candidate: the size of its behaviour group (0 when not among the best)
    note: str
    public_tests: PublicTestScore | None = None  # the chosen candidate's score, when the public tests ran


def entry_arity(program: str, entry_point: str) -> tuple[int, int | None] | None:
    """(required, maximum) positional arguments of the top-level `entry_point`; maximum None for *args."""
    try:
        module = ast.parse(program)
    except SyntaxError:
        return None
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            positional = [*node.args.posonlyargs, *node.args.args]
            required = len(positional) - len(node.args.defaults)
            return required, None if node.args.vararg is not None else len(positional)
    return None


def literal_args(nodes: Sequence[ast.expr]) -> tuple[Any, ...] | None:
    """The values of positional argument nodes when every one is a literal (no names, calls or `*args`)."""
    values: list[Any] = []
    for node in nodes:
        if isinstance(node, ast.Starred):
            return None
        try:
            values.append(ast.literal_eval(node))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return tuple(values)


def literal_source(value: object) -> str | None:
    """The value's repr when it is a literal of at most `MAX_INPUT_CHARS` that evaluates back to the same value
    (no nan/inf, no objects)."""
    source = repr(value)
    if len(source) > MAX_INPUT_CHARS:
        return None
    try:
        return source if ast.literal_eval(source) == value else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def public_test_inputs(tests: str, entry_point: str) -> list[str]:
    """Argument tuples (as literal source) of the calls to the entry point in the public tests.

    Only calls with positional literal arguments count (`f(1, [2])`, or `candidate(...)` in a HumanEval
    `check`); anything computed is skipped rather than evaluated.
    """
    try:
        module = ast.parse(tests)
    except SyntaxError:
        return []
    found: list[str] = []
    for node in ast.walk(module):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in (entry_point, "candidate") or node.keywords:
            continue
        args = literal_args(node.args)
        source = literal_source(args) if args is not None else None
        if source is not None and source not in found:
            found.append(source)
        if len(found) >= MAX_PUBLIC_INPUTS:
            break
    return found


def proposal_job(entry_point: str, count: int = MAX_PROPOSED_INPUTS) -> str:
    """What the executor is asked for: argument tuples only; nothing it writes is executed as code."""
    return (
        f"Several candidate programs for the problem below implement `{entry_point}` and may behave "
        f"differently. Propose up to {count} varied, valid inputs for `{entry_point}` that would tell a "
        "correct implementation from a wrong one (edge cases included). Do not give expected outputs."
    )


PROPOSAL_FORMAT = (
    "Reply with an <inputs> block holding one Python tuple of literal arguments per line, for example:\n"
    "<inputs>\n([1, 2, 3], 2)\n('abc', 0)\n</inputs>"
)


def _as_args(value: Any, arity: tuple[int, int | None] | None) -> tuple[Any, ...] | None:
    if arity is None:
        return value if isinstance(value, tuple) else None
    required, maximum = arity
    if isinstance(value, tuple) and required <= len(value) and (maximum is None or len(value) <= maximum):
        return value
    if required <= 1 and (maximum is None or maximum >= 1):
        return (value,)  # a bare value (or a tuple) as the single argument
    return None


def parse_proposed_inputs(
    reply: str, *, arity: tuple[int, int | None] | None, limit: int = MAX_PROPOSED_INPUTS
) -> list[str]:
    """Argument tuples (as literal source) from the executor's reply; every line that is not one is dropped.

    Strict: a line must be a Python literal (no names, calls or operators), at most `MAX_INPUT_CHARS`
    long, fitting the entry point's arity, and must survive a repr round trip. Duplicates are dropped and
    at most `limit` are kept.
    """
    body = reply
    if "<inputs>" in reply:
        body = reply.split("<inputs>", 1)[1].split("</inputs>", 1)[0]
    kept: list[str] = []
    for raw_line in body.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("```") or len(line) > MAX_INPUT_CHARS:
            continue
        try:
            value = ast.literal_eval(line)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        args = _as_args(value, arity)
        source = literal_source(args) if args is not None else None
        if source is not None and source not in kept:
            kept.append(source)
        if len(kept) >= limit:
            break
    return kept


# The driver's body: loads the candidate as a module (not as __main__, so a `__main__` block does not
# run), then prints one canonical line per input after a per-run marker. Outputs made by the candidate go to
# a sink. Floats are rounded and integral floats print as ints (`2.0 == 2` in a test); dicts and sets are
# sorted; object reprs with addresses collapse to the type name; long lines are hashed. Given expected values
# (`_FS_EXPECTED`, literal sources aligned with the inputs), a call prints `pass` or `fail` instead: whether its
# result `==` the expected value, compared under the same per-call time limit.
_DRIVER_BODY = """
import ast as _fs_ast
import contextlib as _fs_contextlib
import hashlib as _fs_hashlib
import io as _fs_io
import signal as _fs_signal
import sys as _fs_sys

_fs_out = _fs_sys.stdout


class _FsCallTimeout(BaseException):
    pass


def _fs_alarm(signum, frame):
    raise _FsCallTimeout()


def _fs_canon(value, depth=0):
    if depth > 30:
        return "..."
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return repr(value)
        return repr(int(value)) if value.is_integer() else repr(round(value, 9))
    if isinstance(value, (int, str, bytes, complex)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        inner = ",".join(_fs_canon(item, depth + 1) for item in value)
        return ("[%s]" if isinstance(value, list) else "(%s)") % inner
    if isinstance(value, dict):
        items = sorted(_fs_canon(k, depth + 1) + ":" + _fs_canon(v, depth + 1) for k, v in value.items())
        return "{%s}" % ",".join(items)
    if isinstance(value, (set, frozenset)):
        return "set{%s}" % ",".join(sorted(_fs_canon(item, depth + 1) for item in value))
    text = repr(value)
    return "<%s>" % type(value).__name__ if " at 0x" in text else text


def _fs_emit(line):
    if len(line) > 500:
        line = "sha256:" + _fs_hashlib.sha256(line.encode("utf-8", "replace")).hexdigest()
    _fs_out.write(line + "\\n")
    _fs_out.flush()


_fs_sink = _fs_io.StringIO()
_fs_namespace = {"__name__": "flowsteer_candidate"}
try:
    with _fs_contextlib.redirect_stdout(_fs_sink):
        exec(compile(_FS_SOURCE, "solution.py", "exec"), _fs_namespace)
    _fs_function = _fs_namespace[_FS_ENTRY]
    _fs_loaded = "ok"
except BaseException as _fs_exc:
    _fs_loaded = "load-error " + type(_fs_exc).__name__
_fs_emit(_FS_MARKER)
for _fs_index, _fs_args_source in enumerate(_FS_INPUTS):
    if _fs_loaded != "ok":
        _fs_emit(_fs_loaded)
        continue
    _fs_args = _fs_ast.literal_eval(_fs_args_source)
    _fs_signal.signal(_fs_signal.SIGALRM, _fs_alarm)
    _fs_signal.setitimer(_fs_signal.ITIMER_REAL, _FS_CALL_LIMIT_S)
    try:
        with _fs_contextlib.redirect_stdout(_fs_sink):
            _fs_value = _fs_function(*_fs_args)
            if _FS_EXPECTED is not None:
                _fs_value = bool(_fs_value == _fs_ast.literal_eval(_FS_EXPECTED[_fs_index]))
        _fs_signal.setitimer(_fs_signal.ITIMER_REAL, 0)
        if _FS_EXPECTED is None:
            _fs_line = "= " + _fs_canon(_fs_value)
        else:
            _fs_line = "pass" if _fs_value else "fail"
    except _FsCallTimeout:
        _fs_line = "timeout"
    except BaseException as _fs_exc:
        _fs_signal.setitimer(_fs_signal.ITIMER_REAL, 0)
        _fs_line = "raises " + type(_fs_exc).__name__
    _fs_sink.seek(0)
    _fs_sink.truncate()
    _fs_emit(_fs_line)
"""


def behaviour_driver(
    program: str,
    entry_point: str,
    inputs: list[str],
    *,
    marker: str,
    call_limit_s: float,
    expected: list[str] | None = None,
) -> str:
    """A standalone program that calls `entry_point` of `program` on each input, printing after `marker`;
    with `expected` (literal sources aligned with `inputs`) it prints whether each result equals its value."""
    if expected is not None and len(expected) != len(inputs):
        raise ValueError(f"{len(expected)} expected values for {len(inputs)} inputs")
    header = (
        f"_FS_SOURCE = {program!r}\n_FS_ENTRY = {entry_point!r}\n_FS_INPUTS = {inputs!r}\n"
        f"_FS_MARKER = {marker!r}\n_FS_CALL_LIMIT_S = {call_limit_s!r}\n_FS_EXPECTED = {expected!r}\n"
    )
    return header + _DRIVER_BODY


async def capture_behaviour(
    program: str, entry_point: str, inputs: list[str], timeout_s: float, *, expected: list[str] | None = None
) -> tuple[str, ...]:
    """One canonical outcome per input (`<no result>` where the run ended before reaching it); with `expected`,
    `pass` or `fail` where the call returned."""
    if not inputs:
        return ()
    call_limit = max(0.2, timeout_s / (len(inputs) + 2))
    marker = f"<<behaviour {secrets.token_hex(8)}>>"
    source = behaviour_driver(program, entry_point, inputs, marker=marker, call_limit_s=call_limit, expected=expected)
    result = await run_code(source, timeout_s=timeout_s)
    if result.status == "refused":
        raise SandboxRefusedError(result.reason)
    lines = result.stdout.rsplit(marker + "\n", 1)[1].splitlines() if marker + "\n" in result.stdout else []
    lines = lines[: len(inputs)]
    return tuple(lines) + (_NO_RESULT,) * (len(inputs) - len(lines))


async def for_each_distinct(items: Sequence[str], run: Callable[[str], Awaitable[Any]]) -> dict[str, Any]:
    """`run` once per distinct item, concurrently (the sandbox's limiter bounds the processes)."""
    results: dict[str, Any] = {}
    refusals: list[SandboxRefusedError] = []

    async def one(item: str) -> None:
        try:
            results[item] = await run(item)
        except SandboxRefusedError as refused:  # re-raised bare below, not wrapped in an exception group
            refusals.append(refused)

    async with anyio.create_task_group() as group:
        for item in dict.fromkeys(items):
            group.start_soon(one, item)
    if refusals:
        raise refusals[0]
    return results


async def _behaviours(
    programs: list[str], entry_point: str, inputs: list[str], timeout_s: float
) -> list[tuple[str, ...]]:
    async def capture(program: str) -> tuple[str, ...]:
        return await capture_behaviour(program, entry_point, inputs, timeout_s)

    by_program = await for_each_distinct(programs, capture)
    return [by_program[p] for p in programs]


class PublicTestFilter(BaseModel):
    """The candidates passing the most public tests (indices into the candidate list), and that score."""

    pool: list[int]
    passed: int
    total: int


async def best_by_public_tests(
    programs: list[str | None], *, entry_point: str, public_tests: str, timeout_s: float
) -> PublicTestFilter:
    """Run every distinct program (None: not a program, left out) on each public test; keep the best scorers.

    Raises `SandboxRefusedError` when the sandbox runs nothing here. Needs at least one program.
    """
    usable = [i for i, program in enumerate(programs) if program]
    if not usable:
        raise ValueError("no program to run on the public tests")
    code = {i: str(programs[i]) for i in usable}
    tallies: dict[str, TestTally] = await for_each_distinct(
        [code[i] for i in usable],
        lambda program: count_passing(program, tests=public_tests, entry_point=entry_point, timeout_s=timeout_s),
    )
    best = max(tallies[code[i]].passed for i in usable)
    pool = [i for i in usable if tallies[code[i]].passed == best]
    return PublicTestFilter(pool=pool, passed=best, total=tallies[code[usable[0]]].total)


def _groups(pool: list[int], signatures: dict[int, tuple[str, ...]]) -> list[list[int]]:
    grouped: dict[tuple[str, ...], list[int]] = {}
    for index in pool:
        grouped.setdefault(signatures[index], []).append(index)
    return list(grouped.values())


def _largest(groups: list[list[int]]) -> list[int]:
    """The largest group; among equals the one holding the earliest candidate."""
    return min(groups, key=lambda group: (-len(group), min(group)))


async def judge_code_candidates(
    programs: list[str | None],
    *,
    entry_point: str,
    public_tests: str | None,
    timeout_s: float,
    propose: Proposer | None = None,
) -> CodeJudgement | None:
    """Pick a candidate by execution; None when execution gives no evidence (the caller falls back).

    `programs` is aligned with the candidates (None: not a program). Raises `SandboxRefusedError` when
    the sandbox runs nothing here.
    """
    usable = [i for i, program in enumerate(programs) if program]
    if not usable:
        return None
    code = {i: str(programs[i]) for i in usable}
    tests = public_tests if public_tests and public_tests.strip() else None
    pool, score_note, score = usable, "", None
    if tests is not None:
        scored = await best_by_public_tests(programs, entry_point=entry_point, public_tests=tests, timeout_s=timeout_s)
        pool, score = scored.pool, PublicTestScore(passed=scored.passed, total=scored.total)
        score_note = f"{len(pool)}/{len(programs)} candidates pass {scored.passed}/{scored.total} public tests"
    if len(pool) == 1:
        note = f"execution: {score_note}" if score_note else "execution: one runnable candidate"
        sizes = [1 if i == pool[0] else 0 for i in range(len(programs))]
        judged = CodeJudgement(index=pool[0], group_sizes=sizes, note=note, public_tests=score)
        return judged if score_note else None
    inputs = public_test_inputs(tests, entry_point) if tests is not None else []
    signatures: dict[int, tuple[str, ...]] = {i: () for i in pool}
    if inputs and len({code[i] for i in pool}) > 1:
        captured = await _behaviours([code[i] for i in pool], entry_point, inputs, timeout_s)
        signatures = dict(zip(pool, captured, strict=True))
    # Agreement on a few public inputs is weak evidence, so only identical programs skip the proposal.
    agree = len({code[i] for i in pool}) == 1
    extra: list[str] = []
    if not agree and propose is not None:
        extra = [source for source in await propose() if source not in inputs]
        if extra:
            captured = await _behaviours([code[i] for i in pool], entry_point, extra, timeout_s)
            signatures = {i: signatures[i] + behaviour for i, behaviour in zip(pool, captured, strict=True)}
    if tests is None and not extra and not agree:
        return None  # neither tests nor inputs: execution cannot tell the candidates apart
    groups = _groups(pool, signatures)
    chosen_group = _largest(groups)
    sizes = [0] * len(programs)
    for group in groups:
        for index in group:
            sizes[index] = len(group)
    ran_on = f"on {len(inputs) + len(extra)} inputs, {len(extra)} proposed"
    grouping = f"largest behaviour group {len(chosen_group)} of {len(pool)} ({ran_on})"
    note = "execution: " + "; ".join(part for part in (score_note, grouping) if part)
    log.info("code_candidates_judged", note=note, groups=[len(g) for g in groups])
    return CodeJudgement(index=min(chosen_group), group_sizes=sizes, note=note, public_tests=score)
