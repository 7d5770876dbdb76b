"""Grouped asynchronous rollouts through the real in-memory MCP server, with the policy served by the
OpenAI-compatible stub answering like vLLM (token ids and log-probs in every completion)."""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from mcp import Client
from openai import AsyncOpenAI

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult, TurnRecord
from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.link import CanvasCallError, CanvasLink
from flowsteer_mcp.director.policy import PolicyDirector
from flowsteer_mcp.server import build_server
from operators.registry import default_registry
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.scripted_runner import ScriptedRunner
from training.data import Problem
from training.reward import RewardConfig
from training.rollout import (
    EpisodeSample,
    MissingTokenIds,
    RolloutBatch,
    collect_groups,
    in_process_clients,
)
from training.rollout.worker import MakeDirector

REGISTRY = default_registry()
RELEASED = RewardConfig(release=0.0, unfinished_penalty=0.5)  # C always counts: R = -1 + S + C (- 0.5 unfinished)
SAFETY_S = 20.0  # a blocked stub call gives up after this, so a broken scheduler fails instead of hanging


def vllm_body(content: str, prompt_ids: list[int], completion_ids: list[int], logprobs: list[float]) -> bytes:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
        "token_ids": completion_ids,
        "logprobs": {"content": [{"token": f"t{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
                                 for i, lp in zip(completion_ids, logprobs, strict=True)]},
    }  # fmt: skip
    usage = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(completion_ids)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    body = {"id": "chatcmpl-rollout", "object": "chat.completion", "created": int(time.time()), "model": "policy",
            "choices": [choice], "usage": usage, "prompt_token_ids": prompt_ids}  # fmt: skip
    return json.dumps(body).encode()


class ScriptedVllmPolicy:
    """Test double for a vLLM-served Flow-Director: a fixed script chosen by the request's seed, and fresh
    token ids and log-probs in every reply, all remembered so tests can compare samples with them.

    Script: add Custom; on an odd seed also add Format; then finish. Problems containing `[slow]` block their
    first call until `release` is set; problems containing `[hang]` never answer in time.
    """

    def __init__(self, *, token_ids: bool = True) -> None:
        self.token_ids = token_ids
        self.release = threading.Event()
        self.replies: dict[tuple[int, ...], tuple[list[int], list[float]]] = {}  # completion ids -> prompt, logprobs
        self._lock = threading.Lock()
        self._next_id = itertools.count(1000)
        self._slow_seen = False

    def _fresh(self, n: int) -> list[int]:
        return [next(self._next_id) for _ in range(n)]

    def __call__(self, body: dict[str, Any]) -> StubReply:
        messages = body["messages"]
        user = str(messages[-1]["content"])
        if "[hang]" in user:
            return StubReply.hang(SAFETY_S)
        if "[slow]" in user:
            with self._lock:
                first, self._slow_seen = not self._slow_seen, True
            if first:
                self.release.wait(SAFETY_S)
        content = self._script(messages, user, int(body.get("seed") or 0))
        if not self.token_ids:
            return StubReply(content=content)
        with self._lock:
            prompt = self._fresh(3 + len(messages))
            completion = self._fresh(len(content.split()))
            logprobs = [-0.01 * (i + 1) for i in range(len(completion))]
            self.replies[tuple(completion)] = (prompt, logprobs)
        return StubReply(body=vllm_body(content, prompt, completion, logprobs))

    @staticmethod
    def _script(messages: list[dict[str, Any]], user: str, seed: int) -> str:
        if len(messages) == 1:  # a prompt turn (no system prompt)
            return "Compute the value and answer with the number only."
        found = re.search(r"^DSL: (.*)$", user, re.MULTILINE)
        dsl = found.group(1) if found else ""
        if dsl == "(empty)":
            return "<action>add</action><operator>Custom</operator>"
        if seed % 2 == 1 and "Format" not in dsl:
            return "<action>add</action><operator>Format</operator>"
        return "<action>finish</action>"


def problem(pid: str, text: str = "What is 6*7?", source: str = "gsm8k") -> Problem:
    return Problem(id=pid, source=source, problem_type="math", problem=text, ground_truth="42")


