"""Building the isolation wrapper (bubblewrap, ``unshare`` or nothing) around the sandboxed interpreter.

Which mode runs, and when to refuse, is decided in ``selection.py``; this module only builds plans.

When we run as root, the submitted code must not stay root: RLIMIT_NPROC does not bind uid 0 (the kernel
exempts it), and root could signal host processes. So the harness drops to a fresh unprivileged uid per
run. Under bwrap that needs CAP_SETUID/CAP_SETGID kept for the harness (it drops them by switching uid)
and everything the interpreter reads at start-up reachable by that uid, at its own path, read-only:

* a tree below a directory other users cannot enter (a 0700 ``/root``, a ``mktemp -d`` directory) is
  reached through an empty tmpfs laid over that directory, into which only the needed trees are
  bind-mounted read-only (which also hides everything else in it, the caller's files included);
* a needed directory that itself cannot be entered gets the same treatment one level down;
* a tree under ``/tmp`` is bind-mounted again, read-only, after the private ``/tmp`` tmpfs, which would
  otherwise hide it. The rest of ``/tmp`` stays the sandbox's own tmpfs.

What the interpreter needs is asked from the interpreter itself (its prefixes and ``sys.path`` under
``-I``, i.e. after ``pyvenv.cfg`` and ``.pth`` processing), plus every hop of its executable's symlink
chain and the harness directory; the parent's own ``sys.path`` is not used, since it holds entries the
sandboxed interpreter never reads (the script directory, ``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import structlog

from operators.sandbox.models import IsolationReport, RunnableMode, SandboxLimits

log = structlog.get_logger(__name__)

HARNESS_PATH = Path(__file__).resolve().with_name("harness.py")
PRIVATE_TMP = "/tmp"
"""Where bwrap mounts the sandbox's own tmpfs; needed trees below it are mounted again on top."""

_UID_BASE = 0x20000000
_UID_SPAN = 0x10000000
_MAX_LINK_HOPS = 40
_PATHS_QUERY = (
    "import json, sys; "
    "print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path]))"
)
_QUERY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class IsolationPlan:
    """How to wrap one run: the report, whether to switch uid, and (bwrap) the trees to expose read-only."""

    report: IsolationReport
    drop_uid: bool
    readonly_paths: tuple[str, ...] = field(default=())

    def command(self, workdir: str, limits: SandboxLimits, argv: list[str]) -> list[str]:
        """The full command line that runs ``argv`` inside this isolation with ``workdir`` as cwd."""
        mode = self.report.mode
        if mode == "bwrap":
            return [*_bwrap_prefix(workdir, limits, self.drop_uid, self.readonly_paths), "--", *argv]
        if mode == "unshare":
            return [*_unshare_prefix(), "--", *argv]
        return argv


def interpreter() -> str:
    """The Python that runs submitted code: the one running us, so installed packages are importable."""
    return sys.executable


def fresh_uid() -> int:
    """A uid no real account uses, unique per run, so RLIMIT_NPROC counts only this run's processes."""
    return _UID_BASE + secrets.randbelow(_UID_SPAN)


def is_root() -> bool:
    """Whether we run as root (then the code must be moved to a fresh unprivileged uid)."""
    return os.geteuid() == 0


def _link_chain(path: str) -> list[str]:
    """``path`` and every file its symlink chain passes through (each hop must be reachable)."""
    hops = [os.path.abspath(path)]
    for _ in range(_MAX_LINK_HOPS):
        current = hops[-1]
        if not os.path.islink(current):
            break
        hops.append(os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current))))
    hops.append(os.path.realpath(path))
    return hops


async def _reported_paths(python: str) -> list[str]:
    """The prefixes and ``sys.path`` that ``python -I`` reports; the parent's prefixes if it cannot say."""
    fallback = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    try:
        with anyio.move_on_after(_QUERY_TIMEOUT_S):
            result = await anyio.run_process(
                [python, "-I", "-c", _PATHS_QUERY], check=False, env={"PATH": "/usr/local/bin:/usr/bin:/bin"}
            )
            if result.returncode == 0:
                reported = json.loads(result.stdout)
                if isinstance(reported, list) and all(isinstance(item, str) for item in reported):
                    return reported
            log.info("sandbox_interpreter_query_failed", stderr=result.stderr[-300:])
    except (OSError, ValueError) as exc:
        log.info("sandbox_interpreter_query_failed", error=str(exc))
    return fallback


def _existing_trees(python: str, reported: list[str]) -> tuple[str, ...]:
    candidates = {*reported, str(HARNESS_PATH.parent)}
    candidates.update(os.path.dirname(hop) for hop in _link_chain(python))
    paths = {os.path.abspath(p) for p in candidates if p} | {os.path.realpath(p) for p in candidates if p}
    return tuple(sorted(p for p in paths if os.path.exists(p) and p != "/"))


async def needed_paths() -> tuple[str, ...]:
    """Every existing tree the sandboxed interpreter and the harness read (see the module docstring)."""
    python = interpreter()
    reported = await _reported_paths(python)
    return await anyio.to_thread.run_sync(_existing_trees, python, reported)


