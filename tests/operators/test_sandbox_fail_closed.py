"""The sandbox fails closed: code never runs as root on a writable host unless the user opted into that.

The first tests reproduce issue #14 item 1: as root, with the interpreter inside a private (0700) temp
directory, bubblewrap's probe used to fail and the code ran under ``unshare`` as uid 0, writing to the host.
The others check the refusal (no safe mode, no opt-in) and the opt-ins, with bubblewrap hidden from PATH.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import site
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from operators.library._execution import execute
from operators.sandbox import (
    ALLOW_WEAK_ENV,
    ISOLATION_ENV,
    IsolationReport,
    SandboxRefusedError,
    run_code,
    selection,
)
from operators.sandbox.isolation import IsolationPlan, exposure_args
from operators.sandbox.models import SandboxLimits
from training.data import Problem
from training.scoring.code_check import score_code

REPO_ROOT = Path(__file__).resolve().parents[2]
_DRIVER_TIMEOUT_S = 180  # a hang guard for the child process, not a timing assertion

HOSTILE = """
import json, os, sys
report = {"uid": os.geteuid(), "wrote": []}
for target in sys.argv[1:] or TARGETS:
    try:
        with open(target, "w") as handle:
            handle.write("escaped")
        report["wrote"].append(target)
    except OSError:
        pass
print(json.dumps(report))
"""

DRIVER = """
import asyncio, json, sys
from operators.sandbox import run_code

TARGETS = json.loads(sys.argv[1])
HOSTILE = sys.argv[2]
CHECK = "def check(candidate):\\n    assert candidate(2, 3) == 5\\n"

async def main():
    plain = await run_code(f"TARGETS = {TARGETS!r}\\n" + HOSTILE)
    tested = await run_code("def add(a, b):\\n    return a + b\\n", tests=CHECK, entry_point="add")
    print(json.dumps({"plain": plain.model_dump(mode="json"), "tested": tested.model_dump(mode="json")}))

asyncio.run(main())
"""


def _require_bwrap_as_root() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed; CI installs it with `make system-deps`")
    if os.geteuid() != 0:
        pytest.skip("the scenario is root's: only root's private directories are out of reach of the sandbox uid")


def _sandbox_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FLOWSTEER_SANDBOX_")}


@pytest.fixture
def private_dir() -> Iterator[Path]:
    """A ``mktemp -d``-style directory (0700, under the system temp dir), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="flowsteer-private-"))
    assert path.stat().st_mode & 0o777 == 0o700
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _venv_inside(directory: Path) -> Path:
    """A venv in ``directory`` whose packages are this checkout and our installed dependencies (fast: no pip)."""
    base_python = getattr(sys, "_base_executable", sys.executable)
    venv = directory / "venv"
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=_DRIVER_TIMEOUT_S)
    site_packages = next(venv.glob("lib/python*/site-packages"))
    entries = [str(REPO_ROOT), *site.getsitepackages()]
    (site_packages / "flowsteer-checkout.pth").write_text("\n".join(entries) + "\n", encoding="utf-8")
    return venv / "bin" / "python"


