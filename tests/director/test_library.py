"""The workflow library: every entry imports through a real in-memory MCP server and builds the DSL it claims;
`template` and `template:NAME` run library workflows through the tools; unknown names are refused with the list."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

from flowsteer_mcp.canvas.blueprint import ConditionalBlueprint, OperatorBlueprint, ParallelBlueprint
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.direct import DirectDirector
from flowsteer_mcp.director.library import (
    DEFAULT_WORKFLOW,
    LIBRARY,
    LibraryWorkflow,
    UnknownWorkflowError,
    library_listing,
    library_workflow,
)
from flowsteer_mcp.director.link import CanvasLink
from flowsteer_mcp.director.template import TemplateDirector
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.server import build_server
from operators.backends.base import GREEDY
from operators.backends.scripted import ScriptedBackend
from operators.registry import default_registry
from operators.specs import BUILTIN_SPECS
from tests.support.scripted_runner import ScriptedRunner

ENTRIES = [entry for entries in LIBRARY.values() for entry in entries.values()]
CODE_TASK = TaskSpec(
    problem="Write add(a, b).", task_type="code", entry_point="add", public_tests="assert add(1, 2) == 3"
)


@pytest.mark.parametrize("task_type", ["code", "math", "qa"])
def test_each_task_type_has_at_least_six_candidates_besides_classic(task_type: str) -> None:
    entries = LIBRARY[task_type]
    assert "classic" in entries and len(entries) - 1 >= 6
    assert all(entry.rationale.strip() and "\n" not in entry.rationale for entry in entries.values())
    assert all(entry.task_type == task_type and entry.name == name for name, entry in entries.items())


def test_the_library_builds_the_workflows_it_names() -> None:
    dsl = {(entry.task_type, entry.name): entry.dsl() for entry in ENTRIES}
    assert dsl[("code", "greedy")] == "Programmer"
    assert dsl[("code", "sample4-exec")] == "Programmer{4} -> ScEnsemble"
    assert dsl[("code", "sample8-exec")] == "Programmer{8} -> ScEnsemble"
    assert dsl[("code", "exec-repair")] == "Programmer{4} -> ScEnsemble -> Test ? Revise : done"
    assert dsl[("code", "plan-sample-exec")] == "Plan -> Programmer{4} -> ScEnsemble"
    assert dsl[("code", "custom+programmer-exec")] == "[Custom{2}, Programmer{2}] -> ScEnsemble"
    assert dsl[("math", "greedy-cot")] == "Custom"
    assert dsl[("math", "pot")] == "Programmer"
    assert dsl[("math", "pot4-vote")] == "Programmer{4} -> ScEnsemble"
    assert dsl[("math", "cot4-vote")] == "Custom{4} -> ScEnsemble"
    assert dsl[("math", "pot2+cot2-vote")] == "[Programmer{2}, Custom{2}] -> ScEnsemble"
    assert dsl[("math", "pot4-vote-format")] == "Programmer{4} -> ScEnsemble -> Format"
    assert dsl[("qa", "greedy")] == "AnswerGenerate"
    assert dsl[("qa", "vote5")] == "AnswerGenerate{5} -> ScEnsemble"
    assert dsl[("qa", "custom-vote")] == "Custom{5} -> ScEnsemble"
    # the pre-library templates, unchanged, so the old measurement stays reproducible
    assert dsl[("code", "classic")] == "Plan -> Programmer -> Test ? Revise : done"
    assert dsl[("math", "classic")] == "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format"
    assert dsl[("qa", "classic")] == "Custom -> Review ? Revise : done -> Format"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: f"{entry.task_type}:{entry.name}")
async def test_every_entry_imports_through_the_mcp_server_unchanged(entry: LibraryWorkflow) -> None:
    server = build_server(runner=ScriptedRunner())
    async with Client(server.mcp) as client:
        link = CanvasLink(client)
        created = await link.call(
            "import_workflow", spec=entry.spec(), format="json", task="a task", task_type=entry.task_type
        )
        exported = await link.call("export_workflow", workflow_id=created["workflow_id"], format="json")
    assert created["state"]["dsl"] == entry.dsl()
    assert json.loads(exported["content"]) == json.loads(entry.spec())  # prompts and samples survive the import
    for node in entry.graph().iter_operator_nodes():  # a short instruction, or none where a solver asks directly
        assert node.prompt or BUILTIN_SPECS[node.operator].solver, f"{entry.name}: {node.operator} has no prompt"


def _typed_tool_calls(entry: LibraryWorkflow) -> list[tuple[str, dict[str, Any]]]:
    """How the pre-library template built a classic entry: one typed tool call per stage."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for stage in entry.stages:
        if isinstance(stage, OperatorBlueprint):
            calls.append(("add_operator", {"operator": stage.operator, "prompt": stage.prompt}))
        elif isinstance(stage, ParallelBlueprint):
            calls.append(
                ("add_structure", {"structure": "parallel", "operators": stage.operators, "prompts": stage.prompts})
            )
        else:
            assert isinstance(stage, ConditionalBlueprint)
            arguments = {"condition": stage.check, "on_fail": stage.on_fail, "prompts": stage.prompts}
            calls.append(("add_structure", {"structure": "conditional", **arguments}))
    return calls


