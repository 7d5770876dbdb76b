"""Hostile programs: each must be contained, and the isolation that contained it must be reported.

These need the full isolation (bubblewrap); where it is missing they skip with the reason, because the
degraded modes are reported as degraded and do not claim to contain them.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import textwrap
from pathlib import Path

import pytest

from operators.sandbox import (
    ExecResult,
    SandboxLimits,
    SandboxRefusedError,
    isolation,
    run_code,
    runner,
    select_isolation,
)

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
async def require_full_isolation() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed; CI installs it with `make system-deps`")
    try:
        plan = await select_isolation()
    except SandboxRefusedError as refused:
        if os.geteuid() == 0:
            raise  # as root with bwrap installed, the sandbox must work: a refusal here is a bug
        pytest.skip(f"bubblewrap cannot run for this unprivileged user here: {refused}")
    if plan.report.mode != "bwrap":
        pytest.skip(f"bubblewrap isolation not selected (mode {plan.report.mode}: {plan.report.note})")


def assert_fully_isolated(result: ExecResult) -> None:
    iso = result.isolation
    assert iso.mode == "bwrap"
    assert iso.network_isolated and iso.pid_namespace and iso.readonly_root and iso.private_tmp
    assert iso.rlimits
    assert not iso.degraded
    if os.geteuid() == 0:
        assert iso.uid_dropped


@pytest.fixture
def run_uids(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The fresh uids the sandbox hands out during this test: only processes under them are this test's,
    whatever else on the host (an evaluation scoring programs) runs in the sandbox meanwhile."""
    handed: list[int] = []

    def recording() -> int:
        uid = isolation.fresh_uid()
        handed.append(uid)
        return uid

    monkeypatch.setattr(runner, "fresh_uid", recording)
    return handed


def sandbox_processes_left(uids: list[int]) -> list[int]:
    """Host processes still running under one of `uids` (the private uids of this test's runs)."""
    assert os.geteuid() != 0 or uids, "as root every run drops to a fresh uid: none was handed out"
    wanted = set(uids)
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid in wanted:
                left.append(int(entry.name))
        except FileNotFoundError:
            continue
    return left


def program(source: str) -> str:
    return textwrap.dedent(source).lstrip()


async def test_infinite_loop_times_out_and_leaves_nothing_running(run_uids: list[int]) -> None:
    result = await run_code("while True:\n    pass\n", timeout_s=1.0)
    assert result.status == "timeout"
    assert result.passed is None
    assert_fully_isolated(result)
    assert sandbox_processes_left(run_uids) == []


async def test_infinite_loop_with_children_is_killed_as_a_group(run_uids: list[int]) -> None:
    code = program(
        """
        import os, time
        for _ in range(3):
            if os.fork() == 0:
                while True:
                    time.sleep(0.01)
        while True:
            pass
        """
    )
    result = await run_code(code, tests="assert True\n", timeout_s=1.0)
    assert result.status == "timeout"
    assert result.passed is False
    assert_fully_isolated(result)
    assert sandbox_processes_left(run_uids) == []


async def test_fork_bomb_is_capped_by_the_process_limit(run_uids: list[int]) -> None:
    code = program(
        """
        import os
        children = 0
        try:
            while True:
                pid = os.fork()
                if pid == 0:
                    import time
                    time.sleep(5)
                    os._exit(0)
                children += 1
        except OSError as exc:
            print("fork refused after", children, type(exc).__name__)
        """
    )
    limits = SandboxLimits(max_processes=16, wall_timeout_s=5)
    result = await run_code(code, limits=limits)
    assert_fully_isolated(result)
    assert "fork refused after" in result.stdout
    forked = int(result.stdout.split("after")[1].split()[0])
    assert forked < 16
    assert "BlockingIOError" in result.stdout
    assert sandbox_processes_left(run_uids) == []


async def test_exponential_fork_bomb_is_contained_and_the_host_still_forks(run_uids: list[int]) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = await run_code(code, timeout_s=2.0, limits=SandboxLimits(max_processes=32))
    assert result.status in ("timeout", "killed")
    assert_fully_isolated(result)
    host = await asyncio.create_subprocess_exec("true")
    assert await host.wait() == 0
    assert sandbox_processes_left(run_uids) == []


