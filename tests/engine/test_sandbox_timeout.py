"""The sandbox limit an operator runs under comes from the engine, and the engine's from the config's `[engine]`."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowsteer_mcp.canvas.model import OperatorNode, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.engine.node_call import CallSettings
from flowsteer_mcp.runner_choice import build_runner
from operators.backends.config import ConfigError, parse_config
from operators.backends.scripted import ScriptedBackend
from operators.base import (
    DEFAULT_SANDBOX_TIMEOUT_S,
    Category,
    Operator,
    OperatorInput,
    OperatorOutput,
    OperatorRuntime,
    OperatorSpec,
    Role,
)
from operators.registry import OperatorRegistry

TASK = TaskSpec(problem="What is 2 + 2?", task_type="math")
GRAPH = WorkflowGraph(stages=[OperatorNode(id="node_1", operator="SandboxLimitProbe")])


class SandboxLimitProbe(Operator):
    """Answers with the sandbox limit its runtime carries, so a run's output shows what reached the operator."""

    spec = OperatorSpec(
        name="SandboxLimitProbe",
        category=Category.SOLVING,
        role=Role.SOLUTION,
        summary="test double",
        when_to_use="tests only",
        signature="SandboxLimitProbe(problem) -> {text}",
        accepts_prompt=False,
    )

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
        return OperatorOutput(text=f"{runtime.sandbox_timeout_s:g}")


def probe_registry() -> OperatorRegistry:
    registry = OperatorRegistry()
    registry.register(SandboxLimitProbe)
    return registry


async def test_the_engine_passes_its_sandbox_timeout_to_operators() -> None:
    engine = WorkflowEngine(probe_registry(), ScriptedBackend(), sandbox_timeout_s=3.5)
    report = await engine.run(GRAPH, TASK)
    assert report.status == "ok" and report.output == "3.5"


async def test_without_a_setting_operators_get_the_default_limit() -> None:
    report = await WorkflowEngine(probe_registry(), ScriptedBackend()).run(GRAPH, TASK)
    assert report.output == f"{DEFAULT_SANDBOX_TIMEOUT_S:g}"


def test_the_engine_rejects_a_limit_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="sandbox_timeout_s"):
        WorkflowEngine(probe_registry(), ScriptedBackend(), sandbox_timeout_s=0)


def test_the_limit_is_part_of_the_memo_key() -> None:
    """A longer limit can turn a timed-out program into a passing one, so results must not be shared."""
    short = CallSettings(call_timeout_s=None, max_reasks=2, runtime_options={}, sandbox_timeout_s=1.0)
    longer = CallSettings(call_timeout_s=None, max_reasks=2, runtime_options={}, sandbox_timeout_s=30.0)
    assert short.fingerprint() != longer.fingerprint()


CONFIG = """
[executor]
model = "canned"

[models.canned]
backend = "scripted"

[engine]
sandbox_timeout_s = 2.5
call_timeout_s = 901
run_timeout_s = 1800
reasks = 3
sampled_reasks = 0
"""


async def test_a_configured_sandbox_timeout_reaches_the_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (
        "FLOWSTEER_CONFIG",
        "FLOWSTEER_EXECUTOR_MODEL",
        "FLOWSTEER_EXECUTOR_BACKEND",
        "FLOWSTEER_EXECUTOR_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "flowsteer.toml"
    path.write_text(CONFIG, encoding="utf-8")
    runner = build_runner(probe_registry(), path)
    report = await runner.run(GRAPH, TASK)
    assert report.output == "2.5"
    assert isinstance(runner, WorkflowEngine)
    assert (runner._settings.call_timeout_s, runner.run_timeout_s) == (901, 1800)  # the other [engine] limits
    assert (runner._settings.max_reasks, runner._settings.sampled_reasks) == (3, 0)


def test_the_engine_table_is_optional_and_validated() -> None:
    base = {"executor": {"model": "canned"}, "models": {"canned": {"backend": "scripted"}}}
    assert parse_config(base).engine.sandbox_timeout_s == DEFAULT_SANDBOX_TIMEOUT_S
    with pytest.raises(ConfigError, match=r"engine\.sandbox_timeout_s"):
        parse_config({**base, "engine": {"sandbox_timeout_s": 0}})
    assert (parse_config(base).engine.call_timeout_s, parse_config(base).engine.run_timeout_s) == (300, 900)
    with pytest.raises(ConfigError, match=r"engine\.call_timeout_s"):
        parse_config({**base, "engine": {"call_timeout_s": -1}})
    assert (parse_config(base).engine.reasks, parse_config(base).engine.sampled_reasks) == (2, None)
    with pytest.raises(ConfigError, match=r"engine\.sampled_reasks"):
        parse_config({**base, "engine": {"sampled_reasks": -1}})
    with pytest.raises(ConfigError, match=r"engine\.reasks"):
        parse_config({**base, "engine": {"reasks": 99}})
    with pytest.raises(ConfigError, match=r"unknown key 'engine\.sandbox_timeout'"):
        parse_config({**base, "engine": {"sandbox_timeout": 5}})
