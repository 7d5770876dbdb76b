"""`memo_scope = "charged"`: workflows that share draws are each charged what they would have paid alone.

The draws of `Programmer{8}` go out as the greedy call plus one `n = 7` request; `Programmer{8|passes}` makes
the same draws as the greedy call plus requests of 3 and 4, and `Programmer{4}` as the greedy call plus one of
3. Each request processes its prompt once, so the three pay different prompts for the same draws. A workflow
reusing another's draws must pay for them as its own requests would have, whichever workflow ran first.
"""

from __future__ import annotations

from itertools import permutations

import pytest

from flowsteer_mcp.canvas.execution import RUN_SCOPE
from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.engine import WorkflowEngine
from operators.backends.base import BackendError, ChatRequest
from operators.backends.config import MemoScope
from operators.backends.scripted import ScriptedBackend
from operators.registry import default_registry

TASK = TaskSpec(
    problem="Write add(a, b) that returns the sum of a and b.",
    task_type="code",
    entry_point="add",
    public_tests="assert add(1, 2) == 3",
)
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"  # every draw fails the public test: all are drawn
WORKFLOWS = ("Programmer{8} -> ScEnsemble", "Programmer{8|passes} -> ScEnsemble", "Programmer{4} -> ScEnsemble")


async def costs(
    order: tuple[str, ...], memo_scope: MemoScope, reply: str = WRONG, status: str = "ok"
) -> tuple[dict[str, tuple[int, int]], int]:
    """(tokens, LLM calls) of each workflow run in `order` on one engine whose executor always answers `reply`,
    and the requests the executor got; every run must end with `status`."""
    registry = default_registry()
    backend = ScriptedBackend(rules=[lambda request: reply])
    engine = WorkflowEngine(registry, backend, sampled_reasks=0, memo_scope=memo_scope)
    seen: dict[str, tuple[int, int]] = {}
    for number, dsl in enumerate(order):
        graph = import_dsl(dsl, CanvasRules(registry, CanvasOptions(finish="relaxed")))
        scope = RUN_SCOPE.set(f"workflow-{number}")
        try:
            report = await engine.run(graph, TASK)
        finally:
            RUN_SCOPE.reset(scope)
        assert report.status == status, report.error
        seen[dsl] = (report.tokens, report.llm_calls)
    return seen, len(backend.requests)


async def alone(dsl: str, reply: str = WRONG, status: str = "ok") -> tuple[int, int]:
    seen, _ = await costs((dsl,), "workflow", reply, status)
    return seen[dsl]


@pytest.mark.parametrize("order", list(permutations(WORKFLOWS)), ids=lambda order: " | ".join(order))
async def test_each_workflow_pays_what_it_would_pay_alone_whichever_ran_first(order: tuple[str, ...]) -> None:
    expected = {dsl: await alone(dsl) for dsl in WORKFLOWS}
    assert len({tokens for tokens, _ in expected.values()}) == 3, "the three batchings cost differently"
    charged, requests = await costs(order, "charged")
    assert charged == expected
    _, unshared = await costs(order, "workflow")
    assert requests < unshared, "the shared draws were made once"


@pytest.mark.parametrize("first", ["passes", "redraw"])
async def test_redraw_and_passes_share_the_greedy_draw_and_each_pays_it(first: str) -> None:
    """`redraw` caps the greedy draw's re-asks; an accepted first reply is the same call under both rules, so it
    is made once, whichever rule asks first, and charged to each (`NodeCaller.call`)."""
    second = "redraw" if first == "passes" else "passes"
    order = tuple(f"Programmer{{8|{rule}}} -> ScEnsemble" for rule in (first, second))
    expected = {dsl: await alone(dsl) for dsl in order}
    charged, requests = await costs(order, "charged")
    assert charged == expected
    _, unshared = await costs(order, "workflow")
    assert 2 * requests == unshared, "every call, the greedy one included, was made once"


UNUSABLE = "I cannot write that."  # no program: every draw fails to load, the greedy one after its re-asks


@pytest.mark.parametrize("order", list(permutations(WORKFLOWS[:2])), ids=lambda order: " | ".join(order))
async def test_a_failed_draw_is_made_once_and_each_workflow_pays_it(order: tuple[str, ...]) -> None:
    """A failure that is the executor's answer (not an outage) is a result like any other: recomputing it
    for the next workflow would cost executor time and could judge the workflows on different draws."""
    expected = {dsl: await alone(dsl, UNUSABLE, "failed") for dsl in order}
    charged, requests = await costs(order, "charged", UNUSABLE, "failed")
    assert charged == expected
    _, unshared = await costs(order, "workflow", UNUSABLE, "failed")
    assert 2 * requests == unshared, "every failed draw, the greedy one with its re-asks included, was made once"


async def test_an_outage_is_not_memoised_the_next_workflow_calls_again() -> None:
    registry = default_registry()
    replies: list[str | BaseException] = [BackendError("connection refused", retryable=False), WRONG]

    def rule(request: ChatRequest) -> str | BaseException:
        return replies.pop(0) if len(replies) > 1 else replies[0]

    backend = ScriptedBackend(rules=[rule])
    engine = WorkflowEngine(registry, backend, sampled_reasks=0, memo_scope="charged")
    graph = import_dsl("Programmer", CanvasRules(registry, CanvasOptions(finish="relaxed")))
    outcomes = []
    for number in range(2):
        scope = RUN_SCOPE.set(f"workflow-{number}")
        try:
            outcomes.append((await engine.run(graph, TASK)).status)
        finally:
            RUN_SCOPE.reset(scope)
    assert outcomes == ["failed", "ok"]
    assert len(backend.requests) == 2