def _traversable(path: str) -> bool:
    """Whether any user may pass through ``path`` (others' execute bit; non-directories always pass)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return True
    return not stat.S_ISDIR(mode) or bool(mode & stat.S_IXOTH)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _blocked_ancestor(path: str, *, include_self: bool) -> str | None:
    """The highest directory on the way to ``path`` (``path`` too when ``include_self``) others cannot enter."""
    parts = Path(path).parts
    current = Path("/")
    for index, part in enumerate(parts[1:], start=1):
        current = current / part
        is_self = index == len(parts) - 1
        if (include_self or not is_self) and not _traversable(str(current)):
            return str(current)
    return None


def _anchor(path: str, *, include_self: bool) -> str | None:
    """The directory whose mount makes ``path`` reachable: the private /tmp, or the highest blocked ancestor."""
    if _under(path, PRIVATE_TMP) and path != PRIVATE_TMP:
        return PRIVATE_TMP
    return _blocked_ancestor(path, include_self=include_self)


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths not inside another one of them (binding those covers the rest)."""
    unique = sorted(set(paths))
    return [p for p in unique if not any(p != q and _under(p, q) for q in unique)]


def _open_tmpfs(path: str) -> list[str]:
    return ["--perms", "0755", "--tmpfs", path]


def _parent_dirs(anchor: str, path: str, made: set[str]) -> list[str]:
    """``--dir`` arguments creating, world-traversable, the directories between ``anchor`` and ``path``."""
    args: list[str] = []
    current = Path(anchor)
    for part in Path(path).relative_to(anchor).parts[:-1]:
        current = current / part
        if str(current) not in made:
            made.add(str(current))
            args += ["--perms", "0755", "--dir", str(current)]
    return args


def _expose_readonly(path: str, *, already_open: bool) -> list[str]:
    """Bind ``path`` read-only; a directory others cannot enter is rebuilt as a tmpfs of read-only entries."""
    if _traversable(path):
        return ["--ro-bind", path, path]
    args = [] if already_open else _open_tmpfs(path)
    try:
        entries = sorted(os.listdir(path))
    except OSError:
        return args
    for name in entries:
        entry = os.path.join(path, name)
        args += ["--ro-bind", entry, entry]
    return args


def exposure_args(readonly: Sequence[str], writable: Sequence[str] = ()) -> list[str]:
    """bwrap arguments that make ``readonly`` (bound read-only here) and the parents of ``writable`` (bound
    by the caller afterwards) reachable by any uid, at their own paths. They go after the /tmp tmpfs."""
    groups: dict[str, list[str]] = {}
    for path in readonly:
        anchor = _anchor(path, include_self=True)
        if anchor is not None:
            groups.setdefault(anchor, []).append(path)
    for path in writable:
        anchor = _anchor(path, include_self=False)
        if anchor is not None:
            groups.setdefault(anchor, []).append(path)
    args: list[str] = []
    for anchor, paths in sorted(groups.items()):
        if anchor != PRIVATE_TMP:
            args += _open_tmpfs(anchor)
        made = {anchor}
        for path in _outermost(paths):
            if path == anchor:
                args += _expose_readonly(path, already_open=True)
                continue
            args += _parent_dirs(anchor, path, made)
            if path not in writable:
                args += _expose_readonly(path, already_open=False)
    return args


def _bwrap_prefix(workdir: str, limits: SandboxLimits, drop_uid: bool, readonly: Sequence[str]) -> list[str]:
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
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    args += ["--perms", "1777", "--size", str(limits.tmpfs_bytes), "--tmpfs", PRIVATE_TMP]
    args += exposure_args(readonly, (workdir,))
    args += ["--bind", workdir, workdir, "--chdir", workdir]
    if drop_uid:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return args


def _unshare_prefix() -> list[str]:
    unshare = shutil.which("unshare") or "unshare"
    args = [unshare, "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    if not is_root():
        args += ["--user", "--map-root-user"]
    return args


def _report_for(mode: RunnableMode, uid_dropped: bool, note: str = "") -> IsolationReport:
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


def refused_report() -> IsolationReport:
    """The report of a run that never started because the sandbox refused (the reason is on the result)."""
    return IsolationReport(
        mode="none",
        network_isolated=False,
        pid_namespace=False,
        readonly_root=False,
        private_tmp=False,
        uid_dropped=False,
        rlimits=False,
        note="refused: nothing ran",
    )


TOOLS: dict[RunnableMode, str | None] = {"bwrap": "bwrap", "unshare": "unshare", "rlimits-only": None}
"""The program each mode needs on PATH."""


def build_plan(mode: RunnableMode, paths: Sequence[str]) -> IsolationPlan | None:
    """The plan for ``mode`` given the interpreter's ``paths``; None when its program is not installed."""
    tool = TOOLS[mode]
    if tool is not None and shutil.which(tool) is None:
        return None
    root = is_root()
    if mode == "bwrap":
        return IsolationPlan(_report_for("bwrap", root), drop_uid=root, readonly_paths=tuple(paths))
    drop = root and all(_blocked_ancestor(p, include_self=True) is None for p in paths)
    note = "" if drop or not root else "interpreter not reachable by an unprivileged uid: code runs as root"
    return IsolationPlan(_report_for(mode, drop, note), drop_uid=drop)