@pytest.mark.parametrize("task_type", ["code", "math", "qa", "general"])
async def test_classic_is_the_graph_the_typed_tools_built_before(task_type: str) -> None:
    entry = LIBRARY[task_type]["classic"]
    server = build_server(runner=ScriptedRunner())
    async with Client(server.mcp) as client:
        link = CanvasLink(client)
        created = await link.create(TaskSpec(problem="a task", task_type=task_type), {"execute_each_step": False})
        for tool, arguments in _typed_tool_calls(entry):
            await link.call(tool, workflow_id=created["workflow_id"], **arguments)
        exported = await link.call("export_workflow", workflow_id=created["workflow_id"], format="json")
    assert json.loads(exported["content"]) == json.loads(entry.spec())


async def test_a_named_template_runs_its_library_workflow_once_through_the_tools() -> None:
    runner = ScriptedRunner()
    server = build_server(runner=runner)
    async with Client(server.mcp) as client:
        result = await TemplateDirector("sample4-exec").run(CODE_TASK, client)
    assert result.director == "template:sample4-exec"
    assert result.error is None and result.finished
    assert result.dsl == "Programmer{4} -> ScEnsemble" == result.answer  # the double answers with the DSL it ran
    assert len(runner.calls) == 1 and runner.calls[0].graph.stages[0].samples == 4  # type: ignore[union-attr]
    assert result.llm_calls == 2 and result.tokens == 20  # one call and 10 tokens per node from the double


async def test_plain_template_runs_the_default_of_each_task_type() -> None:
    assert DEFAULT_WORKFLOW == {
        "code": "direct8-redraw",
        "math": "direct-sc8",
        "qa": "direct-sc5",
        "general": "classic",
    }
    server = build_server(runner=ScriptedRunner())
    async with Client(server.mcp) as client:
        result = await TemplateDirector().run(CODE_TASK, client)
    assert result.director == "template"
    assert result.dsl == library_workflow("code", DEFAULT_WORKFLOW["code"]).dsl()


def test_an_unknown_name_is_refused_with_the_library_names() -> None:
    with pytest.raises(UnknownWorkflowError) as raised:
        TemplateDirector("sample5-exec")
    message = str(raised.value)
    assert "unknown workflow 'sample5-exec'" in message
    assert "sample4-exec" in message and "pot4-vote" in message and "vote5" in message


async def test_a_name_missing_for_the_task_type_is_an_episode_error_naming_the_valid_ones() -> None:
    runner = ScriptedRunner()
    server = build_server(runner=runner)
    async with Client(server.mcp) as client:
        result = await TemplateDirector("pot4-vote").run(CODE_TASK, client)  # a math workflow on a code task
    assert result.answer is None and not runner.calls
    assert result.error is not None and "no workflow 'pot4-vote' for task type 'code'" in result.error
    assert "sample4-exec" in result.error


def test_the_listing_names_every_workflow_with_its_dsl_and_rationale() -> None:
    text = library_listing()
    for entry in ENTRIES:
        assert entry.dsl() in text and entry.rationale in text and entry.name in text
    assert "code (template default: direct8-redraw)" in text and "math (template default: direct-sc8)" in text


def test_flowsteer_solve_accepts_library_workflows_and_refuses_unknown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flowsteer_mcp.director.solve import _parser

    assert _parser().parse_args(["What is 2+2?", "--director", "template:pot4-vote"]).director == "template:pot4-vote"
    assert _parser().parse_args(["What is 2+2?"]).director == "template"
    with pytest.raises(SystemExit):
        _parser().parse_args(["What is 2+2?", "--director", "template:nope"])
    assert "unknown workflow 'nope'" in capsys.readouterr().err


MATH_TASK = TaskSpec(problem="Tom has 3 apples and buys 4 more. How many apples does he have?", task_type="math")


async def test_a_direct_entry_draws_direct_s_own_call_first_then_samples_it() -> None:
    """direct-sc4 through the MCP tools on the real engine: its greedy draw sends exactly the request the direct
    baseline sends, the 3 sampled draws share that prompt, and a tie keeps the greedy (direct) answer."""
    replies = iter(["so \\boxed{7}", "\\boxed{7}", "\\boxed{8}", "\\boxed{6}"])
    backend = ScriptedBackend(rules=[lambda request: next(replies)])
    baseline = ScriptedBackend(["so \\boxed{7}"])
    direct = await DirectDirector(baseline).run(MATH_TASK)
    server = build_server(runner=WorkflowEngine(default_registry(), backend))
    async with Client(server.mcp) as client:
        result = await TemplateDirector("direct-sc4").run(MATH_TASK, client)
    assert result.error is None and result.answer == direct.answer == "so \\boxed{7}"
    greedy = next(r for r in [*backend.requests, *(request for request, _ in backend.batches)] if r.draw == GREEDY)
    assert greedy.messages == baseline.requests[0].messages
    sampled = [(request, n) for request, n in backend.batches if request.draw != GREEDY]
    assert [(r.messages, n) for r, n in sampled] == [(greedy.messages, 3)]
