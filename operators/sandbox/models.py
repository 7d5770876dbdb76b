"""Pydantic models at the sandbox boundary: what callers pass in and what they get back."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ExecStatus = Literal["ok", "failed", "error", "timeout", "killed", "output_limit", "sandbox_error", "refused"]
"""How an execution ended.

- ``ok``: the program ran to completion (and its tests or stdin cases, if any, passed).
- ``failed``: tests or stdin cases were given and did not pass (assertion, wrong output, nonzero exit).
- ``error``: the code did not compile, or raised before its tests could run (or exited nonzero in a
  plain run).
- ``timeout``: the wall-clock limit expired; the whole sandbox was killed.
- ``killed``: a resource limit (CPU time, memory) or a signal ended the process.
- ``output_limit``: stdout or stderr went past ``max_output_bytes``; the sandbox was killed.
- ``sandbox_error``: the sandbox itself could not run the code (a fault on our side, not the code's).
- ``refused``: nothing ran: no isolation here keeps the host safe and no weaker mode was opted into;
  ``reason`` names the fix (see ``operators.sandbox``). Callers must not grade this as a wrong answer.
"""

RunnableMode = Literal["bwrap", "unshare", "rlimits-only"]
"""The isolation modes that can wrap a run, strongest first."""

IsolationMode = Literal[RunnableMode, "none"]
"""What a result reports: a runnable mode, or ``none`` when the sandbox refused and nothing ran."""

MiB = 1024 * 1024


class SandboxLimits(BaseModel):
    """Resource limits for one execution (applied inside the child before any submitted code runs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    cpu_time_s: float | None = Field(
        default=None, gt=0, le=3600, description="RLIMIT_CPU; None means the wall timeout rounded up plus 1 s."
    )
    memory_bytes: int = Field(default=1024 * MiB, ge=64 * MiB, description="RLIMIT_AS (address space).")
    max_processes: int = Field(
        default=32, ge=4, le=4096, description="RLIMIT_NPROC (processes and threads of the sandbox user)."
    )
    max_file_bytes: int = Field(default=16 * MiB, ge=0, description="RLIMIT_FSIZE: largest file it may write.")
    max_open_files: int = Field(default=256, ge=16, le=65536, description="RLIMIT_NOFILE.")
    max_output_bytes: int = Field(
        default=1 * MiB, ge=1024, description="Kept per stream; going past it kills the run (output_limit)."
    )
    tmpfs_bytes: int = Field(default=64 * MiB, ge=MiB, description="Size of the private /tmp (bwrap mode).")

    def effective_cpu_s(self) -> int:
        """CPU-time limit in whole seconds: explicit, or derived from the wall timeout."""
        if self.cpu_time_s is not None:
            return max(1, math.ceil(self.cpu_time_s))
        return math.ceil(self.wall_timeout_s) + 1


class StdinCase(BaseModel):
    """One stdin/stdout test case (APPS style): feed ``input``, compare stdout to ``expected_output``."""

    model_config = ConfigDict(frozen=True)

    input: str
    expected_output: str


class IsolationReport(BaseModel):
    """What isolation was actually applied to a run, stated honestly."""

    model_config = ConfigDict(frozen=True)

    mode: IsolationMode
    network_isolated: bool
    pid_namespace: bool
    readonly_root: bool
    private_tmp: bool
    uid_dropped: bool = Field(description="Code ran as a fresh unprivileged uid (so RLIMIT_NPROC binds).")
    rlimits: bool
    note: str = ""

    @property
    def degraded(self) -> bool:
        """True when any of the protections we aim for was missing."""
        return not (
            self.network_isolated
            and self.pid_namespace
            and self.readonly_root
            and self.private_tmp
            and self.rlimits
            and (self.uid_dropped or self.mode == "bwrap")
        )


class CaseResult(BaseModel):
    """Outcome of one stdin/stdout case."""

    index: int
    passed: bool
    status: ExecStatus
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    exit_code: int | None
    duration_s: float
    reason: str = ""


class ExecResult(BaseModel):
    """Outcome of one ``run_code`` call.

    ``passed`` is None for a plain run (no tests, no stdin cases). For test runs it is True only when the
    harness's secret pass record arrived on the private verdict channel (never derived from output).
    """

    status: ExecStatus
    passed: bool | None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    exit_code: int | None = None
    duration_s: float = 0.0
    isolation: IsolationReport
    reason: str = ""
    cases: list[CaseResult] | None = None
