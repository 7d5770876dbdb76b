"""Reading what a `flowsteer train` subprocess left behind: its JSONL files, its JSON log lines, its vLLM server.

Shared by the end-to-end training tests, which run the CLI as a user does and judge it only by its outputs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from training.vllm.server import VLLM_PYTHON_ENV


def run_env(vllm_python: str) -> dict[str, str]:
    """The environment of a trainer subprocess: INFO logs as JSON lines on stderr (the events the tests read),
    unbuffered so a killed run still leaves its lines, and the interpreter that has vLLM."""
    return {**os.environ, VLLM_PYTHON_ENV: vllm_python, "FLOWSTEER_LOG_LEVEL": "INFO", "PYTHONUNBUFFERED": "1"}


def jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def logged_events(stderr: str, event: str) -> list[dict[str, object]]:
    rows = []
    for line in stderr.splitlines():
        if line.startswith("{") and f'"event": "{event}"' in line:
            rows.append(json.loads(line))
    return rows


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Whether the process has exited (or is a zombie) within the timeout: the trainer must stop its server."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.2)
    return False
