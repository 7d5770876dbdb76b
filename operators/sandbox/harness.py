"""In-sandbox launcher. Runs as a standalone script (stdlib only): ``python -I -B harness.py CONTROL VERDICT``.

It is trusted code that runs *before* the submitted code, in the same interpreter. Steps:

1. Read the run description (JSON) from the inherited CONTROL descriptor (an anonymous memfd), then
   truncate that file to zero length and close it, so the per-run secret it held cannot be read back
   through this or any other process's descriptor table.
2. Apply rlimits (CPU, address space, processes, file size, open files, no core dumps; soft = hard, so
   the code cannot raise them) and, when started as root, switch to the fresh unprivileged uid/gid the
   parent chose (which also sheds every capability).
3. ``program`` mode (stdin/stdout cases, plain runs): ``execv`` a fresh interpreter on ``solution.py``.
   The parent judges the output itself; nothing needs a verdict.
4. ``tests`` mode: compile the solution and the hidden tests first, snapshot the builtins, run the
   solution as ``__main__``, then run the tests in a namespace whose ``__builtins__`` is the snapshot
   (patching ``builtins`` in the solution does not reach the asserts) and from which solution-defined
   names that shadow builtins are dropped (except the entry point). HumanEval style: when the tests
   define ``check`` (a module-level ``def check``, read off the tests' syntax tree before the solution
   runs), call ``check(<entry_point>)``. A solution or an MBPP entry point named ``check`` is not that
   convention: its asserts call it themselves.
5. Only if every step completed without any exception (``BaseException``: ``SystemExit`` inside the
   tests, ``KeyboardInterrupt``... all count as failures) does the harness write the pass record, which
   carries the secret nonce, to the VERDICT descriptor, and leave with ``os._exit`` (no atexit hooks,
   finalizers or threads of the solution run after that). Failure records never carry the nonce, so
   reading the verdict file cannot reveal it either.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import resource
import sys
from collections.abc import Callable
from typing import Any, NoReturn

TESTS_FILENAME = "<hidden tests>"
SOLUTION_FILENAME = "solution.py"
_REASON_LIMIT = 1500


def _read_control(fd: int) -> dict[str, Any]:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.ftruncate(fd, 0)
    os.close(fd)
    loaded: dict[str, Any] = json.loads(b"".join(chunks))
    return loaded


def _apply_limits(limits: dict[str, int]) -> None:
    pairs = {
        resource.RLIMIT_CPU: (limits["cpu_s"], limits["cpu_s"] + 1),
        resource.RLIMIT_AS: (limits["memory_bytes"], limits["memory_bytes"]),
        resource.RLIMIT_NPROC: (limits["max_processes"], limits["max_processes"]),
        resource.RLIMIT_FSIZE: (limits["max_file_bytes"], limits["max_file_bytes"]),
        resource.RLIMIT_NOFILE: (limits["max_open_files"], limits["max_open_files"]),
        resource.RLIMIT_CORE: (0, 0),
    }
    for which, (soft, hard) in pairs.items():
        resource.setrlimit(which, (soft, hard))


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not switch to the sandbox uid")


def _make_sealer(nonce: str, fd: int) -> Callable[[], None]:
    """The only code path that emits the nonce: called once, after every test passed."""
    record = (json.dumps({"outcome": "passed", "nonce": nonce}) + "\n").encode()
    write = os.write

    def seal() -> None:
        write(fd, record)

    return seal


def _make_reporter(fd: int) -> Callable[[str, str], None]:
    write, dumps = os.write, json.dumps

    def report(outcome: str, reason: str) -> None:
        # Plain try/except, not contextlib: no module attribute lookups once the solution may have run.
        try:  # noqa: SIM105
            write(fd, (dumps({"outcome": outcome, "reason": reason[:_REASON_LIMIT]}) + "\n").encode())
        except OSError:
            pass

    return report


def _describe(exc: BaseException) -> str:
    """Exception text; the solution may have defined the exception type, so nothing here may raise."""
    try:
        name = type(exc).__name__
    except Exception:
        name = "exception"
    try:
        message = str(exc)
    except Exception:
        message = ""
    return f"{name}: {message}" if message else name


def _failing_test_line(exc: BaseException, tests_src: str) -> str:
    try:
        tb = exc.__traceback__
        line_no = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == TESTS_FILENAME:
                line_no = tb.tb_lineno
            tb = tb.tb_next
        if line_no is None:
            return ""
        source_line = tests_src.splitlines()[line_no - 1].strip()
        return f" (tests line {line_no}: {source_line[:200]})"
    except Exception:
        return ""


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # a replaced stream may raise anything; the verdict must still go out
            pass


def _outcome_for(exc: BaseException) -> str:
    return "killed" if isinstance(exc, MemoryError) else "failed"


def _defines_check(tests: ast.Module) -> bool:
    """Whether the tests follow the HumanEval convention: they define ``check(candidate)`` at module level.

    Decided from the tests' own syntax, not from which ``check`` is bound after they ran: a solution (or an
    MBPP entry point) named ``check`` is called by its asserts, and calling it once more with itself as the
    argument failed correct solutions. Computed before the solution runs, so it cannot influence the answer.
    """
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "check" for node in tests.body
    )


def _run_tests(config: dict[str, Any], verdict_fd: int) -> NoReturn:
    exit_now = os._exit
    seal = _make_sealer(config.pop("nonce"), verdict_fd)
    report = _make_reporter(verdict_fd)
    code_src: str = config["code"]
    tests_src: str = config["tests"] or ""
    entry_point: str | None = config.get("entry_point")
    clean_builtins = dict(builtins.__dict__)

    try:
        solution = compile(code_src, SOLUTION_FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        report("error", f"the solution does not compile: {_describe(exc)}")
        exit_now(1)
    try:
        tests_tree = ast.parse(tests_src, TESTS_FILENAME)
        tests = compile(tests_tree, TESTS_FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        report("error", f"the tests do not compile: {_describe(exc)}")
        exit_now(1)
    check_candidate = entry_point if entry_point is not None and _defines_check(tests_tree) else None

    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(solution, namespace)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _flush_stdio()
            report("error", f"the solution exited with {exc.code!r} before its tests ran")
            exit_now(1)
    except BaseException as exc:
        _flush_stdio()
        outcome = "killed" if isinstance(exc, MemoryError) else "error"
        report(outcome, f"the solution raised {_describe(exc)}")
        exit_now(1)

    test_globals = {
        name: value for name, value in namespace.items() if name == entry_point or name not in clean_builtins
    }
    test_globals["__builtins__"] = clean_builtins
    test_globals["__name__"] = "__main__"
    try:
        if entry_point is not None and not callable(namespace.get(entry_point)):
            report("failed", f"the entry point {entry_point!r} is not defined as a callable")
            exit_now(1)
        exec(tests, test_globals)
        if check_candidate is not None:  # HumanEval: the tests' own check(candidate) runs the asserts
            test_globals["check"](namespace[check_candidate])
    except BaseException as exc:
        _flush_stdio()
        report(_outcome_for(exc), f"{_describe(exc)}{_failing_test_line(exc, tests_src)}")
        exit_now(1)

    _flush_stdio()
    seal()
    exit_now(0)


def main() -> NoReturn:
    control_fd, verdict_fd = int(sys.argv[1]), int(sys.argv[2])
    try:
        config = _read_control(control_fd)
        _apply_limits(config["limits"])
        if config.get("uid") is not None:
            _drop_privileges(int(config["uid"]))
    except Exception as exc:  # our fault, not the solution's: say so on the verdict channel
        _make_reporter(verdict_fd)("sandbox_error", f"sandbox setup failed: {_describe(exc)}")
        os._exit(1)
    if config["mode"] == "program":
        os.close(verdict_fd)
        python = sys.executable
        os.execv(python, [python, "-I", "-B", SOLUTION_FILENAME])
    _run_tests(config, verdict_fd)


if __name__ == "__main__":
    main()