async def test_memory_bomb_hits_the_address_space_limit() -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n"
    result = await run_code(code, tests="assert True\n", limits=SandboxLimits(memory_bytes=512 * 1024 * 1024))
    assert result.status == "killed"
    assert result.passed is False
    assert "MemoryError" in result.reason
    assert_fully_isolated(result)


async def test_single_huge_allocation_fails_in_a_plain_run() -> None:
    result = await run_code("data = bytearray(16 * 1024 ** 3)\n")
    assert result.status == "error"
    assert "MemoryError" in result.stderr
    assert_fully_isolated(result)


async def test_huge_output_is_truncated_flagged_and_stopped() -> None:
    limits = SandboxLimits(max_output_bytes=64 * 1024)
    result = await run_code("import sys\nwhile True:\n    sys.stdout.write('x' * 4096)\n", limits=limits)
    assert result.status == "output_limit"
    assert result.stdout_truncated is True
    assert result.stderr_truncated is False
    assert len(result.stdout.encode()) == 64 * 1024
    assert_fully_isolated(result)


async def test_writes_outside_the_work_dir_never_reach_the_host(tmp_path: Path) -> None:
    tag = secrets.token_hex(6)
    in_host_tmp = tmp_path / f"escape-{tag}.txt"
    in_repo = REPO_ROOT / f"escape-{tag}.txt"
    in_etc = Path("/etc") / f"escape-{tag}.txt"
    code = program(
        f"""
        import os
        for target in [{str(in_host_tmp)!r}, {str(in_repo)!r}, {str(in_etc)!r}]:
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w") as handle:
                    handle.write("escaped")
                print("wrote", target)
            except OSError as exc:
                print("refused", target, type(exc).__name__)
        """
    )
    result = await run_code(code)
    assert_fully_isolated(result)
    assert f"refused {in_repo}" in result.stdout
    assert f"refused {in_etc}" in result.stdout
    for target in (in_host_tmp, in_repo, in_etc):
        assert not target.exists(), f"the sandbox wrote {target} on the host"


