"""The hostile-load script runs end to end: a small seeded fuzz and one kill -9, with a clean summary line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.servers import REPO_ROOT, server_env

SUMMARY = re.compile(
    r"^fuzz: (\d+) calls, 0 crashes, 0 partial edits, 0 limit breaches; "
    r"kill loop: 1 kills, (\d+)/(\d+) acknowledged edits kept$",
    re.MULTILINE,
)


@pytest.mark.slow
def test_hostile_load_script_finds_nothing_on_a_small_seeded_run() -> None:
    command = [sys.executable, "benchmarks/hostile_load.py", "--seed", "14", "--calls", "150", "--kills", "1"]
    done = subprocess.run(command, cwd=REPO_ROOT, env=server_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = SUMMARY.search(done.stdout)
    assert summary is not None, done.stdout[-2000:]
    calls, kept, acknowledged = (int(group) for group in summary.groups())
    assert calls >= 150 and acknowledged > 0 and kept == acknowledged
