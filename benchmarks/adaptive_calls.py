"""Executor draws of the adaptive library workflows against their fixed counterparts, on constructed cases.

No LLM: a scripted executor double answers, so the only thing measured is what the stopping rules decide
(operators/stopping.py), with the real operators, the real sandbox and the real vote. The rules say:
- `direct8-tests` (`Programmer{8|tests} -> ScEnsemble`): 1 draw when direct's greedy program passes the
  public tests, 1 + 7 when it fails them; `direct8-exec` always draws 8.
- `direct8-passes` (`Programmer{8|passes} -> ScEnsemble`): 1 draw when the greedy program passes the public
  tests, 1 + 3 when a draw of the second wave does, all 8 when none passes.
- `direct8-redraw` (`Programmer{8|redraw} -> ScEnsemble`): as `direct8-passes`, but a greedy program that fails
  to load is not re-asked: 2 requests (the greedy call and the second wave's) when a draw of the second wave
  passes, where `direct8-passes` also sends the engine's 2 re-asks (4 requests).
- `direct-sc8-vote` (`Custom{8|vote} -> ScEnsemble`): 4 draws when they all agree (the vote is decisive),
  all 8 when the answers split; `direct-sc8` always draws 8.
Each case must pick a right answer and make exactly the draws its rule says; otherwise the benchmark prints
no figure and exits non-zero.

    python benchmarks/adaptive_calls.py        # a few seconds; make bench runs it
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import structlog
from _guard import BenchmarkReport

from flowsteer_mcp.canvas.export import import_json
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.validate import CanvasRules
from flowsteer_mcp.director.library import library_workflow
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.engine.node_call import derived_seed
from operators.backends.base import ChatRequest, draw_seed
from operators.backends.scripted import ScriptedBackend
from operators.registry import default_registry

CODE = TaskSpec(
    problem="Write add(a, b) that returns the sum of a and b.",
    task_type="code",
    entry_point="add",
    public_tests="assert add(1, 2) == 3\nassert add(0, 0) == 0",
)
MATH = TaskSpec(problem="What is 6 * 7?", task_type="math")
# The seed the executor sees for the 2nd sample of an `n` request starting at draw 1 (workflow seed 0): the
# second wave of `passes` (draws 1-3) and direct8-exec's one request (draws 1-7) both hold it.
SECOND_WAVE_PASSER = draw_seed(derived_seed(0, "node_1", 1), 1)
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
UNLOADABLE = "```python\ndef add(a, b):\n    return a - b\n\nassert add(1, 2) == 3\n```"  # its own assert fails


def greedy(request: ChatRequest) -> bool:
    return request.draw is None or request.draw.greedy


def seed_of(request: ChatRequest) -> int:
    return request.draw.seed if request.draw is not None and request.draw.seed is not None else 0


@dataclass(frozen=True)
class Case:
    name: str
    task: TaskSpec
    reply: Callable[[ChatRequest], str]
    adaptive: str  # library entry
    fixed: str
    draws: int  # what the adaptive entry's rule must draw
    answer: str  # a substring of the right final answer
    requests: int | None = None  # executor requests the adaptive entry must make, where the rule says


CASES = (
    Case("greedy program passes the public tests", CODE, lambda r: RIGHT, "direct8-tests", "direct8-exec", 1, "a + b"),
    Case(
        "greedy program fails the public tests",
        CODE,
        lambda r: WRONG if greedy(r) else RIGHT,
        "direct8-tests",
        "direct8-exec",
        8,
        "a + b",
    ),
    Case("greedy program passes (waves)", CODE, lambda r: RIGHT, "direct8-passes", "direct8-exec", 1, "a + b"),
    Case(
        "a draw of the second wave passes",
        CODE,
        lambda r: RIGHT if not greedy(r) and seed_of(r) == SECOND_WAVE_PASSER else WRONG,
        "direct8-passes",
        "direct8-exec",
        4,
        "a + b",
    ),
    Case(
        "no draw passes the public tests",
        CODE,
        lambda r: WRONG,
        "direct8-passes",
        "direct8-exec",
        8,
        "a - b",
    ),
    *(
        Case(
            "greedy program fails to load, 2nd wave passes",
            CODE,
            lambda r: UNLOADABLE if greedy(r) else RIGHT if seed_of(r) == SECOND_WAVE_PASSER else WRONG,
            entry,
            "direct8-exec",
            4,
            "a + b",
            requests=requests,
        )
        for entry, requests in (("direct8-passes", 4), ("direct8-redraw", 2))
    ),
    Case(
        "every answer agrees",
        MATH,
        lambda r: "6 * 7 = 42, so the answer is \\boxed{42}.",
        "direct-sc8-vote",
        "direct-sc8",
        4,
        "42",
    ),
    Case(
        "the answers split",
        MATH,
        lambda r: f"The answer is \\boxed{{{42 if greedy(r) or seed_of(r) % 3 else 41}}}.",
        "direct-sc8-vote",
        "direct-sc8",
        8,
        "42",
    ),
)


async def draws_of(case: Case, entry: str) -> tuple[int, int, str | None]:
    """(draws of the sampled node, executor requests of the run, the answer) for one workflow on one case."""
    registry = default_registry()
    workflow = library_workflow(case.task.task_type, entry)
    graph = import_json(workflow.spec(), CanvasRules(registry, CanvasOptions(finish="relaxed")))
    backend = ScriptedBackend(rules=[case.reply])
    report = await WorkflowEngine(registry, backend, sampled_reasks=0).run(graph, case.task)
    sampled = sum(1 for row in report.trace if row.node_id == "node_1")
    return sampled, report.llm_calls, report.output


async def measure(report: BenchmarkReport) -> None:
    report.line(f"{'case':<48} {'workflow':<16} {'draws':>5} {'requests':>8}   vs fixed {'draws':>5} {'ratio':>6}")
    for case in CASES:
        adaptive = await draws_of(case, case.adaptive)
        fixed = await draws_of(case, case.fixed)
        for label, (_, _, output) in ((case.adaptive, adaptive), (case.fixed, fixed)):
            report.require(output is not None and case.answer in output, f"{case.name}: {label} answered {output!r}")
        report.require(
            adaptive[0] == case.draws, f"{case.name}: {case.adaptive} drew {adaptive[0]}, rule says {case.draws}"
        )
        report.require(
            case.requests is None or adaptive[1] == case.requests,
            f"{case.name}: {case.adaptive} made {adaptive[1]} requests, rule says {case.requests}",
        )
        report.require(fixed[0] == 8, f"{case.name}: {case.fixed} drew {fixed[0]}, not 8")
        report.line(
            f"{case.name:<48} {case.adaptive:<16} {adaptive[0]:>5} {adaptive[1]:>8}   "
            f"{case.fixed:<8} {fixed[0]:>5} {adaptive[0] / fixed[0]:>5.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the same cases (they take a few seconds)")
    parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # keep the table clean
    report = BenchmarkReport("adaptive_calls")
    anyio.run(measure, report)
    report.publish()


if __name__ == "__main__":
    main()
