"""Rollouts over a fleet of real `flowsteer-mcp` HTTP servers: one server SIGKILLed mid-step.

The episodes spread over the two servers; the killed server's episodes are run again from scratch on the
other (their sessions were leases of the fleet's pool), later sessions avoid it, and the step completes with
every trajectory whole. With no server left the batch stops with a clear error.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from operators.backends.replicas import NoReplicaLeftError
from tests.support.openai_stub import StubReply
from tests.support.servers import HttpServerProcess
from tests.support.vllm_replicas import VLLMReplicaDouble
from tests.training.test_rollout_worker import RELEASED, ScriptedVllmPolicy, problem
from tests.training.test_vllm_replicas import replica_directors
from training.rollout import RemoteClients, collect_groups, remote_clients
from training.vllm.replicas import REPLICAS_BASE_URL, ReplicaPool, routed_client

pytestmark = pytest.mark.slow
EXECUTOR = '[executor]\nmodel = "scripted"\n\n[models.scripted]\nbackend = "scripted"\ndefault_reply = "42"\n'


class KillAtCall:
    """The scripted policy, which SIGKILLs the victims the moment its `at`-th call arrives (episodes are then
    mid-flight on them)."""

    def __init__(self, policy: ScriptedVllmPolicy, at: int, victims: list[HttpServerProcess]) -> None:
        self.policy = policy
        self.at = at
        self.victims = victims
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> StubReply:
        with self._lock:
            self.calls += 1
            if self.calls == self.at:
                for victim in self.victims:
                    victim.kill()
        return self.policy(body)


async def collect(fleet: RemoteClients, policy_url: str, problems: list[str]) -> Any:
    pool = ReplicaPool([policy_url])
    openai = AsyncOpenAI(base_url=REPLICAS_BASE_URL, api_key="x", max_retries=0, http_client=routed_client(pool))
    try:
        return await collect_groups(
            [problem(name) for name in problems],
            make_director=replica_directors(openai),
            make_client=fleet,
            group_size=2,
            concurrency=4,
            timeout_s=60.0,
            reward_config=RELEASED,
            replicas=pool,
            canvas_servers=fleet.pool,
        )
    finally:
        await openai.close()


def servers(tmp_path: Path, n: int) -> list[HttpServerProcess]:
    config = tmp_path / "executor.toml"
    config.write_text(EXECUTOR, encoding="utf-8")
    return [HttpServerProcess("--config", str(config), env={"FLOWSTEER_LOG_LEVEL": "WARNING"}) for _ in range(n)]


async def test_a_server_killed_mid_step_has_its_episodes_rerun_on_another(tmp_path: Path) -> None:
    a, b = servers(tmp_path, 2)
    with a, b:
        fleet = remote_clients([a.url, b.url])
        killer = KillAtCall(ScriptedVllmPolicy(), at=5, victims=[a])
        with VLLMReplicaDouble(responder=killer) as policy:
            batch = await collect(fleet, policy.base_url, ["p0", "p1"])
        assert a.process is not None and a.process.poll() is not None  # it was killed mid-step
    assert fleet.pool.alive == [b.url] and "MCP server" in fleet.pool.role
    assert [e.metrics.status for e in batch.episodes] == ["ok"] * 4
    assert batch.retried >= 1 and batch.summary()["batch/episodes_retried"] == batch.retried
    assert [e.metrics.turns for e in batch.episodes] == [3, 5, 3, 5]  # each rerun from scratch, whole


async def test_when_every_server_dies_the_batch_stops_naming_them(tmp_path: Path) -> None:
    a, b = servers(tmp_path, 2)
    with a, b:
        fleet = remote_clients([a.url, b.url])
        killer = KillAtCall(ScriptedVllmPolicy(), at=3, victims=[a, b])
        with (
            VLLMReplicaDouble(responder=killer) as policy,
            pytest.raises(NoReplicaLeftError, match="no MCP server replica is left"),
        ):
            await collect(fleet, policy.base_url, ["p0", "p1"])
