"""Samples with a stopping rule (`until`): the real operators, sandbox and vote on a scripted executor double.

`Programmer{8|tests}` makes one executor call when direct's greedy program passes the public tests and all 8
draws otherwise; `Programmer{8|passes}` draws 1, then 3, then 4, and stops after the first wave holding a
program that passes them; `Custom{8|vote}` stops once the vote is decisive. The DSL, the dialect and validation carry
the rule.
"""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.dsl import parse_dsl
from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.export import import_dsl
from flowsteer_mcp.canvas.kinds.base import DSLSyntaxError
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.engine.node_call import derived_seed
from operators.backends.base import ChatRequest, draw_seed
from operators.backends.scripted import ScriptedBackend
from operators.registry import default_registry
from operators.stopping import STOP_RULES, majority_probability

CODE_TASK = TaskSpec(
    problem="Write add(a, b) that returns the sum of a and b.",
    task_type="code",
    entry_point="add",
    public_tests="assert add(1, 2) == 3\nassert add(0, 0) == 0",
)
MATH_TASK = TaskSpec(problem="What is 6 * 7?", task_type="math")
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"


def greedy(request: ChatRequest) -> bool:
    return request.draw is None or request.draw.greedy


def run(backend: ScriptedBackend, dsl: str, task: TaskSpec):  # type: ignore[no-untyped-def]
    registry = default_registry()
    graph = import_dsl(dsl, CanvasRules(registry, CanvasOptions(finish="relaxed")))
    return WorkflowEngine(registry, backend, sampled_reasks=0).run(graph, task)


async def test_a_greedy_program_that_passes_the_public_tests_stops_after_one_call() -> None:
    backend = ScriptedBackend(rules=[lambda request: RIGHT])
    report = await run(backend, "Programmer{8|tests} -> ScEnsemble", CODE_TASK)
    assert report.status == "ok" and "return a + b" in (report.output or "")
    assert report.llm_calls == 1 and len(backend.requests) == 1
    programmer = [row for row in report.trace if row.node_id == "node_1"]
    assert len(programmer) == 1 and "passes the public tests: no more draws" in (programmer[0].note or "")
    ensemble = next(row for row in report.trace if row.node_id == "node_2")
    assert ensemble.llm_calls == 0, "one candidate: nothing to choose"


async def test_a_failing_greedy_program_draws_the_rest_and_execution_picks() -> None:
    backend = ScriptedBackend(rules=[lambda request: WRONG if greedy(request) else RIGHT])
    report = await run(backend, "Programmer{8|tests} -> ScEnsemble", CODE_TASK)
    programmer = [row for row in report.trace if row.node_id == "node_1"]
    assert len(programmer) == 8
    assert "fails the public tests" in (programmer[0].note or "")
    assert report.status == "ok" and "return a + b" in (report.output or ""), report.output
    sampled_requests = [request for request in backend.requests if not greedy(request)]
    assert len(backend.requests) - len(sampled_requests) >= 1


async def test_a_decisive_vote_stops_after_four_draws_and_an_open_one_draws_all() -> None:
    agreeing = ScriptedBackend(rules=[lambda request: "6 * 7 = 42. The answer is \\boxed{42}."])
    report = await run(agreeing, "Custom{8|vote} -> ScEnsemble", MATH_TASK)
    drawn = [row for row in report.trace if row.node_id == "node_1"]
    assert len(drawn) == 4 and report.output is not None and "42" in report.output
    assert "the vote is decisive: 4 vs 0" in (drawn[-1].note or "")

    def split(request: ChatRequest) -> str:
        seed = request.draw.seed if request.draw and request.draw.seed is not None else 0
        return f"The answer is \\boxed{{{42 if seed % 2 else 41}}}."

    open_vote = ScriptedBackend(rules=[split])
    report = await run(open_vote, "Custom{8|vote} -> ScEnsemble", MATH_TASK)
    assert len([row for row in report.trace if row.node_id == "node_1"]) == 8


def test_the_majority_probability_is_the_beta_tail() -> None:
    assert majority_probability(4, 0) == pytest.approx(31 / 32)
    assert majority_probability(3, 1) == pytest.approx(26 / 32)
    assert majority_probability(1, 0) == pytest.approx(0.75)


def test_the_rule_travels_through_the_dsl_and_is_refused_where_it_cannot_apply() -> None:
    rules = CanvasRules(default_registry(), CanvasOptions())
    (blueprint,) = parse_dsl("Programmer{8|tests}")
    assert blueprint.until == "tests"  # type: ignore[union-attr]
    graph = import_dsl("Custom{8|vote} -> ScEnsemble", rules)
    assert graph.stages[0].until == "vote"  # type: ignore[union-attr]
    with pytest.raises(CanvasError, match="needs samples >= 2"):
        import_dsl("Programmer{1|tests}", rules)
    with pytest.raises(DSLSyntaxError, match="unknown stopping rule 'soon'"):
        parse_dsl("Programmer{8|soon}")
    with pytest.raises(DSLSyntaxError, match="only allowed on an operator stage"):
        parse_dsl("[Programmer{3|tests}, Custom] -> ScEnsemble")


def sample_seed(wave_start: int, member: int) -> int | None:
    """The seed the executor sees for `member` of the `n` request of the wave that starts at draw `wave_start`."""
    return draw_seed(derived_seed(0, "node_1", wave_start), member)


def test_passes_draws_in_waves_of_one_three_and_the_rest() -> None:
    rule = STOP_RULES["passes"]
    assert (
        rule.waves(8) == [1, 3, 4] and rule.waves(4) == [1, 3] and rule.waves(3) == [1, 2] and rule.waves(2) == [1, 1]
    )


