"""The evaluation runner with test-double directors against a real in-memory MCP server and the real scorer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from mcp import Client

from flowsteer_mcp.canvas.execution import NoRunner
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult
from flowsteer_mcp.director.graded import ItemResult
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.app import FlowSteerServer
from flowsteer_mcp.store.memory import MemoryStore
from operators.sandbox import SandboxRefusedError
from training.data import Problem, load_problems
from training.evaluate import aggregate, evaluate, task_for
from training.scoring import ScoreResult

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@dataclass
class ActivityGauge:
    """Counts episodes in flight across every double that shares it."""

    active: int = 0
    peak: int = 0


@dataclass
class CannedAnswerDirector:
    """Test double for a director: creates a real workflow on the server, then answers from `answer(task)`.

    `hold_s` keeps the episode open (to make overlap observable); `raise_on` makes episodes whose problem
    text contains that string raise, like a director bug.
    """

    name: str
    answer: Callable[[TaskSpec], str | None]
    gauge: ActivityGauge = field(default_factory=ActivityGauge)
    hold_s: float = 0.0
    raise_on: str | None = None
    seen: list[TaskSpec] = field(default_factory=list)

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        self.seen.append(task)
        self.gauge.active += 1
        self.gauge.peak = max(self.gauge.peak, self.gauge.active)
        try:
            created = await client.call_tool("create_workflow", {"task": task.problem, "task_type": task.task_type})
            assert created.structured_content is not None
            if self.hold_s:
                await anyio.sleep(self.hold_s)
            if self.raise_on is not None and self.raise_on in task.problem:
                raise RuntimeError("director crashed on purpose")
            return EpisodeResult(
                director=self.name,
                task=task,
                workflow_id=created.structured_content["workflow_id"],
                answer=self.answer(task),
                dsl="Custom",
                finished=True,
                turns=2,
                llm_calls=3,
                tokens=100,
            )
        finally:
            self.gauge.active -= 1


def toy_problems(count: int) -> list[Problem]:
    return [
        Problem(id=f"toy/{i}", source="toy", problem_type="math", problem=f"What is {i} + 1?", ground_truth=str(i + 1))
        for i in range(count)
    ]


def right_answer(task: TaskSpec) -> str:
    number = int(task.problem.split()[2])
    return f"The sum is {number + 1}. Final answer: {number + 1}"


@pytest.fixture(scope="module")
def server() -> FlowSteerServer:
    return build_server(ServerSettings(), runner=NoRunner(), store=MemoryStore())


@pytest.fixture
async def app(server: FlowSteerServer) -> AsyncIterator[FlowSteerServer]:
    yield server
    for record in await server.bench.list():
        await server.bench.delete(record.workflow_id)


def client_factory(app: FlowSteerServer) -> Callable[[], Client]:
    return lambda: Client(app.mcp)


async def test_concurrency_bound_is_honoured_across_directors(app: FlowSteerServer) -> None:
    gauge = ActivityGauge()
    directors = [
        CannedAnswerDirector("a", right_answer, gauge=gauge, hold_s=0.05),
        CannedAnswerDirector("b", right_answer, gauge=gauge, hold_s=0.05),
    ]
    report = await evaluate(toy_problems(6), directors, make_client=client_factory(app), concurrency=3, progress=False)
    assert gauge.peak == 3  # reached, never exceeded
    assert len(report.items) == 12
    # schedule order: for each problem, each director
    assert [(i.problem_id, i.director) for i in report.items[:4]] == [
        ("toy/0", "a"),
        ("toy/0", "b"),
        ("toy/1", "a"),
        ("toy/1", "b"),
    ]
    assert all(item.score == 1.0 and item.correct for item in report.items)


async def test_graded_pairs_are_reused_and_new_items_are_announced(app: FlowSteerServer) -> None:
    problems = toy_problems(3)
    earlier = ItemResult(
        director="a", problem_id="toy/1", source="toy", problem_type="math", answer="2", score=1.0, wall_s=123.0
    )
    director = CannedAnswerDirector("a", right_answer)
    announced: list[ItemResult] = []
    report = await evaluate(
        problems,
        [director],
        make_client=client_factory(app),
        concurrency=2,
        progress=False,
        done=[earlier],
        on_item=announced.append,
    )
    assert sorted(task.problem for task in director.seen) == ["What is 0 + 1?", "What is 2 + 1?"]
    assert [item.problem_id for item in report.items] == ["toy/0", "toy/1", "toy/2"]  # schedule order kept
    assert report.items[1] is earlier and report.resumed_items == 1
    assert sorted(item.problem_id for item in announced) == ["toy/0", "toy/2"]


async def test_a_crashing_episode_is_recorded_and_the_run_continues(app: FlowSteerServer) -> None:
    director = CannedAnswerDirector("fragile", right_answer, raise_on="What is 2 ")
    report = await evaluate(toy_problems(4), [director], make_client=client_factory(app), concurrency=2, progress=False)
    by_id = {item.problem_id: item for item in report.items}
    crashed = by_id["toy/2"]
    assert crashed.error == "RuntimeError: director crashed on purpose"
    assert crashed.score == 0.0 and not crashed.correct and crashed.failed
    assert crashed.score_method == "episode_error" and crashed.run_failure
    assert not any(by_id[f"toy/{i}"].run_failure for i in (0, 1, 3))
    assert [by_id[f"toy/{i}"].score for i in (0, 1, 3)] == [1.0, 1.0, 1.0]
    cell = aggregate(report)[0]
    assert (cell.failures, cell.n, cell.score_mean) == (1, 4, 0.75)


async def test_episode_time_limit_becomes_an_error_value(app: FlowSteerServer) -> None:
    slow = CannedAnswerDirector("slow", right_answer, hold_s=5.0)
    report = await evaluate(
        toy_problems(2), [slow], make_client=client_factory(app), concurrency=2, progress=False, episode_timeout_s=0.2
    )
    assert all(item.error and "time limit of 0.2 s" in item.error for item in report.items)
    assert all(item.score == 0.0 for item in report.items)
    # the user's limit is an outcome of the director, scored like a wrong answer, not a failure of the run
    assert all(item.score_method == "episode_timeout" and not item.run_failure for item in report.items)


async def test_a_resumed_run_tries_its_run_failures_again(app: FlowSteerServer) -> None:
    first = await evaluate(
        toy_problems(2),
        [CannedAnswerDirector("d", right_answer, raise_on="What is 1 ")],
        make_client=client_factory(app),
        concurrency=1,
        progress=False,
    )
    assert [item.run_failure for item in first.items] == [False, True]
    director = CannedAnswerDirector("d", right_answer)
    second = await evaluate(
        toy_problems(2), [director], make_client=client_factory(app), concurrency=1, progress=False, done=first.items
    )
    assert [task.problem for task in director.seen] == ["What is 1 + 1?"]  # the graded one is kept
    assert second.items[0] is first.items[0] and second.resumed_items == 1
    assert second.items[1].score == 1.0 and not second.items[1].run_failure


async def test_workflows_are_deleted_after_their_episode(app: FlowSteerServer) -> None:
    director = CannedAnswerDirector("tidy", right_answer)
    report = await evaluate(toy_problems(3), [director], make_client=client_factory(app), concurrency=3, progress=False)
    assert all(item.workflow_id for item in report.items)
    assert await app.bench.list() == []


async def test_no_answer_is_a_failure_scored_by_the_real_scorer(app: FlowSteerServer) -> None:
    silent = CannedAnswerDirector("silent", lambda task: None)
    report = await evaluate(toy_problems(1), [silent], make_client=client_factory(app), concurrency=1, progress=False)
    item = report.items[0]
    assert item.failed and item.error is None
    assert item.score == 0.0 and item.score_method != "episode_error"


async def test_a_scorer_crash_is_an_error_value(app: FlowSteerServer) -> None:
    async def broken_scorer(problem: Problem, answer: str | None) -> ScoreResult:
        raise OSError("sandbox unavailable")

    director = CannedAnswerDirector("d", right_answer)
    report = await evaluate(
        toy_problems(2),
        [director],
        make_client=client_factory(app),
        concurrency=2,
        progress=False,
        score_fn=broken_scorer,
    )
    assert all(item.error == "scoring failed: OSError: sandbox unavailable" for item in report.items)
    assert all(item.score == 0.0 and item.answer for item in report.items)
    assert all(item.run_failure for item in report.items)


async def test_a_sandbox_refusal_stops_the_evaluation_instead_of_scoring_zero(app: FlowSteerServer) -> None:
    async def refusing_scorer(problem: Problem, answer: str | None) -> ScoreResult:
        raise SandboxRefusedError("no isolation here: apt-get install bubblewrap")

    director = CannedAnswerDirector("d", right_answer)
    with pytest.raises(BaseException) as raised:
        await evaluate(
            toy_problems(2),
            [director],
            make_client=client_factory(app),
            concurrency=1,
            progress=False,
            score_fn=refusing_scorer,
        )
    leaves = raised.value.exceptions if isinstance(raised.value, BaseExceptionGroup) else [raised.value]
    assert any(isinstance(leaf, SandboxRefusedError) for leaf in leaves)


async def test_invalid_arguments_are_rejected(app: FlowSteerServer) -> None:
    twins = [CannedAnswerDirector("same", right_answer), CannedAnswerDirector("same", right_answer)]
    with pytest.raises(ValueError, match="repeated: same"):
        await evaluate(toy_problems(1), twins, make_client=client_factory(app), concurrency=1, progress=False)
    with pytest.raises(ValueError, match="concurrency"):
        await evaluate(toy_problems(1), twins[:1], make_client=client_factory(app), concurrency=0, progress=False)


def test_task_for_passes_public_tests_and_never_hidden_ones() -> None:
    problem = Problem(
        id="code/1",
        source="mbpp",
        problem_type="code",
        problem="Write add(a, b).",
        ground_truth="def add(a, b):\n    return a + b",
        meta={"entry_point": "add", "test": "assert add(40, 2) == 42", "public_tests": "assert add(1, 2) == 3"},
    )
    task = task_for(problem)
    assert task == TaskSpec(
        problem="Write add(a, b).", task_type="code", entry_point="add", public_tests="assert add(1, 2) == 3"
    )
    assert "42" not in task.model_dump_json()
    qa = Problem(id="q/1", source="nq", problem_type="qa", problem="Who?", ground_truth="Ada | Ada Lovelace")
    assert task_for(qa) == TaskSpec(problem="Who?", task_type="qa")


async def test_real_gsm8k_items_are_graded_by_the_one_scorer(app: FlowSteerServer) -> None:
    path = SHARED_DATA / "gsm8k.jsonl"
    if not path.is_file():
        pytest.skip(f"shared benchmark file not found: {path}")
    problems = load_problems(path, limit=3)
    gold = {p.problem: p.ground_truth for p in problems}
    wrong_on = problems[2].problem

    def mostly_right(task: TaskSpec) -> str:
        value = gold[task.problem]
        if task.problem == wrong_on:
            value = str(int(value) + 1)
        return f"Working it out step by step.\n#### {value}"

    def always_wrong(task: TaskSpec) -> str:
        return f"The answer is {int(gold[task.problem]) + 7}."

    directors = [CannedAnswerDirector("mostly-right", mostly_right), CannedAnswerDirector("wrong", always_wrong)]
    report = await evaluate(problems, directors, make_client=client_factory(app), concurrency=4, progress=False)
    scores = {(item.director, item.problem_id): item.score for item in report.items}
    assert [scores[("mostly-right", p.id)] for p in problems] == [1.0, 1.0, 0.0]
    assert [scores[("wrong", p.id)] for p in problems] == [0.0, 0.0, 0.0]
    # the gold never reached a director
    assert all(task.problem in gold for director in directors for task in director.seen)
    cells = {cell.director: cell for cell in aggregate(report)}
    assert cells["mostly-right"].score_mean == pytest.approx(2 / 3)
    assert cells["mostly-right"].ci.method == "wilson"
    assert (cells["wrong"].score_mean, cells["wrong"].ci.low) == (0.0, 0.0)
    first = report.items[0]
    assert (first.source, first.problem_type, first.turns, first.llm_calls, first.tokens) == (
        "gsm8k",
        "math",
        2,
        3,
        100,
    )
