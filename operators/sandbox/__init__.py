"""The code sandbox: run untrusted Python in an isolated process and judge it on an unforgeable channel.

Public API: ``run_code`` (async) returning ``ExecResult``; ``StdinCase``, ``SandboxLimits``,
``IsolationReport``, ``CaseResult``; ``select_isolation`` and ``SandboxRefusedError``; the global
concurrency cap (``set_concurrency_limit``, ``concurrency_limit``, ``get_concurrency_limiter``).

Design (why each piece exists):

* **Process and isolation.** Every run is a separate process started with an anyio subprocess (the event
  loop never blocks). With bubblewrap it gets its own network, PID, IPC and UTS namespaces, a read-only
  root, a private size-capped ``/tmp`` and a fresh work directory (bind-mounted, deleted afterwards); the
  trees the interpreter needs are mounted read-only at their own paths even when they sit below a
  directory other users cannot enter (a 0700 ``/root``, a ``mktemp -d``) or below ``/tmp``.
  ``ExecResult.isolation`` states what was applied.
* **Fail closed.** Untrusted code runs only where it has no root privileges and cannot write to the host.
  What each mode gives: ``bwrap``: both (read-only root, fresh unprivileged uid when we are root) plus
  network/PID isolation; ``unshare``: network and PID namespaces, but the host filesystem stays writable
  (and as root, when the interpreter lives below a 0700 directory, the code keeps uid 0); ``rlimits-only``:
  resource limits alone. So by default only bubblewrap is used, and where it cannot run (not installed,
  or its probe through the real harness fails) ``run_code`` refuses: status ``refused``, the fix in
  ``reason`` (install bubblewrap: ``apt-get install bubblewrap``). It never falls back silently, because a
  silent fallback is how generated code ended up writing to the host as root. A weaker mode needs an
  explicit opt-in: ``FLOWSTEER_SANDBOX_ALLOW_WEAK=1`` (``auto`` then falls back to ``unshare``, then
  rlimits-only), or naming the mode in ``FLOWSTEER_SANDBOX_ISOLATION=unshare|rlimits-only`` (a forced mode
  is that mode or a refusal, never another one). Using a weak mode is logged at WARNING
  (``sandbox_isolation_weak``, with what is missing) when a process first selects it. Operators raise
  ``SandboxRefusedError`` on a refusal (a node error with the fix, not a failed run quoted to the model) and
  so does the scorer (nothing ran, so a score of 0 would corrupt the evaluation).
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
from operators.sandbox.policy import ALLOW_WEAK_ENV, ISOLATION_ENV, SandboxRefusedError
from operators.sandbox.selection import select_isolation

__all__ = [
    "ALLOW_WEAK_ENV",
    "ISOLATION_ENV",
    "CaseResult",
    "ExecResult",
    "ExecStatus",
    "IsolationMode",
    "IsolationReport",
    "SandboxLimits",
    "SandboxRefusedError",
    "StdinCase",
    "concurrency_limit",
    "get_concurrency_limiter",
    "outputs_match",
    "run_code",
    "select_isolation",
    "set_concurrency_limit",
]
