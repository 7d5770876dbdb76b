"""A plug-in checker, installed through a real `flowsteer.operators` entry point, used through MCP end to end.

Nothing in the canvas names it: it takes part because its spec declares the checker role (and `runs_tests`,
`hinted_for=("code",)`). It is the check of a conditional (built with `act` and with `add_structure`), it runs
in the real engine as that check, it satisfies the paper finish gate where a checker and a code task's test
runner are required, the hints suggest it, and the reward's checker term counts it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.app import WorkflowRunner
from flowsteer_mcp.store.memory import MemoryStore
from operators.backends.scripted import ScriptedBackend
from operators.library import BUILTIN_OPERATORS
from operators.registry import OperatorRegistry
from operators.specs import BUILTIN_SPECS
from tests.operators.test_registry_plugins import _install_plugin
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller, entered_in_own_task
from training.reward import compute_reward

STRICT_TEST_MODULE = """
from operators.base import Category, Operator, OperatorInput, OperatorOutput, OperatorRuntime, OperatorSpec, Role


class StrictTest(Operator):
    spec = OperatorSpec(
        name="StrictTest",
        category=Category.VERIFICATION,
        role=Role.CHECKER,
        runs_tests=True,
        hinted_for=("code",),
        summary="Passes a solution only when it says it is strict.",
        when_to_use="Tests only.",
        signature="StrictTest(solution) -> {text=solution, passed, feedback}",
    )

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
        solution = inputs.solution or ""
        passed = "strict" in solution
        return OperatorOutput(text=solution, verdict=passed, feedback=None if passed else "not strict enough")
"""

CODE_TASK = {"task": "Write f.", "task_type": "code", "entry_point": "f", "public_tests": "assert f() == 1"}


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> OperatorRegistry:
    module = f"fs_strict_test_{tmp_path.name.replace('-', '_')}"
    _install_plugin(tmp_path / "site", module, {"StrictTest": f"{module}:StrictTest"}, monkeypatch, STRICT_TEST_MODULE)
    registry = OperatorRegistry(BUILTIN_SPECS.values())
    for operator_cls in BUILTIN_OPERATORS:
        registry.register(operator_cls)
    assert registry.load_entry_points() == ["StrictTest"]
    return registry


@asynccontextmanager
async def serve(registry: OperatorRegistry, runner: WorkflowRunner) -> AsyncIterator[ToolCaller]:
    server = build_server(ServerSettings(), registry=registry, runner=runner, store=MemoryStore())
    async with entered_in_own_task(Client(server.mcp)) as client:
        yield ToolCaller(client)


def _hint(step: dict[str, Any]) -> str:
    feedback: str = step["feedback"]
    return feedback[feedback.index("[BLOCK_FINISH]") :]


async def test_plugin_checker_is_a_conditional_check_that_runs_in_the_engine(registry: OperatorRegistry) -> None:
    backend = ScriptedBackend(["a loose answer", "a strict answer"], name="strict-plugin")
    async with serve(registry, WorkflowEngine(registry, backend)) as tools:
        options = {"finish": "relaxed", "execute_each_step": False, "prompt_turns": False}
        workflow_id = await tools.create("Say something.", options=options)
        await tools.ok("add_operator", workflow_id=workflow_id, operator="Custom")
        step = await tools.act(
            workflow_id,
            "<action>add</action><structure>conditional</structure><condition>StrictTest</condition>"
            "<true>Custom</true><false>done</false>",
        )
        assert step["ok"] is True, step["message"]
        assert step["state"]["dsl"] == "Custom -> StrictTest ? Custom : done"

        run = await tools.ok("run_workflow", workflow_id=workflow_id)

    execution = run["execution"]
    assert execution["status"] == "ok" and execution["output"] == "a strict answer"
    check = next(row for row in run["trace"] if row["operator"] == "StrictTest")
    assert check["verdict"] is False, "the plug-in's failed check must take the on-fail branch"


async def test_plugin_checker_satisfies_the_paper_gate_gets_hints_and_counts_in_the_reward(
    registry: OperatorRegistry,
) -> None:
    async with serve(registry, ScriptedRunner()) as tools:
        workflow_id = await tools.create(**CODE_TASK)
        await tools.ok("add_operator", workflow_id=workflow_id, operator="Programmer", prompt="Write f in Python.")
        step = await tools.ok(
            "add_structure",
            workflow_id=workflow_id,
            structure="conditional",
            condition="StrictTest",
            on_fail="Revise",
            on_pass="done",
        )
        assert step["state"]["dsl"] == "Programmer -> StrictTest ? Revise : done"
        stats = step["state"]["stats"]
        assert stats["has_checker"] is True

        # Short of operators, but neither a checker nor Test is asked for: the plug-in is both.
        rejected = await tools.act(workflow_id, "<action>finish</action>")
        assert rejected["ok"] is False and "at least 5" in rejected["message"]
        assert "No checker" not in rejected["message"] and "needs" not in rejected["message"]
        assert "ADD:Test" not in _hint(rejected)

        for operator in ("Review", "Format"):
            await tools.ok("add_operator", workflow_id=workflow_id, operator=operator, prompt="Check it closely.")
        done = await tools.act(workflow_id, "<action>finish</action>")
        assert done["ok"] is True, done["message"]

        # A checker already in the workflow is the one the hint builds the self-correcting conditional on.
        other = await tools.create(**CODE_TASK, options={"prompt_turns": False})
        await tools.ok("add_operator", workflow_id=other, operator="Programmer")
        step = await tools.ok("add_operator", workflow_id=other, operator="StrictTest")
        assert "[NEXT]=ADD:conditional(StrictTest,Revise,done)" in _hint(step)

    reward = compute_reward(stats, correctness=0.0, finished=True)
    assert reward.terms["checker"] == 0.2
