"""Memoisation: after an edit only the affected nodes re-run (graphs built with the canvas's own edits)."""

from __future__ import annotations

from flowsteer_mcp.canvas.actions import AddStage, EditAction, ModifyNode, SetPrompt, apply_edit
from flowsteer_mcp.canvas.blueprint import ConditionalBlueprint, OperatorBlueprint, ParallelBlueprint
from flowsteer_mcp.canvas.execution import ExecutionReport
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.engine import MemoCache
from tests.engine.doubles import Harness, make_harness

TASK = TaskSpec(problem="What is 2 + 2?", task_type="math")


def edit(h: Harness, graph: WorkflowGraph, action: EditAction) -> WorkflowGraph:
    return apply_edit(graph, action, CanvasRules(h.engine.registry, CanvasOptions())).graph


def add(operator: str, prompt: str | None = None) -> AddStage:
    return AddStage(stage=OperatorBlueprint(operator=operator, prompt=prompt))


def computed(report: ExecutionReport) -> list[str]:
    return [r.node_id for r in report.trace if not r.cached and not r.skipped]


async def test_appending_a_stage_reruns_only_the_new_stage() -> None:
    h = make_harness()
    g = edit(h, WorkflowGraph(), add("FakeSolver", "marker-A"))
    g = edit(
        h,
        g,
        AddStage(stage=ConditionalBlueprint(check="FakeChecker", on_fail="FakeReviser", prompts=["verdict:fail"])),
    )
    first = await h.engine.run(g, TASK)
    assert first.cache_hits == 0 and first.llm_calls == 3

    g = edit(h, g, add("FakeSolver", "marker-B"))
    second = await h.engine.run(g, TASK)
    assert second.status == "ok"
    assert second.output == f"{first.output}|marker-B"
    assert computed(second) == ["node_3"]
    assert [r.cached for r in second.trace if not r.skipped] == [True, True, True, False]
    assert second.cache_hits == 3
    assert second.llm_calls == 1  # only the appended node called the model
    assert [r.tokens for r in second.trace if r.cached] == [0, 0, 0]


async def test_prompt_edit_reruns_the_edited_node_and_its_downstream_only() -> None:
    h = make_harness()
    g = WorkflowGraph()
    for prompt in ("marker-A", "marker-B", "marker-C"):
        g = edit(h, g, add("FakeSolver", prompt))
    await h.engine.run(g, TASK)

    g = edit(h, g, SetPrompt(node_id="node_2", prompt="marker-B2"))
    report = await h.engine.run(g, TASK)
    assert report.output == "marker-A|marker-B2|marker-C"
    assert [(r.node_id, r.cached) for r in report.trace] == [("node_1", True), ("node_2", False), ("node_3", False)]
    assert report.cache_hits == 1


async def test_edit_that_leaves_the_downstream_input_unchanged_keeps_it_cached() -> None:
    # Content-hash keys: the re-prompted checker re-runs, but it reaches the same verdict and feedback, so the
    # solver after it sees exactly the same input and is reused.
    h = make_harness()
    g = edit(h, WorkflowGraph(), add("FakeSolver", "marker-A"))
    g = edit(h, g, add("FakeChecker", "verdict:pass"))
    g = edit(h, g, add("FakeSolver", "marker-C"))
    await h.engine.run(g, TASK)
    g = edit(h, g, SetPrompt(node_id="node_2", prompt="pass-when:marker-A"))
    report = await h.engine.run(g, TASK)
    assert [(r.node_id, r.cached) for r in report.trace] == [("node_1", True), ("node_2", False), ("node_3", True)]


async def test_modify_changes_the_operator_and_reruns_downstream() -> None:
    h = make_harness()
    g = edit(h, WorkflowGraph(), add("FakeSolver", "marker-A"))
    g = edit(h, g, add("FakeSolver", "marker-B"))
    await h.engine.run(g, TASK)
    g = edit(h, g, ModifyNode(node_id="node_1", operator="FakeCoder", prompt="coder-1"))
    report = await h.engine.run(g, TASK)
    assert [(r.node_id, r.cached) for r in report.trace] == [("node_1", False), ("node_2", False)]
    assert report.output == "candidate coder-1|marker-B"


async def test_parallel_branches_with_identical_prompts_are_not_collapsed() -> None:
    h = make_harness()
    g = edit(
        h,
        WorkflowGraph(),
        AddStage(stage=ParallelBlueprint(operators=["FakeSolver", "FakeSolver"], prompts=["same-1", "same-1"])),
    )
    report = await h.engine.run(g, TASK)
    assert report.cache_hits == 0 and report.llm_calls == 2


async def test_failed_results_are_not_memoised_under_the_workflow_scope() -> None:
    """The canvas re-runs after each edit; a node that failed is tried again (the charged scope of evaluations
    keeps failures that are answers, tests/engine/test_memo_charged.py)."""
    h = make_harness()
    g = edit(h, edit(h, WorkflowGraph(), add("FakeSolver", "marker-A")), add("FailingSolverDouble"))
    await h.engine.run(g, TASK)
    again = await h.engine.run(g, TASK)
    assert [(r.node_id, r.cached) for r in again.trace] == [("node_1", True), ("node_2", False)]
    assert again.llm_calls == 1


async def test_backend_identity_is_part_of_the_key() -> None:
    h = make_harness()
    g = edit(h, WorkflowGraph(), add("FakeSolver", "marker-A"))
    await h.engine.run(g, TASK)
    h.backend.key = "double-v2"  # e.g. another model or other sampling settings
    report = await h.engine.run(g, TASK)
    assert report.cache_hits == 0


async def test_the_task_is_part_of_the_key() -> None:
    h = make_harness()
    g = edit(h, WorkflowGraph(), add("FakeSolver", "marker-A"))
    await h.engine.run(g, TASK)
    report = await h.engine.run(g, TaskSpec(problem="What is 3 + 3?", task_type="math"))
    assert report.cache_hits == 0


async def test_memoisation_can_be_turned_off() -> None:
    h = make_harness(memo=None)
    g = edit(h, WorkflowGraph(), add("FakeSolver", "marker-A"))
    await h.engine.run(g, TASK)
    report = await h.engine.run(g, TASK)
    assert report.cache_hits == 0 and report.llm_calls == 1


async def test_the_cache_is_a_bounded_lru() -> None:
    memo = MemoCache(max_entries=2)
    h = make_harness(memo=memo)
    g = WorkflowGraph()
    for prompt in ("marker-A", "marker-B", "marker-C"):
        g = edit(h, g, add("FakeSolver", prompt))
    await h.engine.run(g, TASK)
    assert len(memo) == 2
    report = await h.engine.run(g, TASK)
    # node_1 was evicted, so it and everything after it re-run.
    assert [r.cached for r in report.trace] == [False, False, False]


async def test_loop_iterations_are_memoised_per_iteration() -> None:
    from tests.engine.doubles import loop

    h = make_harness()
    g = WorkflowGraph(stages=[loop("node_1", 3, ("FakeSolver", "y"))], next_index=2)
    first = await h.engine.run(g, TASK)
    second = await h.engine.run(g, TASK)
    assert first.llm_calls == 3 and second.llm_calls == 0
    assert [(r.iteration, r.cached) for r in second.trace] == [(1, True), (2, True), (3, True)]
    assert second.output == first.output == "y|y|y"
