"""The fail-closed rule: which isolation may run untrusted code without the user opting into less.

Untrusted code may run only where it has no root privileges and cannot write to the host's files. Of the
modes we have, only bubblewrap gives both (a read-only root, and a fresh unprivileged uid when we are root);
``unshare`` and rlimits-only leave the host writable (world-writable directories at least, everything when
the code stays root). Those weaker modes run only after an explicit opt-in, and otherwise ``run_code``
refuses with the fix spelled out (see ``operators.sandbox`` for the whole design note).
"""

from __future__ import annotations

import os

from operators.errors import OperatorsError
from operators.sandbox.models import IsolationReport

ISOLATION_ENV = "FLOWSTEER_SANDBOX_ISOLATION"
"""``bwrap``, ``unshare`` or ``rlimits-only`` forces that mode (naming a weak one is an opt-in into it);
``auto`` or unset: bubblewrap, else refuse (unless ``ALLOW_WEAK_ENV`` is set)."""

ALLOW_WEAK_ENV = "FLOWSTEER_SANDBOX_ALLOW_WEAK"
"""``1`` lets ``auto`` fall back to ``unshare`` then rlimits-only when bubblewrap cannot run here."""

INSTALL_HINT = "install bubblewrap (`apt-get install bubblewrap`)"
OPT_IN_HINT = (
    f"or, knowing that the code may then write to the host (and run as root when we are root), accept weaker "
    f"isolation explicitly with {ALLOW_WEAK_ENV}=1 or {ISOLATION_ENV}=unshare|rlimits-only"
)

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class SandboxRefusedError(OperatorsError, RuntimeError):
    """No isolation here may run untrusted code, and no weaker mode was opted into; the message says how to fix it.

    ``run_code`` turns it into an ``ExecResult`` with status ``refused``; callers that must not mistake a
    refusal for a wrong answer (operators, the scorer) raise it again.
    """


def weak_isolation_allowed() -> bool:
    """Whether ``ALLOW_WEAK_ENV`` opts into a weaker mode. Raises ValueError for a value that is not a yes/no."""
    raw = os.environ.get(ALLOW_WEAK_ENV, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{ALLOW_WEAK_ENV} must be 1 or 0, not {raw!r}")


def keeps_host_safe(report: IsolationReport, *, as_root: bool) -> bool:
    """True when the code runs without root privileges and cannot write to the host's files."""
    return report.readonly_root and (report.uid_dropped or not as_root)


def missing_protections(report: IsolationReport, *, as_root: bool) -> list[str]:
    """What a weak mode leaves open, in words, for the warning logged when it is used."""
    missing = []
    if not report.readonly_root:
        missing.append("host filesystem writable")
    if as_root and not report.uid_dropped:
        missing.append("code runs as root")
    if not report.network_isolated:
        missing.append("network reachable")
    if not report.pid_namespace:
        missing.append("host processes visible")
    return missing


def refusal_message(problem: str, *, forced: str | None = None) -> str:
    """The refusal text: what failed (``forced``: the mode the environment insists on), then the fix."""
    if forced is not None:
        return (
            f"the sandbox refused to run code: {ISOLATION_ENV}={forced} asks for a mode that cannot run here "
            f"({problem}). Set another mode or unset it (the default uses bubblewrap); for bubblewrap, {INSTALL_HINT}."
        )
    return (
        "the sandbox refused to run code: no isolation here both drops root privileges and keeps the host "
        f"filesystem read-only ({problem}). To fix it, {INSTALL_HINT}, {OPT_IN_HINT}."
    )
