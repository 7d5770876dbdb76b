"""Benchmarks cannot rot silently: a benchmark whose runs fail exits non-zero and prints no figure."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SMALL_ROLLOUT = ["--trajectories", "8", "--group-size", "4", "--concurrency", "4", "--tail-share", "0"]
SMALL_SCALING = [
    *("--replicas", "1,2", "--capacity", "2", "--latency", "0.02", "--episodes-per-replica", "4"),
    *("--overhead-concurrency", "8", "--overhead-episodes", "8"),
]


def _guard() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_guard", BENCHMARKS / "_guard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_report_with_a_failed_run_exits_non_zero_and_prints_no_figure(capsys: pytest.CaptureFixture[str]) -> None:
    guard = _guard()
    report = guard.BenchmarkReport("demo")
    report.line("throughput ratio: 2.00x")
    report.require(True, "never shown")
    report.fail("schedule b: 3 of 4 runs failed")
    with pytest.raises(SystemExit) as exited:
        report.publish()
    assert exited.value.code == guard.FAILED_RUNS_EXIT != 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "schedule b: 3 of 4 runs failed" in err and "never shown" not in err and "ratio" not in err


def test_report_without_failures_prints_its_lines(capsys: pytest.CaptureFixture[str]) -> None:
    report = _guard().BenchmarkReport("demo")
    report.line("throughput ratio: 2.00x")
    report.publish()
    assert capsys.readouterr().out == "throughput ratio: 2.00x\n"


@pytest.mark.slow
def test_rollout_benchmark_runs_both_schedules_without_failures() -> None:
    """Regression: the round-synchronous director's copied `_round` signature failed all its trajectories."""
    done = _bench("rollout_throughput.py", *SMALL_ROLLOUT, "--latency", "0.01", "--executor-hold", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trajectory_failed" not in done.stdout + done.stderr  # structlog writes its warnings to stdout
    assert "round-synchronous" in done.stdout and "throughput ratio" in done.stdout


@pytest.mark.slow
def test_rollout_benchmark_whose_trajectories_fail_exits_non_zero_without_a_ratio() -> None:
    done = _bench("rollout_throughput.py", *SMALL_ROLLOUT, "--latency", "0.05", "--trajectory-timeout", "0.001")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "ratio" not in done.stdout and "trajectories/min" not in done.stdout
    assert "no figures printed" in done.stderr and "trajectories failed" in done.stderr


@pytest.mark.slow
def test_rollout_scaling_benchmark_prints_each_replica_count_and_the_overhead() -> None:
    done = _bench("rollout_scaling.py", *SMALL_SCALING)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "trajectory_failed" not in done.stdout + done.stderr and "replica_dead" not in done.stdout
    assert "1 replica(s):" in done.stdout and "2 replica(s):" in done.stdout
    assert "x vs 1 (at most 2.00x" in done.stdout and "episodes/s" in done.stdout
    assert "MCP+canvas overhead at 8 concurrent episodes" in done.stdout and "ms CPU per episode" in done.stdout


@pytest.mark.slow
def test_rollout_scaling_benchmark_whose_replicas_die_exits_non_zero_without_a_ratio() -> None:
    done = _bench("rollout_scaling.py", *SMALL_SCALING, "--die-after", "2")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "episodes/s" not in done.stdout and "x vs 1" not in done.stdout and "overhead at" not in done.stdout
    assert "no figures printed" in done.stderr and "no policy replica is left" in done.stderr


def test_learner_dtype_benchmark_without_its_model_exits_non_zero_without_a_ratio() -> None:
    done = _bench("learner_dtype.py", "--model", "no-such-model")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "ratio" not in done.stdout and "update=" not in done.stdout
    assert "no figures printed" in done.stderr and "no-such-model" in done.stderr


def _hostile_load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hostile_load", BENCHMARKS / "hostile_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hostile_load"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_hostile_load_prints_no_figure_when_a_workflow_is_over_its_footprint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = _hostile_load()
    footprint = bench.Footprint(workflows=4, memory=(200_000.0, "4-byte"), row=(1.0, "control"), built=(1.0, "ascii"))
    findings = bench.Findings(calls=10)
    assert bench.report(findings, bench.KillLedger(), footprint, 1.0) == 0
    assert "footprint: a worst-case create keeps 195.3 KB" in capsys.readouterr().out
    findings.footprint.append("a worst-case create takes 300.0 KB of server memory per workflow")
    findings.long_errors.append("act: 1200 characters")
    assert bench.report(findings, bench.KillLedger(), footprint, 1.0) == 1
    out, err = capsys.readouterr()
    assert "footprint: a worst-case create takes 300.0 KB" in out and "long error: act" in out
    assert "keeps" not in out and "fuzz:" not in out and "no figures printed" in err


def test_hostile_load_worst_case_create_fills_every_bound() -> None:
    """The footprint is only a bound if the payload is the largest the schemas allow."""
    bench = _hostile_load()
    from flowsteer_mcp.server.arguments import MAX_NAMES, MAX_PRESET_CHARS, MAX_TASK_CHARS

    payload = bench.worst_case_create("4-byte", 7, ["Plan"] * MAX_NAMES)
    assert len(payload["task"]) == MAX_TASK_CHARS
    assert len(payload["public_tests"]) == bench.LIMITS.max_public_tests_chars
    assert len(payload["entry_point"]) == bench.LIMITS.max_entry_point_chars and payload["entry_point"].isidentifier()
    finish = payload["options"]["finish"]
    assert len(finish["preset"]) == MAX_PRESET_CHARS and len(finish["solver_operators"]) == MAX_NAMES
    assert len(payload["options"]["disabled_operators"]) == MAX_NAMES


def test_adaptive_calls_prints_the_draws_each_rule_says() -> None:
    done = _bench("adaptive_calls.py", "--quick")
    assert done.returncode == 0, done.stderr
    rows = {line.split("  ")[0].strip(): line.split() for line in done.stdout.splitlines()[1:]}
    # columns: ... workflow, draws, requests, the fixed workflow, its draws, the ratio of draws
    assert rows["greedy program passes the public tests"][-6:] == [
        "direct8-tests",
        "1",
        "1",
        "direct8-exec",
        "8",
        "0.12x",
    ]
    assert rows["greedy program fails the public tests"][-6:] == [
        "direct8-tests",
        "8",
        "2",
        "direct8-exec",
        "8",
        "1.00x",
    ]
    assert rows["greedy program passes (waves)"][-6:] == ["direct8-passes", "1", "1", "direct8-exec", "8", "0.12x"]
    assert rows["a draw of the second wave passes"][-6:] == ["direct8-passes", "4", "2", "direct8-exec", "8", "0.50x"]
    assert rows["no draw passes the public tests"][-6:] == ["direct8-passes", "8", "3", "direct8-exec", "8", "1.00x"]
    assert rows["every answer agrees"][-6:] == ["direct-sc8-vote", "4", "2", "direct-sc8", "8", "0.50x"]
