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


async def costs(order: tuple[str, ...], memo_scope: MemoScope) -> tuple[dict[str, tuple[int, int]], int]:
    """(tokens, LLM calls) of each workflow run in `order` on one engine, and the requests the executor got."""
    registry = default_registry()
    backend = ScriptedBackend(rules=[lambda request: WRONG])
    engine = WorkflowEngine(registry, backend, sampled_reasks=0, memo_scope=memo_scope)
    seen: dict[str, tuple[int, int]] = {}
    for number, dsl in enumerate(order):
        graph = import_dsl(dsl, CanvasRules(registry, CanvasOptions(finish="relaxed")))
        scope = RUN_SCOPE.set(f"workflow-{number}")
        try:
            report = await engine.run(graph, TASK)
        finally:
            RUN_SCOPE.reset(scope)
        assert report.status == "ok", report.error
        seen[dsl] = (report.tokens, report.llm_calls)
    return seen, len(backend.requests)


async def alone(dsl: str) -> tuple[int, int]:
    seen, _ = await costs((dsl,), "workflow")
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
