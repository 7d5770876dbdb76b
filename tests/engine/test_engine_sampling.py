"""Sampling in the engine: greedy first draws, seeded samples, `samples: k` nodes, memo keys, shared `n`."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.model import OperatorNode, ParallelStage, WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.engine import WorkflowEngine
from flowsteer_mcp.engine.context import CallPosition, RunContext, planned_total
from flowsteer_mcp.engine.memo import memo_key
from flowsteer_mcp.engine.node_call import CallSettings, derived_seed, draw_for
from flowsteer_mcp.engine.stages import branch_draws
from operators.backends.base import GREEDY, BackendError, ChatMessage, ChatRequest, ChatResponse, DrawSettings
from operators.backends.openai_compat import OpenAICompatBackend
from operators.backends.scripted import ScriptedBackend
from operators.backends.shared_prompt import SharedPromptBatch
from operators.base import Category, Operator, OperatorInput, OperatorOutput, OperatorRuntime, OperatorSpec, Role
from operators.library._dialogue import Failure, ask
from operators.parsing import ReplyError
from tests.engine.doubles import Recorder, build_registry, loop, op
from tests.support.openai_stub import OpenAIStub

TASK = TaskSpec(problem="What is 2 + 2?", task_type="math")


class SampleEchoDouble(Operator):
    """SOLUTION through the real request path (`ask`): answers with whatever the backend replied."""

    spec = OperatorSpec(
        name="SampleEchoDouble",
        category=Category.SOLVING,
        role=Role.SOLUTION,
        summary="test double",
        when_to_use="tests only",
        signature="SampleEchoDouble(problem) -> {text}",
    )

    def check(self, text: str) -> None:
        """Raise `ReplyError` for a reply the operator cannot use; this one takes any."""

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
        async def accept(text: str) -> str:
            self.check(text)
            return text

        reply = await ask(runtime, self.spec, inputs.problem, accept, reply_format=None)
        if isinstance(reply, Failure):
            return reply.as_output(OperatorOutput)
        return OperatorOutput(text=reply)


def echo_draw(request: ChatRequest) -> str:
    draw = request.draw or GREEDY
    return f"t={draw.temperature:g} seed={draw.seed}"


class LoopingBackendDouble(ScriptedBackend):
    """A backend without `n` support: `complete_many` is hidden, so samples are separate calls."""

    complete_many = None  # type: ignore[assignment]


def engine_over(backend: ScriptedBackend) -> WorkflowEngine:
    registry = build_registry(Recorder())
    registry.register(SampleEchoDouble)
    return WorkflowEngine(registry, backend)


def sampled(node_id: str, k: int) -> OperatorNode:
    return OperatorNode(id=node_id, operator="SampleEchoDouble", samples=k)


def draws_of(report_trace: list[NodeTrace], node_id: str) -> list[str]:
    return [row.output for row in report_trace if row.node_id == node_id]


async def test_a_node_with_samples_yields_k_candidates_greedy_first() -> None:
    backend = ScriptedBackend(rules=[echo_draw])
    engine = engine_over(backend)
    graph = WorkflowGraph(stages=[sampled("node_1", 3), op("node_2", "FakeEnsemble", "pick:2")])
    report = await engine.run(graph, TASK)

    assert report.status == "ok"
    outputs = draws_of(report.trace, "node_1")
    assert outputs[0] == "t=0 seed=None"  # draw 1 is greedy: sampling never removes the greedy answer
    assert all(text.startswith("t=0.8 ") for text in outputs[1:])
    assert len(set(outputs)) == 3  # distinct seeds, distinct samples
    assert report.output == outputs[2]  # the ensemble saw all three as candidates
    notes = [row.note for row in report.trace if row.node_id == "node_1"]
    assert notes[0] == "draw 1 of 3: greedy" and notes[1] is not None and "seed" in notes[1]


async def test_without_an_ensemble_the_greedy_draw_is_the_solution() -> None:
    engine = engine_over(ScriptedBackend(rules=[echo_draw]))
    report = await engine.run(WorkflowGraph(stages=[sampled("node_1", 4)]), TASK)
    assert report.status == "ok" and report.output == "t=0 seed=None"


async def test_sampled_draws_share_one_n_request_where_the_backend_supports_it() -> None:
    backend = ScriptedBackend(rules=[echo_draw])
    report = await engine_over(backend).run(WorkflowGraph(stages=[sampled("node_1", 4)]), TASK)
    assert report.status == "ok"
    assert [n for _, n in backend.batches] == [3]  # k - 1 sampled draws, one request
    assert len(set(draws_of(report.trace, "node_1"))) == 4


async def test_without_n_support_each_sample_is_its_own_call_with_its_own_seed() -> None:
    backend = LoopingBackendDouble(rules=[echo_draw])
    report = await engine_over(backend).run(WorkflowGraph(stages=[sampled("node_1", 3)]), TASK)
    assert report.status == "ok"
    assert backend.batches == [] and len(backend.requests) == 3
    seeds = sorted((r.draw.seed for r in backend.requests if r.draw is not None), key=lambda s: s or -1)
    assert seeds == sorted([None, derived_seed(0, "node_1", 1), derived_seed(0, "node_1", 2)], key=lambda s: s or -1)


async def test_seeds_are_deterministic_across_engines() -> None:
    first = await engine_over(ScriptedBackend(rules=[echo_draw])).run(WorkflowGraph(stages=[sampled("n", 3)]), TASK)
    second = await engine_over(ScriptedBackend(rules=[echo_draw])).run(WorkflowGraph(stages=[sampled("n", 3)]), TASK)
    assert draws_of(first.trace, "n") == draws_of(second.trace, "n")


async def test_the_workflow_seed_and_sampling_settings_are_engine_options() -> None:
    graph = WorkflowGraph(stages=[sampled("n", 2)])
    backend = ScriptedBackend(rules=[echo_draw])
    registry = build_registry(Recorder())
    registry.register(SampleEchoDouble)
    seeded = WorkflowEngine(registry, backend, memo=None, seed=7, sample_temperature=0.5)
    draws = draws_of((await seeded.run(graph, TASK)).trace, "n")
    assert draws == ["t=0 seed=None", f"t=0.5 seed={derived_seed(7, 'n', 1)}"]
    with pytest.raises(ValueError, match="temperature"):
        WorkflowEngine(registry, backend, sample_temperature=0.0)


def test_seeds_depend_on_workflow_seed_node_and_draw() -> None:
    base = CallSettings(call_timeout_s=None, max_reasks=0, runtime_options={})
    other = CallSettings(call_timeout_s=None, max_reasks=0, runtime_options={}, seed=7)
    assert draw_for(base, "node_1", 0) == GREEDY and draw_for(other, "node_1", 0) == GREEDY
    seeds = {draw_for(s, node, i).seed for s in (base, other) for node in ("node_1", "node_2") for i in (1, 2, 3)}
    assert len(seeds) == 12
    assert draw_for(base, "node_1", 2) == draw_for(base, "node_1", 2)
    assert draw_for(base, "node_1", 1).temperature == 0.8 and draw_for(base, "node_1", 1).top_p == 0.95


async def test_repeated_operator_in_a_parallel_stage_draws_a_sample() -> None:
    engine = engine_over(ScriptedBackend(rules=[echo_draw]))
    stage = ParallelStage(
        id="node_1",
        branches=[
            OperatorNode(id="node_2", operator="SampleEchoDouble"),
            OperatorNode(id="node_3", operator="SampleEchoDouble"),
        ],
    )
    report = await engine.run(WorkflowGraph(stages=[stage, op("node_4", "FakeEnsemble", "pick:1")]), TASK)
    first, second = draws_of(report.trace, "node_2"), draws_of(report.trace, "node_3")
    assert first == ["t=0 seed=None"]
    assert second == [f"t=0.8 seed={derived_seed(0, 'node_3', 1)}"]
    assert report.output == second[0]


def test_branch_draw_plan() -> None:
    branches = [
        OperatorNode(id="a", operator="X", samples=2),
        OperatorNode(id="b", operator="Y"),
        OperatorNode(id="c", operator="X", samples=2),
    ]
    assert branch_draws(branches) == [[0, 1], [0], [1, 2]]


async def test_greedy_draws_are_memoised_and_samples_reused_only_as_the_same_draw() -> None:
    backend = ScriptedBackend(rules=[echo_draw])
    engine = engine_over(backend)
    graph = WorkflowGraph(stages=[sampled("node_1", 3)])
    first = await engine.run(graph, TASK)
    calls = len(backend.requests)
    second = await engine.run(graph, TASK)
    assert [row.cached for row in second.trace] == [True, True, True]  # the same draws, the same results
    assert len(backend.requests) == calls
    assert draws_of(first.trace, "node_1") == draws_of(second.trace, "node_1")


def test_memo_key_includes_the_draw() -> None:
    common: dict[str, Any] = {
        "node_id": "node_1",
        "operator": "Custom",
        "prompt": None,
        "inputs": OperatorInput(problem="p"),
        "iteration": None,
        "backend_key": "b",
        "settings": {},
    }
    greedy_a = memo_key(**common, draw=GREEDY)
    greedy_b = memo_key(**common, draw=DrawSettings())
    sample_1 = memo_key(**common, draw=DrawSettings(temperature=0.8, top_p=0.95, seed=1))
    sample_2 = memo_key(**common, draw=DrawSettings(temperature=0.8, top_p=0.95, seed=2))
    hotter = memo_key(**common, draw=DrawSettings(temperature=1.0, top_p=0.95, seed=1))
    assert greedy_a == greedy_b
    assert len({greedy_a, sample_1, sample_2, hotter}) == 4


async def test_samples_inside_a_loop_run_the_greedy_draw_only() -> None:
    backend = ScriptedBackend(rules=[echo_draw])
    stage = loop("node_1", 1, ("SampleEchoDouble", None))
    stage.body[0].samples = 3
    report = await engine_over(backend).run(WorkflowGraph(stages=[stage]), TASK)
    assert report.output == "t=0 seed=None" and len(backend.requests) == 1


# -- the shared-prompt batch on its own --------------------------------------------------------------------


def request(seed: int, text: str = "same prompt") -> ChatRequest:
    return ChatRequest(messages=[ChatMessage(role="user", content=text)], draw=DrawSettings(temperature=0.8, seed=seed))


async def test_batch_waits_for_members_that_finish_without_asking() -> None:
    backend = ScriptedBackend(rules=[echo_draw])
    batch = SharedPromptBatch(backend, 3)
    members = [batch.member() for _ in range(3)]
    replies: list[ChatResponse] = []

    async def asks(index: int) -> None:
        replies.append(await members[index].complete(request(index + 10)))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(asks, 0)
            group.start_soon(asks, 1)
            await anyio.lowlevel.checkpoint()
            members[2].finished()  # e.g. an operator that failed before calling the model
    assert batch.shared_requests == 1 and [n for _, n in backend.batches] == [2]
    assert len(replies) == 2


async def test_batch_sends_different_prompts_separately() -> None:
    backend = ScriptedBackend(rules=[echo_draw])
    batch = SharedPromptBatch(backend, 2)
    members = [batch.member() for _ in range(2)]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(members[0].complete, request(1, "one"))
            group.start_soon(members[1].complete, request(2, "two"))
    assert batch.shared_requests == 0 and backend.batches == [] and len(backend.requests) == 2


async def test_batch_failure_reaches_every_member() -> None:
    backend = ScriptedBackend(rules=[lambda r: BackendError("server down")])
    batch = SharedPromptBatch(backend, 2)
    members = [batch.member() for _ in range(2)]
    errors: list[str] = []

    async def asks(index: int) -> None:
        try:
            await members[index].complete(request(index))
        except BackendError as exc:
            errors.append(str(exc))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(asks, 0)
            group.start_soon(asks, 1)
    assert errors == ["server down", "server down"]


async def test_later_requests_of_a_member_go_straight_to_the_backend() -> None:
    backend = ScriptedBackend(rules=[echo_draw])
    batch = SharedPromptBatch(backend, 1)
    member = batch.member()
    await member.complete(request(1))
    await member.complete(request(1, "a re-ask"))
    assert backend.batches == [] and len(backend.requests) == 2


@pytest.mark.parametrize("k", [2, 5])
async def test_trace_counts_one_row_per_draw(k: int) -> None:
    report = await engine_over(ScriptedBackend(rules=[echo_draw])).run(WorkflowGraph(stages=[sampled("n", k)]), TASK)
    assert len([row for row in report.trace if row.node_id == "n"]) == k


async def test_raising_samples_reuses_the_draws_already_made() -> None:
    backend = ScriptedBackend(rules=[echo_draw])
    engine = engine_over(backend)
    await engine.run(WorkflowGraph(stages=[sampled("node_1", 2)]), TASK)
    report = await engine.run(WorkflowGraph(stages=[sampled("node_1", 4)]), TASK)
    assert [row.cached for row in report.trace] == [True, True, False, False]
    assert len(set(draws_of(report.trace, "node_1"))) == 4


async def test_samples_over_an_openai_compatible_server_send_one_n_request() -> None:
    with OpenAIStub() as stub:
        backend = OpenAICompatBackend(base_url=stub.base_url, model="stub-model", timeout_s=5.0)
        registry = build_registry(Recorder())
        registry.register(SampleEchoDouble)
        try:
            report = await WorkflowEngine(registry, backend).run(WorkflowGraph(stages=[sampled("node_1", 4)]), TASK)
        finally:
            await backend.aclose()
        bodies = sorted((r.body for r in stub.chat_requests), key=lambda body: body.get("n", 1))
    assert report.status == "ok"
    assert [body.get("n", 1) for body in bodies] == [1, 3]  # the greedy draw, then k - 1 samples in one request
    assert bodies[0]["temperature"] == 0.0 and "seed" not in bodies[0]
    assert bodies[1]["temperature"] == 0.8 and bodies[1]["top_p"] == 0.95 and isinstance(bodies[1]["seed"], int)
    assert len(set(draws_of(report.trace, "node_1"))) == 4


async def test_llm_calls_count_requests_sent_so_a_shared_n_request_counts_once() -> None:
    shared = ScriptedBackend(rules=[echo_draw])
    looped = LoopingBackendDouble(rules=[echo_draw])
    batched = await engine_over(shared).run(WorkflowGraph(stages=[sampled("node_1", 4)]), TASK)
    separate = await engine_over(looped).run(WorkflowGraph(stages=[sampled("node_1", 4)]), TASK)
    assert separate.llm_calls == 4
    assert batched.llm_calls == 2  # the greedy draw plus one request with n = 3
    assert sorted(row.llm_calls for row in batched.trace) == [0, 0, 1, 1]


async def test_a_node_stays_in_flight_until_its_last_draw_finishes() -> None:
    ctx = RunContext(progress=None, total=3)
    node = sampled("node_1", 3)
    draws = [CallPosition(draw=index, draws=3) for index in range(3)]
    for draw in draws:
        await ctx.node_started(node, draw)
    await ctx.node_finished(node, draws[0])
    await ctx.node_finished(node, draws[2])
    assert ctx.in_flight == {"node_1": "SampleEchoDouble"}
    await ctx.node_finished(node, draws[1])
    assert ctx.in_flight == {} and ctx.completed == 3


def test_planned_calls_count_samples() -> None:
    stage = ParallelStage(id="node_2", branches=[sampled("node_2_p0", 3), op("node_2_p1", "FakeSolver")])
    assert planned_total(WorkflowGraph(stages=[sampled("node_1", 4), stage])) == 8


class PickyEchoDouble(SampleEchoDouble):
    """SampleEchoDouble that rejects a reply starting with "broken", so the engine's re-ask budget shows."""

    spec = SampleEchoDouble.spec.model_copy(update={"name": "PickyEchoDouble"})

    def check(self, text: str) -> None:
        if text.startswith("broken"):
            raise ReplyError("the reply is broken")


