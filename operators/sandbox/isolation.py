"""Choosing and building the isolation wrapper around the sandboxed interpreter.

Preference order: bubblewrap (network, PID, IPC and UTS namespaces, read-only root, private /tmp),
then ``unshare`` (network and PID namespaces), then rlimits only. Each is probed once by really
starting the interpreter through it, so the report says what works here, not what is installed.

When we run as root, the submitted code must not stay root: RLIMIT_NPROC does not bind uid 0 (the kernel
exempts it), and root could signal host processes. So the harness drops to a fresh unprivileged uid per
run. Under bwrap that needs CAP_SETUID/CAP_SETGID kept for the harness (it drops them by switching uid)
and the interpreter reachable by that uid: directories such as a 0700 ``/root`` that hold the interpreter
are replaced by an empty tmpfs into which only the interpreter's own trees are bind-mounted read-only
(which also hides everything else in them).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import structlog

from operators.sandbox.models import IsolationMode, IsolationReport, SandboxLimits

log = structlog.get_logger(__name__)

ISOLATION_ENV = "FLOWSTEER_SANDBOX_ISOLATION"
"""Set to ``bwrap``, ``unshare`` or ``rlimits-only`` to force a mode (``auto`` or unset: best available)."""

HARNESS_PATH = Path(__file__).resolve().with_name("harness.py")
_UID_BASE = 0x20000000
_UID_SPAN = 0x10000000


@dataclass(frozen=True)
class IsolationPlan:
    """How to wrap one run: the report, whether to switch uid, and the exposure mounts (bwrap only)."""

    report: IsolationReport
    drop_uid: bool
    exposed: tuple[tuple[str, ...], ...] = field(default=())

    def command(self, workdir: str, limits: SandboxLimits, argv: list[str]) -> list[str]:
        """The full command line that runs ``argv`` inside this isolation with ``workdir`` as cwd."""
        mode = self.report.mode
        if mode == "bwrap":
            return [*_bwrap_prefix(workdir, limits, self.drop_uid, self.exposed), "--", *argv]
        if mode == "unshare":
            return [*_unshare_prefix(), "--", *argv]
        return argv


def interpreter() -> str:
    """The Python that runs submitted code: the one running us, so installed packages are importable."""
    return sys.executable


def fresh_uid() -> int:
    """A uid no real account uses, unique per run, so RLIMIT_NPROC counts only this run's processes."""
    return _UID_BASE + secrets.randbelow(_UID_SPAN)


def _is_root() -> bool:
    return os.geteuid() == 0


def _needed_paths() -> list[str]:
    """Trees the interpreter needs: prefixes, the executable (symlink and target), sys.path, the harness."""
    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
        str(HARNESS_PATH.parent),
    }
    candidates.update(p for p in sys.path if p and os.path.isdir(p))
    paths = sorted({os.path.realpath(p) for p in candidates} | {os.path.abspath(p) for p in candidates})
    return [p for p in paths if os.path.exists(p)]


def _blocked_ancestor(path: str) -> str | None:
    """The highest ancestor of ``path`` that others cannot traverse (no o+x), if any."""
    current = Path("/")
    for part in Path(path).parts[1:]:
        current = current / part
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH and current != Path(path):
            return str(current)
    return None


def _exposure_mounts(paths: list[str]) -> tuple[tuple[str, ...], ...]:
    """bwrap arguments that make the needed trees reachable below non-traversable directories."""
    blocked: dict[str, list[str]] = {}
    for path in paths:
        anchor = _blocked_ancestor(path)
        if anchor is not None:
            blocked.setdefault(anchor, []).append(path)
    mounts: list[tuple[str, ...]] = []
    for anchor, inner in sorted(blocked.items()):
        mounts.append(("--perms", "0755", "--tmpfs", anchor))
        kept = [p for p in sorted(set(inner)) if not any(p != q and p.startswith(q + "/") for q in inner)]
        for path in kept:
            rel = Path(path).relative_to(anchor)
            current = Path(anchor)
            for part in rel.parts[:-1]:
                current = current / part
                mounts.append(("--perms", "0755", "--dir", str(current)))
            mounts.append(("--ro-bind", path, path))
    return tuple(mounts)