def policy_directors(base_url: str) -> MakeDirector:
    client = AsyncOpenAI(base_url=base_url, api_key="not-needed", max_retries=0)

    def make(_: Problem, rollout_index: int) -> PolicyDirector:
        return PolicyDirector(
            client,
            "policy",
            sampling=PolicySampling(seed=rollout_index),
            canvas_options={"finish": "relaxed"},
            registry=REGISTRY,
        )

    return make


async def collect(
    stub: OpenAIStub, problems: list[Problem], *, runner: ScriptedRunner | None = None, **options: Any
) -> RolloutBatch:
    server = build_server(registry=REGISTRY, runner=runner or ScriptedRunner(answer=lambda graph, task: "42"))
    defaults: dict[str, Any] = {"group_size": 1, "concurrency": 4, "timeout_s": 30.0, "reward_config": RELEASED}
    return await collect_groups(
        problems,
        make_director=policy_directors(stub.base_url),
        make_client=in_process_clients(server.mcp),
        **{**defaults, **options},
    )


class RefusedFirstPolicy(ScriptedVllmPolicy):
    """The script above, but an odd seed first asks to delete a node of the empty canvas, which the canvas refuses."""

    @staticmethod
    def _script(messages: list[dict[str, Any]], user: str, seed: int) -> str:
        if seed % 2 == 1 and "DSL: (empty)" in user and "[Status]: Failed" not in user:
            return "<action>delete</action><target>node_9</target>"
        return ScriptedVllmPolicy._script(messages, user, seed)


async def test_a_refused_turn_is_never_reinforced_when_asked() -> None:
    policy = RefusedFirstPolicy()
    with OpenAIStub(responder=policy) as stub:
        batch = await collect(stub, [problem("p0")], group_size=2, advantage_scale="none")
    good = batch.episodes[1]  # odd seed: refused delete, then Custom, Format (S = 0.2 above the even seed's)
    assert good.advantage is not None and good.advantage > 0
    assert [s.refused for s in good.sequences] == [True] + [False] * (len(good.sequences) - 1)
    assert good.metrics.valid_action_share < 1.0
    shared = {(s.episode_id, s.turn_index): a for s, a in batch.training_sequences()}
    never = {(s.episode_id, s.turn_index): a for s, a in batch.training_sequences("never_reinforce")}
    assert shared[(good.episode_id, 0)] == never[(good.episode_id, 1)] == good.advantage
    assert never[(good.episode_id, 0)] == 0.0  # the refused delete did nothing for the outcome
    assert {k: v for k, v in never.items() if k != (good.episode_id, 0)} == {
        k: v for k, v in shared.items() if k != (good.episode_id, 0)
    }


async def test_unscaled_advantages_stay_on_the_reward_scale() -> None:
    policy = ScriptedVllmPolicy()
    with OpenAIStub(responder=policy) as stub:
        batch = await collect(stub, [problem("p0")], group_size=3, advantage_scale="none")
    # rewards (0, 0.2, 0) as below: centred only, so a 0.2 spread gives advantages of 0.2 in size, not sqrt(2)
    assert [e.advantage for e in batch.episodes] == pytest.approx([-0.2 / 3, 0.4 / 3, -0.2 / 3])