def broken_until_reasked(request: ChatRequest) -> str:
    """The first reply of every draw is unusable; the reply to a re-ask (more than one user turn) is fine."""
    reasked = sum(message.role == "user" for message in request.messages) > 1
    return f"fixed {echo_draw(request)}" if reasked else "broken"


@pytest.mark.parametrize(("sampled_reasks", "usable_draws", "requests"), [(None, 4, 1 + 1 + 1 + 3), (0, 1, 1 + 1 + 1)])
async def test_sampled_draws_can_be_dropped_instead_of_repaired(
    sampled_reasks: int | None, usable_draws: int, requests: int
) -> None:
    backend = ScriptedBackend(rules=[broken_until_reasked])
    registry = build_registry(Recorder())
    registry.register(PickyEchoDouble)
    engine = WorkflowEngine(registry, backend, memo=None, max_reasks=2, sampled_reasks=sampled_reasks)
    graph = WorkflowGraph(stages=[OperatorNode(id="node_1", operator="PickyEchoDouble", samples=4)])
    report = await engine.run(graph, TASK)

    rows = [row for row in report.trace if row.node_id == "node_1"]
    assert rows[0].ok and rows[0].output == "fixed t=0 seed=None"  # the greedy draw keeps its re-asks
    assert sum(row.ok for row in rows) == usable_draws
    assert all("no usable reply after 1 attempt" in (row.error or "") for row in rows if not row.ok)
    # greedy first reply + its re-ask + one n=3 request for the samples (+ one re-ask per sample when allowed)
    assert report.llm_calls == requests and [n for _, n in backend.batches] == [3]
    assert report.output == "fixed t=0 seed=None"


def test_the_re_ask_budget_per_draw_and_its_memo_fingerprint() -> None:
    lean = CallSettings(call_timeout_s=None, max_reasks=2, runtime_options={}, sampled_reasks=0)
    full = CallSettings(call_timeout_s=None, max_reasks=2, runtime_options={})
    sample = DrawSettings(temperature=0.8, top_p=0.95, seed=1)
    assert (lean.reasks_for(GREEDY), lean.reasks_for(sample)) == (2, 0)
    assert (full.reasks_for(GREEDY), full.reasks_for(sample)) == (2, 2)
    assert lean.fingerprint() != full.fingerprint()  # a result computed under one budget is not the other's
    with pytest.raises(ValueError, match="sampled_reasks"):
        WorkflowEngine(build_registry(Recorder()), ScriptedBackend(rules=[echo_draw]), sampled_reasks=-1)