def _paths_world_usable(paths: list[str]) -> bool:
    return all(_blocked_ancestor(p) is None for p in paths)


def _bwrap_prefix(
    workdir: str, limits: SandboxLimits, drop_uid: bool, exposed: tuple[tuple[str, ...], ...]
) -> list[str]:
    bwrap = shutil.which("bwrap") or "bwrap"
    args = [
        bwrap,
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/",
        "/",
    ]
    for mount in exposed:
        args.extend(mount)
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(limits.tmpfs_bytes), "--tmpfs", "/tmp"]
    args += ["--bind", workdir, workdir, "--chdir", workdir]
    if drop_uid:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return args


def _unshare_prefix() -> list[str]:
    unshare = shutil.which("unshare") or "unshare"
    args = [unshare, "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    if not _is_root():
        args += ["--user", "--map-root-user"]
    return args


def _report_for(mode: IsolationMode, uid_dropped: bool, note: str = "") -> IsolationReport:
    namespaced = mode != "rlimits-only"
    return IsolationReport(
        mode=mode,
        network_isolated=namespaced,
        pid_namespace=namespaced,
        readonly_root=mode == "bwrap",
        private_tmp=mode == "bwrap",
        uid_dropped=uid_dropped,
        rlimits=True,
        note=note,
    )


async def _probe(plan: IsolationPlan) -> bool:
    """Really start the interpreter through the wrapper; True when it runs."""
    workdir = tempfile.mkdtemp(prefix="flowsteer-probe-")
    try:
        argv = plan.command(workdir, SandboxLimits(), [interpreter(), "-I", "-S", "-c", "pass"])
        with anyio.move_on_after(20):
            result = await anyio.run_process(argv, check=False, cwd=workdir, env={"PATH": "/usr/bin:/bin"})
            if result.returncode != 0:
                log.info("sandbox_probe_failed", mode=plan.report.mode, stderr=result.stderr[-300:])
            return result.returncode == 0
        return False
    except OSError as exc:
        log.info("sandbox_probe_failed", mode=plan.report.mode, error=str(exc))
        return False
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _plan(mode: IsolationMode) -> IsolationPlan | None:
    root = _is_root()
    paths = _needed_paths()
    if mode == "bwrap":
        if shutil.which("bwrap") is None:
            return None
        return IsolationPlan(_report_for("bwrap", root), drop_uid=root, exposed=_exposure_mounts(paths) if root else ())
    drop = root and _paths_world_usable(paths)
    note = "" if drop or not root else "interpreter not reachable by an unprivileged uid: code runs as root"
    if mode == "unshare":
        if shutil.which("unshare") is None:
            return None
        return IsolationPlan(_report_for("unshare", drop, note), drop_uid=drop)
    return IsolationPlan(_report_for("rlimits-only", drop, note), drop_uid=drop)


_cache: dict[str, IsolationPlan] = {}


async def select_isolation() -> IsolationPlan:
    """The isolation plan for this process (probed once per requested mode, then cached)."""
    requested = os.environ.get(ISOLATION_ENV, "auto").strip() or "auto"
    cached = _cache.get(requested)
    if cached is not None:
        return cached
    order: list[IsolationMode]
    if requested == "auto":
        order = ["bwrap", "unshare", "rlimits-only"]
    elif requested in ("bwrap", "unshare", "rlimits-only"):
        order = [requested]  # type: ignore[list-item]
    else:
        raise ValueError(f"{ISOLATION_ENV} must be auto, bwrap, unshare or rlimits-only, not {requested!r}")
    chosen: IsolationPlan | None = None
    for mode in order:
        plan = _plan(mode)
        if plan is not None and (mode == "rlimits-only" or await _probe(plan)):
            chosen = plan
            break
    if chosen is None:
        plan = _plan("rlimits-only")
        assert plan is not None
        chosen = IsolationPlan(
            plan.report.model_copy(update={"note": f"{requested} unavailable; ran with rlimits only"}),
            drop_uid=plan.drop_uid,
        )
    if chosen.report.degraded:
        log.warning("sandbox_isolation_degraded", mode=chosen.report.mode, note=chosen.report.note)
    _cache[requested] = chosen
    return chosen
