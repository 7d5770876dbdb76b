"""Running one sandboxed process: workdir, descriptors, output caps, wall timeout, kill and cleanup.

Everything here is non-blocking for the event loop: the process is an anyio subprocess, its streams are
drained by tasks, and waiting happens under ``anyio.move_on_after``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from operators.sandbox.harness import SOLUTION_FILENAME
from operators.sandbox.isolation import HARNESS_PATH, IsolationPlan, fresh_uid, interpreter
from operators.sandbox.models import SandboxLimits
from operators.sandbox.verdict import Verdict, read_verdict

log = structlog.get_logger(__name__)

_DRAIN_GRACE_S = 1.0
_REAP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class RawRun:
    """What one process did, before interpretation."""

    exit_code: int | None
    signal_number: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    output_overflow: bool
    duration_s: float
    verdict: Verdict


def _scrubbed_env(workdir: str) -> dict[str, str]:
    """The child's whole environment: nothing inherited from the host."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def _memfd_with(name: str, content: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _limits_payload(limits: SandboxLimits) -> dict[str, int]:
    return {
        "cpu_s": limits.effective_cpu_s(),
        "memory_bytes": limits.memory_bytes,
        "max_processes": limits.max_processes,
        "max_file_bytes": limits.max_file_bytes,
        "max_open_files": limits.max_open_files,
    }


def _exit_status(returncode: int | None, plan: IsolationPlan) -> tuple[int | None, int | None]:
    """(exit code, signal): wrappers report a signalled child as 128 + signal number."""
    if returncode is None:
        return None, None
    if returncode < 0:
        return None, -returncode
    if plan.report.mode != "rlimits-only" and 128 < returncode < 128 + 65:
        return None, returncode - 128
    return returncode, None


def _kill_group(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _reap_uid(uid: int) -> None:
    """Kill whatever still runs as the run's private uid (escapees that left the process group)."""
    kill = shutil.which("kill") or "/bin/kill"
    with anyio.move_on_after(_REAP_TIMEOUT_S):
        await anyio.run_process([kill, "-KILL", "-1"], check=False, user=uid, group=uid, extra_groups=[])


async def _drain(stream: ByteReceiveStream | None, cap: int, sink: bytearray, on_overflow: Any) -> bool:
    """Read a stream into ``sink`` up to ``cap`` bytes; True (and ``on_overflow()``) when it went past."""
    if stream is None:
        return False
    try:
        async for chunk in stream:
            room = cap - len(sink)
            if len(chunk) > room:
                sink.extend(chunk[:room])
                on_overflow()
                return True
            sink.extend(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
        pass
    return False


async def _feed(stream: ByteSendStream | None, data: bytes) -> None:
    if stream is None:
        return
    try:
        if data:
            await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
        pass
    finally:
        with contextlib.suppress(anyio.BrokenResourceError, OSError):
            await stream.aclose()


async def run_sandboxed(
    *,
    plan: IsolationPlan,
    mode: str,
    code: str,
    tests: str | None,
    entry_point: str | None,
    stdin: bytes | None,
    limits: SandboxLimits,
    nonce: str,
) -> RawRun:
    """Start the harness inside ``plan``'s isolation and collect everything it did."""
    uid = fresh_uid() if plan.drop_uid else None
    workdir = await anyio.to_thread.run_sync(_prepare_workdir, code, uid)
    control_fd = verdict_fd = -1
    started = time.monotonic()
    try:
        payload = {
            "mode": mode,
            "code": code,
            "tests": tests,
            "entry_point": entry_point,
            "nonce": nonce,
            "limits": _limits_payload(limits),
            "uid": uid,
        }
        control_fd = _memfd_with("sandbox-control", json.dumps(payload).encode())
        verdict_fd = _memfd_with("sandbox-verdict", b"")
        argv = [interpreter(), "-I", "-B", str(HARNESS_PATH), str(control_fd), str(verdict_fd)]
        command = plan.command(workdir, limits, argv)
        process = await anyio.open_process(
            command,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            cwd=workdir,
            env=_scrubbed_env(workdir),
            start_new_session=True,
            pass_fds=(control_fd, verdict_fd),
        )
        os.close(control_fd)
        control_fd = -1
        raw = await _supervise(process, stdin, limits, started)
        exit_code, signal_number = _exit_status(process.returncode, plan)
        return RawRun(
            exit_code=exit_code,
            signal_number=signal_number,
            verdict=read_verdict(verdict_fd, nonce),
            **raw,
        )
    finally:
        for fd in (control_fd, verdict_fd):
            if fd >= 0:
                os.close(fd)
        with anyio.CancelScope(shield=True):  # cleanup must happen even when the caller cancels us
            if uid is not None and plan.report.mode != "bwrap":
                await _reap_uid(uid)
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(workdir, ignore_errors=True))


def _prepare_workdir(code: str, uid: int | None) -> str:
    """A fresh private directory holding ``solution.py``, owned by the run's uid when there is one."""
    workdir = tempfile.mkdtemp(prefix="flowsteer-sbx-")
    solution_path = os.path.join(workdir, SOLUTION_FILENAME)
    with open(solution_path, "w", encoding="utf-8") as handle:
        handle.write(code)
    if uid is not None:
        os.chown(workdir, uid, uid)
        os.chown(solution_path, uid, uid)
    return workdir


async def _supervise(process: Process, stdin: bytes | None, limits: SandboxLimits, started: float) -> dict[str, Any]:
    stdout, stderr = bytearray(), bytearray()
    overflow = {"stdout": False, "stderr": False}
    timed_out = False
    drained = anyio.Event()

    def on_overflow() -> None:
        _kill_group(process)

    async def drain_both() -> None:
        async with anyio.create_task_group() as inner:

            async def one(name: str, stream: ByteReceiveStream | None, sink: bytearray) -> None:
                overflow[name] = await _drain(stream, limits.max_output_bytes, sink, on_overflow)

            inner.start_soon(one, "stdout", process.stdout, stdout)
            inner.start_soon(one, "stderr", process.stderr, stderr)
        drained.set()

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(drain_both)
            group.start_soon(_feed, process.stdin, stdin or b"")
            with anyio.move_on_after(limits.wall_timeout_s) as scope:
                await process.wait()
            if scope.cancelled_caught:
                timed_out = True
                _kill_group(process)
                await process.wait()
            with anyio.move_on_after(_DRAIN_GRACE_S):
                await drained.wait()
            group.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            _kill_group(process)
            with anyio.CancelScope(shield=True):
                await process.wait()
        with anyio.CancelScope(shield=True):
            await process.aclose()
    return {
        "stdout": bytes(stdout),
        "stderr": bytes(stderr),
        "stdout_truncated": overflow["stdout"],
        "stderr_truncated": overflow["stderr"],
        "timed_out": timed_out,
        "output_overflow": overflow["stdout"] or overflow["stderr"],
        "duration_s": time.monotonic() - started,
    }