@pytest.mark.parametrize(
    ("passing_draw", "calls", "draws"),
    [(None, 3, 8), (0, 1, 1), ((1, 1), 2, 4), ((4, 2), 3, 8)],
    ids=["none-passes", "greedy-passes", "second-wave", "third-wave"],
)
async def test_passes_stops_after_the_first_wave_with_a_passing_program(
    passing_draw: int | tuple[int, int] | None, calls: int, draws: int
) -> None:
    """Requests: the greedy call, one `n` request per later wave; the ensemble picks the passing program.
    `passing_draw`: 0 for the greedy draw, (wave start, member) for a sampled one."""

    def reply(request: ChatRequest) -> str:
        if passing_draw == 0:
            return RIGHT if greedy(request) else WRONG
        seed = request.draw.seed if request.draw is not None else None
        return RIGHT if isinstance(passing_draw, tuple) and seed == sample_seed(*passing_draw) else WRONG

    backend = ScriptedBackend(rules=[reply])
    report = await run(backend, "Programmer{8|passes} -> ScEnsemble", CODE_TASK)
    programmer = [row for row in report.trace if row.node_id == "node_1"]
    assert len(programmer) == draws
    assert sum(row.llm_calls for row in programmer) == calls
    expected = "a - b" if passing_draw is None else "a + b"
    assert expected in (report.output or "")
    if draws < 8:
        assert "passes the public tests: no more draws" in (programmer[-1].note or "")


UNLOADABLE = "```python\ndef add(a, b):\n    return a - b\n\nassert add(1, 2) == 3\n```"  # its own assert fails on load


@pytest.mark.parametrize(("rule", "greedy_requests"), [("passes", 3), ("redraw", 1)])
async def test_redraw_leaves_a_greedy_program_that_fails_to_load_to_the_next_wave(
    rule: str, greedy_requests: int
) -> None:
    """`passes` re-asks a greedy program whose load fails (twice, the engine's default); `redraw` does not: the
    wave of three is its retry. Both then stop at the wave holding the passing program."""
    backend = ScriptedBackend(rules=[lambda request: UNLOADABLE if greedy(request) else RIGHT])
    report = await run(backend, f"Programmer{{8|{rule}}} -> ScEnsemble", CODE_TASK)
    assert len([request for request in backend.requests if greedy(request)]) == greedy_requests
    programmer = [row for row in report.trace if row.node_id == "node_1"]
    assert len(programmer) == 4 and not programmer[0].ok and "loading the code failed" in (programmer[0].error or "")
    assert "passes the public tests: no more draws" in (programmer[-1].note or "")
    assert report.status == "ok" and "return a + b" in (report.output or "")


async def test_redraw_keeps_the_sampled_draws_and_the_greedy_program_that_loads() -> None:
    """Only the greedy draw's re-asks change: a greedy program that loads is judged as under `passes`."""
    for rule in ("passes", "redraw"):
        backend = ScriptedBackend(rules=[lambda request: RIGHT])
        report = await run(backend, f"Programmer{{8|{rule}}} -> ScEnsemble", CODE_TASK)
        assert report.llm_calls == 1 and "return a + b" in (report.output or "")
    assert STOP_RULES["redraw"].waves(8) == STOP_RULES["passes"].waves(8)


async def test_redraw_never_reuses_a_greedy_program_that_a_re_ask_repaired() -> None:
    """The greedy draw's re-asks are part of its memo key: a workflow that runs `redraw` after one that runs
    `passes` on the same task and memo gets the unrepaired outcome, not the repair it did not pay for."""

    def reply(request: ChatRequest) -> str:
        if not greedy(request):
            return WRONG
        return RIGHT if len(request.messages) > 1 else UNLOADABLE  # a re-ask carries the failed exchange

    backend = ScriptedBackend(rules=[reply])
    registry = default_registry()
    engine = WorkflowEngine(registry, backend, sampled_reasks=0)
    rules = CanvasRules(registry, CanvasOptions(finish="relaxed"))
    repaired = await engine.run(import_dsl("Programmer{8|passes} -> ScEnsemble", rules), CODE_TASK)
    assert "return a + b" in (repaired.output or "") and repaired.llm_calls == 2
    redrawn = await engine.run(import_dsl("Programmer{8|redraw} -> ScEnsemble", rules), CODE_TASK)
    greedy_row = next(row for row in redrawn.trace if row.node_id == "node_1")
    assert not greedy_row.ok and not greedy_row.cached
    assert "return a - b" in (redrawn.output or ""), "no draw passes: the ensemble picks among the wrong ones"


async def test_redraw_reuses_a_greedy_program_accepted_at_the_first_reply() -> None:
    """When the greedy draw under the engine's re-asks was accepted without one, `redraw`'s capped draw is the
    same call: a later workflow on the same memo reuses it instead of asking again."""
    backend = ScriptedBackend(rules=[lambda request: RIGHT if greedy(request) else WRONG])
    registry = default_registry()
    engine = WorkflowEngine(registry, backend, sampled_reasks=0)
    rules = CanvasRules(registry, CanvasOptions(finish="relaxed"))
    await engine.run(import_dsl("Programmer{8|passes} -> ScEnsemble", rules), CODE_TASK)
    asked = len(backend.requests)
    redrawn = await engine.run(import_dsl("Programmer{8|redraw} -> ScEnsemble", rules), CODE_TASK)
    assert len(backend.requests) == asked and redrawn.llm_calls == 0
    assert "return a + b" in (redrawn.output or "")