async def test_g_rollouts_form_one_group_with_grpo_advantages_and_exact_tokens() -> None:
    policy = ScriptedVllmPolicy()
    with OpenAIStub(responder=policy) as stub:
        batch = await collect(stub, [problem("p0"), problem("p1")], group_size=3)
    assert [e.episode_id for e in batch.episodes] == ["p0#0", "p0#1", "p0#2", "p1#0", "p1#1", "p1#2"]
    assert batch.advantages.n_groups == 2 and batch.advantages.n_zero_variance_groups == 0
    # even seeds build Custom (S = 0), odd seeds Custom + Format (S = 0.2); C = 1 is released by the config
    assert [e.reward.structure for e in batch.episodes] == [0.0, 0.2, 0.0] * 2
    assert [e.reward.total for e in batch.episodes] == pytest.approx([0.0, 0.2, 0.0] * 2)
    mean, std = 0.2 / 3, math.sqrt((2 * (0.2 / 3) ** 2 + (0.4 / 3) ** 2) / 3)
    expected = [(r - mean) / (std + 1e-6) for r in (0.0, 0.2, 0.0)]
    assert [e.advantage for e in batch.episodes] == pytest.approx(expected * 2)
    assert expected[1] == pytest.approx(math.sqrt(2), rel=1e-4)  # the hand value for rewards (0, 0.2, 0)
    for episode in batch.episodes:
        assert episode.metrics.status == "ok" and episode.metrics.finished
        assert episode.metrics.valid_action_share == 1.0
        assert episode.group_id == episode.problem_id
        assert len(episode.sequences) == episode.metrics.turns == (3 if episode.rollout_index % 2 == 0 else 5)
    sequences = batch.training_sequences()
    assert len(sequences) == sum(len(e.sequences) for e in batch.episodes) == len(policy.replies)
    for sequence, advantage in sequences:
        prompt, logprobs = policy.replies[tuple(sequence.completion_ids)]  # exactly what the server returned
        assert sequence.prompt_ids == prompt and sequence.behaviour_logprobs == logprobs
        assert sequence.mask == [0] * len(prompt) + [1] * len(sequence.completion_ids)
        episode = next(e for e in batch.episodes if e.episode_id == sequence.episode_id)
        assert advantage == episode.advantage  # every turn shares its episode's advantage
    summary = batch.summary()
    assert summary["batch/trajectories"] == 6 and summary["reward/total"] == pytest.approx(0.2 / 3)


async def test_the_token_cost_charges_each_rollout_its_executor_tokens() -> None:
    costed = RewardConfig(release=0.0, unfinished_penalty=0.5, executor_token_cost=0.5)
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        batch = await collect(stub, [problem("p0")], group_size=2, reward_config=costed)
    for episode in batch.episodes:
        assert episode.metrics.executor_tokens > 0  # the scripted runner charges every node it runs
        assert episode.reward.token_cost == pytest.approx(-0.5 * episode.metrics.executor_tokens / 1000)
        assert episode.reward.total == pytest.approx(
            episode.reward.base + episode.reward.structure + 1.0 + episode.reward.token_cost
        )


async def test_source_grouping_pools_problems_of_one_source() -> None:
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        batch = await collect(
            stub, [problem("a"), problem("b"), problem("c", source="mbpp_like")], group_size=2, grouping="source"
        )
    assert {e.group_id for e in batch.episodes} == {"gsm8k", "mbpp_like"}
    assert batch.advantages.n_groups == 2
    pooled = [e.advantage or 0.0 for e in batch.episodes if e.group_id == "gsm8k"]
    assert len(pooled) == 4 and sum(pooled) == pytest.approx(0.0, abs=1e-9)


async def test_zero_variance_groups_are_counted_and_optionally_dropped() -> None:
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        batch = await collect(stub, [problem("p0")], group_size=1, drop_zero_variance=True)
    assert batch.advantages.n_zero_variance_groups == 1
    assert batch.episodes[0].advantage == 0.0 and not batch.episodes[0].keep
    assert batch.training_sequences() == []


async def test_a_slow_trajectory_does_not_hold_back_the_others() -> None:
    policy = ScriptedVllmPolicy()
    problems = [problem("slow", "What is 6*7? [slow]"), *(problem(f"fast{i}") for i in range(4))]
    finished: list[str] = []

    def on_episode(episode: EpisodeSample) -> None:
        finished.append(episode.problem_id)
        if len(finished) == 4:  # every fast trajectory is done: only now may the slow one proceed
            policy.release.set()

    try:
        with OpenAIStub(responder=policy) as stub:
            batch = await collect(stub, problems, concurrency=2, on_episode=on_episode)
            peak = stub.max_in_flight
    finally:
        policy.release.set()
    # with a round barrier the fast trajectories would wait for the blocked call and the order would differ
    assert finished == ["fast0", "fast1", "fast2", "fast3", "slow"]
    assert all(e.metrics.status == "ok" for e in batch.episodes)
    assert peak <= 2


