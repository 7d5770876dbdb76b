"""The code sandbox: run untrusted Python in an isolated process and judge it on an unforgeable channel.

Public API: ``run_code`` (async) returning ``ExecResult``; ``StdinCase``, ``SandboxLimits``,
``IsolationReport``, ``CaseResult``; the global concurrency cap (``set_concurrency_limit``,
``concurrency_limit``, ``get_concurrency_limiter``).

Design (why each piece exists):

* **Process and isolation.** Every run is a separate process started with an anyio subprocess (the event
  loop never blocks). With bubblewrap it gets its own network, PID, IPC and UTS namespaces, a read-only
  root, a private size-capped ``/tmp`` and a fresh work directory (bind-mounted, deleted afterwards);
  otherwise ``unshare`` (network + PID namespaces); otherwise rlimits only. ``ExecResult.isolation``
  states what was applied, with ``degraded`` set when something is missing.
* **Limits.** CPU time, address space, process count, file size and open files are set inside the child
  (soft = hard) before any submitted code runs. As root the code runs under a fresh unprivileged uid per
  run, because the kernel never applies RLIMIT_NPROC to uid 0; with a private uid the fork bomb stops at
  ``max_processes`` and the code cannot signal host processes.
* **Timeout.** The wrapper is started in its own session; on the wall timeout (or an output flood) its
  whole process group is SIGKILLed, and the PID namespace dies with it (``--die-with-parent``).
* **Environment.** The child's environment is built from scratch (PATH, LANG, HOME=workdir...): no host
  variables, no API keys. The interpreter runs with ``-I`` (no user site, no PYTHON* variables); nothing
  is pre-imported into the solution and no import is stripped.
* **Verdict.** ``passed`` never comes from stdout, stderr, files in the work directory or the exit code
  alone. The parent hands the harness a 256-bit nonce through an anonymous memfd, which the harness
  empties and closes before the solution runs. The harness runs the solution, then the hidden tests with
  a snapshot of the builtins, and writes ``{"outcome": "passed", "nonce": ...}`` to a second private memfd
  only when no exception at all (``SystemExit`` and ``KeyboardInterrupt`` included) escaped; then it
  leaves with ``os._exit`` so no code of the solution runs afterwards. Printing "PASSED", exiting early
  with ``sys.exit(0)`` or ``os._exit(0)``, raising ``SystemExit`` inside the tests, patching
  ``builtins``, writing fake records to every descriptor or to verdict-looking files: none of these
  produces the nonce, so none passes. Residual risk, stated plainly: the solution shares its interpreter
  with the asserts (HumanEval checks call it in-process), so code written specifically against this
  harness that introspects the interpreter's memory (frames, ``gc``, trace hooks, ``ctypes``) could
  recover the nonce or skip the asserts. Closing that fully needs the asserts in another process than
  the candidate (an RPC proxy for ``candidate``), which is future work.
* **Concurrency.** All runs share one ``anyio.CapacityLimiter`` (default: the CPU count).
"""

from operators.sandbox.api import run_code
from operators.sandbox.concurrency import concurrency_limit, get_concurrency_limiter, set_concurrency_limit
from operators.sandbox.isolation import ISOLATION_ENV, select_isolation
from operators.sandbox.models import (
    CaseResult,
    ExecResult,
    ExecStatus,
    IsolationMode,
    IsolationReport,
    SandboxLimits,
    StdinCase,
)
from operators.sandbox.output_match import outputs_match

__all__ = [
    "ISOLATION_ENV",
    "CaseResult",
    "ExecResult",
    "ExecStatus",
    "IsolationMode",
    "IsolationReport",
    "SandboxLimits",
    "StdinCase",
    "concurrency_limit",
    "get_concurrency_limiter",
    "outputs_match",
    "run_code",
    "select_isolation",
    "set_concurrency_limit",
]
