"""The real benchmark data through the sandbox: reference solutions pass, broken ones fail.

Reads ``<repo>/../shared/data``; skips when it is absent. All items run concurrently under the
sandbox's own concurrency limit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from operators.sandbox import ALLOW_WEAK_ENV, ExecResult, run_code

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def weak_isolation_without_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """These programs are benign and test the harness, not the isolation: without bubblewrap (a dev machine;
    CI installs it) opt into the weak modes instead of getting every run refused."""
    if shutil.which("bwrap") is None:
        monkeypatch.setenv(ALLOW_WEAK_ENV, "1")


DATA_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def load(name: str) -> list[dict[str, Any]]:
    path = DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"benchmark data not found at {path}")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def break_function(source: str, entry_point: str) -> str:
    """The solution with the entry point's body replaced by ``return None`` (other helpers kept)."""
    return source + f"\n\ndef {entry_point}(*args, **kwargs):\n    return None\n"


async def run_all(jobs: list[tuple[str, str, str, str | None]]) -> dict[str, ExecResult]:
    results: dict[str, ExecResult] = {}

    async def one(key: str, code: str, tests: str, entry_point: str | None) -> None:
        results[key] = await run_code(code, tests=tests, entry_point=entry_point, timeout_s=20)

    async with anyio.create_task_group() as group:
        for job in jobs:
            group.start_soon(one, *job)
    return results


async def test_every_humaneval_canonical_solution_passes_and_broken_ones_fail() -> None:
    records = load("humaneval.jsonl")
    jobs: list[tuple[str, str, str, str | None]] = []
    for record in records:
        meta = record["meta"]
        jobs.append((record["id"], record["ground_truth"], meta["test"], meta["entry_point"]))
        broken = break_function(record["ground_truth"], meta["entry_point"])
        jobs.append((record["id"] + "#broken", broken, meta["test"], meta["entry_point"]))
    results = await run_all(jobs)
    isolation = {result.isolation.mode for result in results.values()}
    assert len(isolation) == 1
    failed = {k: r.reason for k, r in results.items() if not k.endswith("#broken") and not r.passed}
    assert failed == {}, f"canonical solutions failed: {failed}"
    wrongly_passed = [k for k, r in results.items() if k.endswith("#broken") and r.passed]
    assert wrongly_passed == []
    assert len(results) == 2 * len(records)


async def test_every_mbpp_reference_solution_passes_and_broken_ones_fail() -> None:
    records = load("mbpp.jsonl")
    jobs: list[tuple[str, str, str, str | None]] = []
    for record in records:
        meta = record["meta"]
        jobs.append((record["id"], record["ground_truth"], meta["test"], None))
        broken = break_function(record["ground_truth"], meta["entry_point"])
        jobs.append((record["id"] + "#broken", broken, meta["test"], None))
    results = await run_all(jobs)
    failed = {k: r.reason for k, r in results.items() if not k.endswith("#broken") and not r.passed}
    assert failed == {}, f"reference solutions failed: {failed}"
    wrongly_passed = [k for k, r in results.items() if k.endswith("#broken") and r.passed]
    assert wrongly_passed == []