async def test_a_trajectory_past_its_time_limit_fails_with_the_base_reward_and_does_not_stall() -> None:
    problems = [problem("hung", "What is 6*7? [hang]"), problem("p1"), problem("p2")]
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        batch = await collect(stub, problems, group_size=2, timeout_s=3.0)
    hung = [e for e in batch.episodes if e.problem_id == "hung"]
    assert batch.n_timeouts == 2 and all(e.metrics.status == "timeout" for e in hung)
    assert all(e.reward.total == -1.5 and e.sequences == [] for e in hung)  # base + unfinished penalty
    assert "time limit of 3.0 s" in (hung[0].metrics.error or "")
    assert all(e.metrics.status == "ok" and e.sequences for e in batch.episodes if e.problem_id != "hung")


async def test_a_policy_server_without_token_ids_is_refused() -> None:
    with (
        OpenAIStub(responder=ScriptedVllmPolicy(token_ids=False)) as stub,
        pytest.raises(MissingTokenIds, match="re-tokenises"),
    ):
        await collect(stub, [problem("p0"), problem("p1")], group_size=2)


async def test_history_mode_drops_and_counts_episodes_whose_prompts_do_not_extend_the_transcript() -> None:
    # today's director rebuilds the observation each turn, so turn 2's prompt ids never extend turn 1's
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        batch = await collect(stub, [problem("p0")], group_size=2, mode="history")
    assert batch.n_prefix_mismatch == 2 and batch.summary()["batch/prefix_mismatch"] == 2
    assert all(e.sequences == [] and e.metrics.dropped == "prefix_mismatch" for e in batch.episodes)
    assert [e.reward.total for e in batch.episodes] == pytest.approx([0.0, 0.2])  # rewards still count
    assert batch.training_sequences() == []


async def test_a_client_that_cannot_connect_fails_only_its_trajectory() -> None:
    server = build_server(registry=REGISTRY, runner=ScriptedRunner(answer=lambda graph, task: "42"))
    calls = itertools.count()

    @asynccontextmanager
    async def broken() -> Any:
        raise ConnectionError("canvas server unreachable")
        yield  # pragma: no cover

    def flaky() -> AbstractAsyncContextManager[Client]:
        return broken() if next(calls) == 0 else Client(server.mcp)

    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        batch = await collect_groups(
            [problem("p0")],
            make_director=policy_directors(stub.base_url),
            make_client=flaky,
            group_size=2,
            concurrency=1,
            reward_config=RELEASED,
        )
    first, second = batch.episodes
    assert first.metrics.status == "error" and "canvas server unreachable" in (first.metrics.error or "")
    assert first.reward.total == -1.5 and second.metrics.status == "ok"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group_size": 0}, "group_size"),
        ({"concurrency": 0}, "concurrency"),
        ({"timeout_s": 0.0}, "timeout_s"),
    ],
)
async def test_bad_arguments_are_rejected_before_anything_runs(options: dict[str, Any], message: str) -> None:
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub, pytest.raises(ValueError, match=message):
        await collect(stub, [problem("p0")], **options)
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub, pytest.raises(ValueError, match="unique"):
        await collect(stub, [problem("p0"), problem("p0")])


async def test_a_workflow_that_runs_but_gives_no_answer_is_an_outcome_not_a_failed_trajectory() -> None:
    """Its structure still earns S and its tokens still train; only C is 0 (the policy built that workflow)."""
    with OpenAIStub(responder=ScriptedVllmPolicy()) as stub:
        batch = await collect(stub, [problem("p0")], group_size=2, runner=ScriptedRunner(failure="node_1 failed"))
    for episode in batch.episodes:
        assert episode.metrics.status == "ok" and episode.metrics.error is None
        assert episode.reward.correctness == 0.0
        assert episode.sequences and episode.trainable
    assert [e.reward.structure for e in batch.episodes] == [0.0, 0.2]


class CanvasFailingDirector:
    """Test double for a director whose canvas call fails mid-episode: it plays one real turn (add Custom, with
    token ids as the policy server would return them), then `act`s on a workflow the server does not know and
    records the `CanvasCallError` in `error`, as `PolicyDirector` and `ScriptedDirector` do."""

    name = "canvas-failing"

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        link = CanvasLink(client)
        result = EpisodeResult(director=self.name, task=task)
        try:
            created = await link.create(task, {"finish": "relaxed", "prompt_turns": False})
            sent = "<action>add</action><operator>Custom</operator>"
            step = await link.call("act", workflow_id=created["workflow_id"], text=sent)
            turn = TurnRecord(round=step["state"]["round"], kind="action", system=created["system_prompt"],
                              prompt="observation", completion=sent, sent=sent, prompt_token_ids=[1, 2, 3],
                              completion_token_ids=[4, 5], completion_logprobs=[-0.1, -0.2], ok=bool(step["ok"]))  # fmt: skip
            result.records.append(turn)
            await link.call("act", workflow_id="wf_unknown", text="<action>finish</action>")
        except CanvasCallError as error:
            result = result.model_copy(update={"error": str(error)})
        return result