async def test_environment_secrets_are_invisible(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    code = program(
        """
        import os
        print(dict(os.environ))
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    print(open(f"/proc/{entry}/environ", "rb").read())
                except OSError as exc:
                    print("no", entry, type(exc).__name__)
        """
    )
    result = await run_code(code)
    assert result.status == "ok"
    assert "PATH" in result.stdout
    assert secret not in result.stdout
    assert "OPENAI_API_KEY" not in result.stdout
    assert_fully_isolated(result)


async def test_network_connect_to_a_host_server_fails() -> None:
    accepted = 0

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        _, probe_writer = await asyncio.open_connection("127.0.0.1", port)
        probe_writer.close()
        for _ in range(200):
            if accepted:
                break
            await asyncio.sleep(0.01)
        assert accepted == 1, "the test server itself does not accept connections"
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')\n"
        result = await run_code(code)
    finally:
        server.close()
        await server.wait_closed()
    assert result.status == "error"
    assert "connected" not in result.stdout
    assert "ConnectionRefusedError" in result.stderr or "OSError" in result.stderr
    assert accepted == 1
    assert_fully_isolated(result)


@pytest.mark.parametrize(
    "attack",
    [
        "os.kill(os.getppid(), signal.SIGKILL)",
        "os.killpg(0, signal.SIGKILL)",
        "os.kill(-1, signal.SIGKILL)",
        "os.kill(1, signal.SIGKILL)",
    ],
)
async def test_killing_the_parent_only_hurts_the_sandbox(attack: str) -> None:
    bystander_code = "import time\ndef add(a, b):\n    time.sleep(0.5)\n    return a + b\n"
    hostile_code = f"import os, signal\n{attack}\ndef add(a, b):\n    return a + b\n"
    tests = "assert add(1, 2) == 3\n"
    bystander, hostile = await asyncio.gather(
        run_code(bystander_code, tests=tests), run_code(hostile_code, tests=tests)
    )
    assert hostile.passed is False
    assert hostile.status in ("error", "killed", "failed")
    assert_fully_isolated(hostile)
    assert bystander.passed is True, bystander.reason
    assert os.getppid() > 0  # we (pytest) are alive to run this line


WRONG_ADD = "def add(a, b):\n    return a - b\n"
RIGHT_ADD = "def add(a, b):\n    return a + b\n"
CHECK = "def check(candidate):\n    assert abs(candidate(1, 2) - 3) < 1e-9\n"

FORGERIES = {
    "print_passed": WRONG_ADD
    + 'print(\'PASSED\')\nprint(\'{"outcome": "passed", "nonce": "x"}\')\n'
    + "import sys\nprint('PASSED', file=sys.stderr)\n",
    "sys_exit_zero_at_import": WRONG_ADD + "import sys\nsys.exit(0)\n",
    "os_exit_zero_at_import": WRONG_ADD + "import os\nos._exit(0)\n",
    "system_exit_inside_tests": "def add(a, b):\n    raise SystemExit(0)\n",
    "os_exit_inside_tests": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "keyboard_interrupt_inside_tests": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "patched_builtins": WRONG_ADD + "import builtins\nbuiltins.abs = lambda value: 0\n",
    "shadowed_builtin": WRONG_ADD + "def abs(value):\n    return 0\n",
    "fake_records_on_every_fd": WRONG_ADD
    + program(
        """
        import os, json
        record = (json.dumps({"outcome": "passed", "nonce": "0" * 64}) + "\\n").encode()
        for fd in range(0, 1024):
            try:
                os.write(fd, record)
            except OSError:
                pass
        os._exit(0)
        """
    ),
    "fake_verdict_files": WRONG_ADD
    + program(
        """
        import os
        for name in ("verdict", "verdict.json", "result.json", "PASSED", "/tmp/verdict"):
            with open(name, "w") as handle:
                handle.write('{"outcome": "passed", "passed": true}')
        """
    ),
    "replay_secrets_from_descriptors": WRONG_ADD
    + program(
        """
        import os, re
        found = set()
        for proc in os.listdir("/proc"):
            if not proc.isdigit():
                continue
            fd_dir = f"/proc/{proc}/fd"
            try:
                names = os.listdir(fd_dir)
            except OSError:
                continue
            for name in names:
                try:
                    data = open(os.path.join(fd_dir, name), "rb").read(1 << 20)
                except OSError:
                    continue
                found.update(re.findall(rb"[0-9a-f]{64}", data))
        for fd in range(3, 1024):
            for nonce in found or {b"0" * 64}:
                try:
                    os.write(fd, b'{"outcome": "passed", "nonce": "' + nonce + b'"}\\n')
                except OSError:
                    pass
        print("candidates", len(found))
        os._exit(0)
        """
    ),
    "atexit_and_thread_forgers": WRONG_ADD
    + program(
        """
        import atexit, os, threading, time
        def forge():
            for fd in range(3, 64):
                try:
                    os.write(fd, b'{"outcome": "passed", "nonce": "' + b"1" * 64 + b'"}\\n')
                except OSError:
                    pass
        atexit.register(forge)
        threading.Thread(target=lambda: (time.sleep(0.05), forge()), daemon=False).start()
        """
    ),
    "own_check_function": WRONG_ADD + "def check(candidate):\n    return None\n",
    "close_every_descriptor": WRONG_ADD + "import os\nos.closerange(3, 4096)\n",
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
async def test_forged_verdicts_never_pass(name: str) -> None:
    result = await run_code(FORGERIES[name], tests=CHECK, entry_point="add")
    assert result.passed is False, f"forgery {name!r} obtained a pass: {result.reason}"
    assert result.status != "ok"
    assert_fully_isolated(result)


async def test_the_same_noise_around_a_correct_solution_still_passes() -> None:
    """Control for the forgery tests: printing and file writes do not by themselves break a real pass."""
    code = RIGHT_ADD + "print('PASSED')\nopen('verdict.json', 'w').write('{}')\n"
    result = await run_code(code, tests=CHECK, entry_point="add")
    assert result.passed is True
    assert result.stdout == "PASSED\n"
