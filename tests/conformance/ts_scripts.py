"""Running a TypeScript conformance script (tests/conformance/ts) and reading the one JSON summary it prints.

Every script prints its summary as the last stdout line, with `crash` set when it failed before finishing; the
tests assert on that summary, so reading it (and failing with the script's stderr) lives here once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import REPO_ROOT, server_command

TS_DIR = REPO_ROOT / "tests" / "conformance" / "ts"


def node() -> str:
    if os.environ.get("FLOWSTEER_SKIP_NODE") == "1":
        pytest.skip("FLOWSTEER_SKIP_NODE=1: the TypeScript conformance client is skipped on request")
    found = shutil.which("node")
    assert found, "node is required for the conformance test (or set FLOWSTEER_SKIP_NODE=1 to skip it explicitly)"
    assert (TS_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(), (
        "the TypeScript SDK is not installed: run `make conformance-deps` (npm ci --prefix tests/conformance/ts)"
    )
    return found


def flowsteer_mcp() -> list[str]:
    """The installed `flowsteer-mcp` command next to this interpreter, as clients configure it."""
    script = Path(sys.executable).with_name("flowsteer-mcp")
    return [str(script)] if script.exists() else server_command()


@dataclass
class ScriptRun:
    summary: dict[str, Any]
    returncode: int
    stderr: str


def start_script(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `node ts/SCRIPT ARGS...` (for several scripts at once); read it with `finished`."""
    return subprocess.Popen(
        [node(), str(TS_DIR / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=env,
    )


def finished(process: subprocess.Popen[str], timeout_s: float) -> ScriptRun:
    """The script's summary once it ended; fails (with its stderr) when it printed none or crashed."""
    stdout, stderr = process.communicate(timeout=timeout_s)
    lines = stdout.strip().splitlines()
    assert lines, f"the script printed nothing (exit {process.returncode}):\n{stderr[-3000:]}"
    summary: dict[str, Any] = json.loads(lines[-1])
    assert summary.get("crash") is None, f"{summary['crash']}\n{stderr[-3000:]}"
    return ScriptRun(summary=summary, returncode=process.returncode, stderr=stderr)


def run_script(script: str, *args: str, env: dict[str, str] | None = None, timeout_s: float) -> ScriptRun:
    return finished(start_script(script, *args, env=env), timeout_s)