async def test_an_episode_whose_director_hit_a_canvas_call_error_is_a_failed_trajectory() -> None:
    """The canvas could not be driven to the end: no workflow to reward, so the trajectory fails like a crashed
    client (base reward minus the unfinished penalty, no training tokens) instead of being trained as ok."""
    server = build_server(registry=REGISTRY, runner=ScriptedRunner(answer=lambda graph, task: "42"))
    batch = await collect_groups(
        [problem("p0")],
        make_director=lambda _problem, _index: CanvasFailingDirector(),
        make_client=in_process_clients(server.mcp),
        group_size=2,
        concurrency=2,
        reward_config=RELEASED,
    )
    assert batch.n_errors == 2
    for episode in batch.episodes:
        assert episode.metrics.status == "error" and "act:" in (episode.metrics.error or "")
        assert episode.metrics.turns == 1  # the episode's own record is kept for the logs
        assert episode.reward.total == -1.5 and episode.sequences == [] and episode.stats == {}
    assert batch.training_sequences() == []


class TranscriptPolicy:
    """Test double for a vLLM chat server whose tokens are the character codes of a fixed chat rendering, so the
    prompts of a transcript-mode episode extend each other exactly, as they do on a consistent real server.
    Script: add Custom, then finish."""

    SCRIPT = ("<action>add</action><operator>Custom</operator>", "<action>finish</action>")

    def __init__(self) -> None:
        self.requests: list[list[dict[str, str]]] = []

    def __call__(self, body: dict[str, Any]) -> StubReply:
        messages = body["messages"]
        self.requests.append(messages)
        rendered = "".join(f"<{m['role']}>{m['content']}</>" for m in messages) + "<assistant>"
        content = self.SCRIPT[min(sum(m["role"] == "assistant" for m in messages), 1)]
        completion = [ord(c) for c in content]
        return StubReply(body=vllm_body(content, [ord(c) for c in rendered], completion, [-0.25] * len(completion)))


async def test_history_mode_trains_one_transcript_per_episode_with_canvas_tokens_masked() -> None:
    policy = TranscriptPolicy()
    server = build_server(registry=REGISTRY, runner=ScriptedRunner(answer=lambda graph, task: "42"))
    with OpenAIStub(responder=policy) as stub:
        client = AsyncOpenAI(base_url=stub.base_url, api_key="not-needed", max_retries=0)

        def make(_: Problem, index: int) -> PolicyDirector:
            options = {"finish": "relaxed", "prompt_turns": False}
            return PolicyDirector(client, "policy", canvas_options=options, registry=REGISTRY, transcript=True)

        batch = await collect_groups(
            [problem("p0")],
            make_director=make,
            make_client=in_process_clients(server.mcp),
            group_size=1,
            concurrency=1,
            reward_config=RELEASED,
            mode="history",
        )
    (episode,) = batch.episodes
    assert episode.metrics.status == "ok" and episode.metrics.turns == 2 and episode.metrics.dropped is None
    (sequence,) = episode.sequences
    assert sequence.n_turns == 2
    assert [m["role"] for m in policy.requests[1]] == ["system", "user", "assistant", "user"]
    assert policy.requests[1][2]["content"] == TranscriptPolicy.SCRIPT[0]
    text = "".join(chr(t) for t in sequence.input_ids)
    sampled = "".join(chr(t) for t, m in zip(sequence.input_ids, sequence.mask, strict=True) if m)
    assert sampled == "".join(TranscriptPolicy.SCRIPT)  # the mask is 1 exactly on the policy's own tokens
    assert "Last feedback" in text.split(TranscriptPolicy.SCRIPT[0])[1]  # the canvas's reply is in, masked out
    assert text.endswith(TranscriptPolicy.SCRIPT[1])