@pytest.mark.slow
def test_code_from_a_private_dir_runs_as_a_fresh_uid_and_cannot_write_to_the_host(private_dir: Path) -> None:
    _require_bwrap_as_root()
    python = _venv_inside(private_dir)
    driver = private_dir / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    caller_target = private_dir / "escaped.txt"
    root_target = Path(f"/flowsteer-escape-{secrets.token_hex(8)}.txt")
    targets = [str(caller_target), str(root_target)]
    try:
        completed = subprocess.run(
            [str(python), str(driver), json.dumps(targets), HOSTILE],
            cwd=private_dir,
            env=_sandbox_env(),
            capture_output=True,
            text=True,
            timeout=_DRIVER_TIMEOUT_S,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        results = json.loads(completed.stdout.strip().splitlines()[-1])
        plain, tested = results["plain"], results["tested"]
        isolation = IsolationReport.model_validate(plain["isolation"])
        assert plain["status"] == "ok", (plain["reason"], plain["stderr"], completed.stderr[-3000:])
        report = json.loads(plain["stdout"])
        assert report["uid"] != 0
        assert report["wrote"] == []
        assert not caller_target.exists() and not root_target.exists()
        assert isolation.mode == "bwrap" and isolation.uid_dropped and isolation.readonly_root
        assert not isolation.degraded
        assert tested["passed"] is True, tested["reason"]
    finally:
        root_target.unlink(missing_ok=True)


def test_trees_below_tmp_are_mounted_after_the_private_tmp(private_dir: Path) -> None:
    """The private /tmp tmpfs used to be mounted after the exposure mounts, hiding a venv under /tmp again."""
    tree = private_dir / "venv"
    tree.mkdir()
    report = IsolationReport(
        mode="bwrap",
        network_isolated=True,
        pid_namespace=True,
        readonly_root=True,
        private_tmp=True,
        uid_dropped=True,
        rlimits=True,
    )
    plan = IsolationPlan(report, drop_uid=True, readonly_paths=(str(tree),))
    command = plan.command("/tmp/flowsteer-sbx-test", SandboxLimits(), ["python"])
    tmpfs_at = command.index("/tmp", command.index("--tmpfs"))
    binds = [i for i, arg in enumerate(command) if arg == "--ro-bind" and command[i + 1] == str(tree)]
    assert binds and binds[0] > tmpfs_at, command
    assert command[binds[0] + 2] == str(tree)
    parent_dir = command.index(str(private_dir))
    assert command[parent_dir - 1] == "--dir" and command[parent_dir - 3 : parent_dir - 1] == ["--perms", "0755"]
    assert command.index("--bind") > binds[0]  # the work directory comes last


def test_a_needed_directory_others_cannot_enter_is_rebuilt_from_read_only_entries(private_dir: Path) -> None:
    """A venv created straight in a ``mktemp -d`` directory: the directory itself is 0700."""
    (private_dir / "bin").mkdir()
    (private_dir / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    args = exposure_args([str(private_dir)])
    assert args[:4] == ["--perms", "0755", "--tmpfs", str(private_dir)]
    for entry in ("bin", "pyvenv.cfg"):
        path = str(private_dir / entry)
        assert ["--ro-bind", path, path] == args[args.index(path) - 1 : args.index(path) + 2]
    assert "--bind" not in args


@pytest.fixture
def no_isolation_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH without bwrap or unshare (as on a host without bubblewrap), and a fresh selection."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(ISOLATION_ENV, raising=False)
    monkeypatch.delenv(ALLOW_WEAK_ENV, raising=False)
    monkeypatch.setattr(selection, "_cache", {})


@pytest.fixture
def captured_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as logs:
        monkeypatch.setattr(selection, "log", structlog.get_logger("operators.sandbox.selection"))
        yield logs


def _marker_program(marker: Path) -> str:
    return textwrap.dedent(f"""
        import os
        with open({str(marker)!r}, "w") as handle:
            handle.write(str(os.geteuid()))
        print("ran")
    """)


def _assert_refusal_names_the_fix(reason: str) -> None:
    assert "apt-get install bubblewrap" in reason
    assert f"{ALLOW_WEAK_ENV}=1" in reason


@pytest.mark.slow
@pytest.mark.usefixtures("no_isolation_tools")
async def test_without_a_safe_mode_nothing_runs_and_the_fix_is_named(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    result = await run_code(_marker_program(marker))
    assert result.status == "refused"
    assert result.passed is None
    assert result.isolation.mode == "none"
    _assert_refusal_names_the_fix(result.reason)
    assert "bwrap: not installed" in result.reason
    assert not marker.exists()
    tested = await run_code("def f():\n    return 1\n", tests="assert f() == 1\n", entry_point="f")
    assert tested.status == "refused" and tested.passed is None


@pytest.mark.slow
@pytest.mark.usefixtures("no_isolation_tools")
async def test_a_forced_mode_that_cannot_run_is_refused_not_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ISOLATION_ENV, "unshare")
    marker = tmp_path / "ran.txt"
    result = await run_code(_marker_program(marker))
    assert result.status == "refused"
    assert f"{ISOLATION_ENV}=unshare" in result.reason and "unshare: not installed" in result.reason
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.usefixtures("no_isolation_tools")
async def test_the_weak_opt_in_runs_the_code_and_warns(
    monkeypatch: pytest.MonkeyPatch, captured_logs: list[dict[str, Any]]
) -> None:
    monkeypatch.setenv(ALLOW_WEAK_ENV, "1")
    result = await run_code("print('ran')")
    assert result.status == "ok" and result.stdout == "ran\n"
    assert result.isolation.mode == "rlimits-only" and result.isolation.degraded
    warnings = [entry for entry in captured_logs if entry["event"] == "sandbox_isolation_weak"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["mode"] == "rlimits-only"
    assert warnings[0]["opted_in_by"] == f"{ALLOW_WEAK_ENV}=1"
    assert "host filesystem writable" in warnings[0]["missing"]


@pytest.mark.slow
@pytest.mark.usefixtures("no_isolation_tools")
async def test_forcing_a_weak_mode_is_an_opt_in_and_warns(
    monkeypatch: pytest.MonkeyPatch, captured_logs: list[dict[str, Any]]
) -> None:
    monkeypatch.setenv(ISOLATION_ENV, "rlimits-only")
    result = await run_code("print('ran')")
    assert result.status == "ok"
    warnings = [entry for entry in captured_logs if entry["event"] == "sandbox_isolation_weak"]
    assert [w["opted_in_by"] for w in warnings] == [f"{ISOLATION_ENV}=rlimits-only"]


async def test_a_malformed_opt_in_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_WEAK_ENV, "maybe")
    with pytest.raises(ValueError, match=ALLOW_WEAK_ENV):
        await run_code("pass")


@pytest.mark.slow
@pytest.mark.usefixtures("no_isolation_tools")
async def test_operators_fail_the_node_with_the_fix_instead_of_reporting_a_failed_run() -> None:
    with pytest.raises(SandboxRefusedError) as refused:
        await execute("def f():\n    return 1\n", tests="assert f() == 1\n", entry_point="f", timeout_s=5)
    _assert_refusal_names_the_fix(str(refused.value))


@pytest.mark.slow
@pytest.mark.usefixtures("no_isolation_tools")
async def test_the_scorer_stops_instead_of_scoring_a_refusal_as_zero() -> None:
    prompt = 'def add(a, b):\n    """Return a + b."""\n'
    problem = Problem(
        id="humaneval/refused",
        source="humaneval",
        problem_type="code",
        problem=prompt,
        ground_truth=prompt + "    return a + b\n",
        meta={
            "entry_point": "add",
            "prompt": prompt,
            "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
        },
    )
    with pytest.raises(SandboxRefusedError) as refused:
        await score_code(problem, "```python\ndef add(a, b):\n    return a + b\n```")
    _assert_refusal_names_the_fix(str(refused.value))


@pytest.mark.slow
@pytest.mark.usefixtures("no_isolation_tools")
async def test_runs_started_together_wait_for_one_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_WEAK_ENV, "1")
    probed: list[str] = []
    real_probe = selection._probe

    async def counting_probe(plan: IsolationPlan) -> str | None:
        probed.append(plan.report.mode)
        return await real_probe(plan)

    monkeypatch.setattr(selection, "_probe", counting_probe)
    results = []

    async def one() -> None:
        results.append(await run_code("print(1)"))

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(one)
    assert [r.status for r in results] == ["ok"] * 4
    assert probed == ["rlimits-only"]
