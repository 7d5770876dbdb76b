"""Choosing the isolation for this process, failing closed.

Each candidate mode is probed once by running a tiny program through the real harness (so the probe
covers what a run needs: the wrapper, the interpreter reachable after the uid switch, site start-up), and
the result is cached per (requested mode, opt-in). ``auto`` takes bubblewrap when it works; otherwise it
refuses (``SandboxRefusedError``) unless ``FLOWSTEER_SANDBOX_ALLOW_WEAK=1``, with which it falls back to
``unshare`` then rlimits-only. A forced mode (``FLOWSTEER_SANDBOX_ISOLATION``) is that mode or a refusal,
never something else; forcing a weak mode is itself the opt-in. Every selection of a weak mode is logged
at WARNING, once per process (per request).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from dataclasses import dataclass

import anyio
import structlog

from operators.sandbox.isolation import IsolationPlan, build_plan, is_root, needed_paths
from operators.sandbox.models import RunnableMode, SandboxLimits
from operators.sandbox.policy import (
    ALLOW_WEAK_ENV,
    ISOLATION_ENV,
    SandboxRefusedError,
    keeps_host_safe,
    missing_protections,
    refusal_message,
    weak_isolation_allowed,
)
from operators.sandbox.runner import run_sandboxed
from operators.sandbox.verdict import new_nonce

log = structlog.get_logger(__name__)

_MODES: tuple[RunnableMode, ...] = ("bwrap", "unshare", "rlimits-only")
_PROBE_CODE = "import os\nprint(os.geteuid())\n"
_PROBE_TIMEOUT_S = 30.0
_PROBE_LIMITS = SandboxLimits(wall_timeout_s=20.0)


@dataclass(frozen=True)
class _Request:
    """What the environment asks for: a mode (or ``auto``) and whether weak modes are opted into."""

    mode: str
    allow_weak: bool

    @property
    def candidates(self) -> tuple[RunnableMode, ...]:
        if self.mode == "auto":
            return _MODES if self.allow_weak else ("bwrap",)
        return tuple(mode for mode in _MODES if mode == self.mode)

    def opted_in_by(self) -> str:
        return f"{ISOLATION_ENV}={self.mode}" if self.mode != "auto" else f"{ALLOW_WEAK_ENV}=1"


def _read_request() -> _Request:
    mode = os.environ.get(ISOLATION_ENV, "auto").strip() or "auto"
    if mode != "auto" and mode not in _MODES:
        raise ValueError(f"{ISOLATION_ENV} must be auto, bwrap, unshare or rlimits-only, not {mode!r}")
    return _Request(mode=mode, allow_weak=weak_isolation_allowed())


def _tail(data: bytes, limit: int = 300) -> str:
    return data.decode("utf-8", errors="replace").strip()[-limit:]


async def _probe(plan: IsolationPlan) -> str | None:
    """Run the probe program through ``plan``; None when it ran as intended, else what went wrong."""
    try:
        with anyio.fail_after(_PROBE_TIMEOUT_S):
            raw = await run_sandboxed(
                plan=plan,
                mode="program",
                code=_PROBE_CODE,
                tests=None,
                entry_point=None,
                stdin=None,
                limits=_PROBE_LIMITS,
                nonce=new_nonce(),
            )
    except (OSError, TimeoutError) as exc:
        return f"it could not be started: {exc}"
    reported = raw.stdout.decode("utf-8", errors="replace").strip()
    if raw.exit_code != 0 or not reported.isdigit():
        detail = _tail(raw.stderr) or raw.verdict.reason or f"exit code {raw.exit_code}"
        return f"the interpreter did not start through it: {detail}"
    if plan.drop_uid and int(reported) == 0:
        return "the code still ran as root"
    return None


def _unavailable(mode: RunnableMode) -> str:
    return f"not installed (no `{mode}` on PATH)"


async def _choose(request: _Request) -> IsolationPlan:
    """The first candidate that runs; raises SandboxRefusedError (with every candidate's problem) otherwise."""
    paths = await needed_paths()
    problems: list[str] = []
    for mode in request.candidates:
        plan = build_plan(mode, paths)
        problem = _unavailable(mode) if plan is None else await _probe(plan)
        if plan is not None and problem is None:
            return plan
        log.info("sandbox_probe_failed", mode=mode, problem=problem)
        problems.append(f"{mode}: {problem}")
    forced = request.mode if request.mode != "auto" else None
    raise SandboxRefusedError(refusal_message("; ".join(problems), forced=forced))


_cache: dict[_Request, IsolationPlan | str] = {}
"""Per request: the chosen plan, or the refusal message."""
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Lock] = weakref.WeakKeyDictionary()


def _selection_lock() -> anyio.Lock:
    """One lock per event loop, so the many runs a batch starts at once wait for a single probe."""
    loop = asyncio.get_running_loop()
    lock = _locks.get(loop)
    if lock is None:
        lock = _locks[loop] = anyio.Lock()
    return lock


async def select_isolation() -> IsolationPlan:
    """The isolation plan for this process (probed once per request, then cached).

    Raises ``SandboxRefusedError`` when nothing safe runs here and no weaker mode was opted into, and
    ``ValueError`` when ``FLOWSTEER_SANDBOX_ISOLATION`` or ``FLOWSTEER_SANDBOX_ALLOW_WEAK`` is malformed.
    """
    request = _read_request()
    cached = _cache.get(request)
    if cached is None:
        async with _selection_lock():
            cached = _cache.get(request)
            if cached is None:
                cached = _cache[request] = await _decide(request)
    if isinstance(cached, str):
        raise SandboxRefusedError(cached)
    return cached


async def _decide(request: _Request) -> IsolationPlan | str:
    try:
        plan = await _choose(request)
    except SandboxRefusedError as exc:
        log.error("sandbox_refused", reason=str(exc))
        return str(exc)
    _announce(plan, request)
    return plan


def _announce(plan: IsolationPlan, request: _Request) -> None:
    root = is_root()
    report = plan.report
    if keeps_host_safe(report, as_root=root):
        log.info("sandbox_isolation", mode=report.mode, uid_dropped=report.uid_dropped)
        return
    log.warning(
        "sandbox_isolation_weak",
        mode=report.mode,
        opted_in_by=request.opted_in_by(),
        missing=missing_protections(report, as_root=root),
        note=report.note,
    )
