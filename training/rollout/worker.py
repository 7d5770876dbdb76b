"""Collect groups of rollouts asynchronously through the MCP canvas (docs/design/training.md, "Rollouts").

Every trajectory (G per problem) is its own anyio task: there are no round barriers, so a trajectory that
generates slowly or builds a slow workflow holds only its own slot. A `CapacityLimiter` bounds how many run at
once (and so the load on the policy server, the executor and the sandbox); each trajectory has a time limit
after which it is recorded as failed instead of stalling the batch. Each finished episode is graded with the
shared scorer, rewarded, and turned into token-in/token-out training sequences; advantages are computed once
the batch is in, per problem (true GRPO) or per source (the reference's cross-problem baseline).

Failures are values: a trajectory that times out or errors gets reward `base - unfinished_penalty` (what an
empty, unfinished workflow earns), takes part in its group's baseline and contributes no training tokens.
A history-mode prefix mismatch drops only that episode's sequences and is counted. The one exception is a
policy server that returns no token ids (`MissingTokenIds`): that is a configuration error which would make
every trajectory useless, so the batch is cancelled and the error raised.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Literal

import anyio
import structlog
from pydantic import BaseModel

from flowsteer_mcp.director.episode import Director, EpisodeResult
from operators.backends.replicas import NoReplicaLeftError
from operators.backends.replicas import ReplicaPool as CorePool
from training.advantages import AdvantageScale, AdvantageStats, RefusedTurns, group_advantages, turn_advantage
from training.data import Problem
from training.episodes import MakeClient, ScoreFn, grade, run_director
from training.evaluate.clients import CANVAS_EPISODE
from training.evaluate.tasks import task_for
from training.reward import RewardBreakdown, RewardConfig, compute_reward
from training.rollout.modes import ObservationMode, PrefixMismatch, build_sequences
from training.rollout.samples import (
    EpisodeSample,
    MissingTokenIds,
    TokenCountMismatch,
    TrajectoryMetrics,
    TrajectoryStatus,
    TurnSample,
)
from training.scoring import score
from training.vllm.replicas import ReplicaPool

log = structlog.get_logger(__name__)

MakeDirector = Callable[[Problem, int], Director]  # (problem, rollout index) -> the director of that trajectory
Grouping = Literal["problem", "source"]
EMPTY_WORKFLOW_STATS: dict[str, int] = {"total_operators": 0, "unique_types": 0}


class RolloutBatch(BaseModel):
    """A batch of grouped trajectories, in schedule order (problem by problem, rollout by rollout)."""

    episodes: list[EpisodeSample]
    advantages: AdvantageStats
    mode: ObservationMode
    grouping: Grouping
    wall_s: float
    retried: int = 0  # attempts started again because their policy replica or canvas server died ("Replicas")

    @property
    def n_timeouts(self) -> int:
        return sum(e.metrics.status == "timeout" for e in self.episodes)

    @property
    def n_errors(self) -> int:
        return sum(e.metrics.status == "error" for e in self.episodes)

    @property
    def n_prefix_mismatch(self) -> int:
        return sum(e.metrics.dropped == "prefix_mismatch" for e in self.episodes)

    def training_sequences(self, refused_turns: RefusedTurns = "share") -> list[tuple[TurnSample, float]]:
        """Every trainable sequence with its episode's advantage, as `refused_turns` lets a refused turn share it."""
        return [
            (s, turn_advantage(e.advantage, refused=s.refused, rule=refused_turns))
            for e in self.episodes
            if e.trainable and e.advantage is not None
            for s in e.sequences
        ]

    def summary(self) -> dict[str, float]:
        """Batch means of the per-trajectory metrics and reward components, plus the batch counters."""
        rows = [{**e.reward.flat(), **e.metrics.flat()} for e in self.episodes]
        names = sorted({name for row in rows for name in row})
        out = {name: math.fsum(row.get(name, 0.0) for row in rows) / len(rows) for name in names}
        n = len(self.episodes)
        out.update(
            {
                "batch/trajectories": float(n),
                "batch/timeouts": float(self.n_timeouts),
                "batch/errors": float(self.n_errors),
                "batch/prefix_mismatch": float(self.n_prefix_mismatch),
                "batch/episodes_retried": float(self.retried),
                "batch/zero_variance_groups": float(self.advantages.n_zero_variance_groups),
                "batch/zero_variance_share": self.advantages.zero_variance_share,
                "batch/trajectories_per_min": 60.0 * n / self.wall_s if self.wall_s > 0 else 0.0,
            }
        )
        return out


def _metrics(
    episode: EpisodeResult | None,
    status: TrajectoryStatus,
    error: str | None,
    wall_s: float,
    score_method: str | None,
    dropped: str | None,
) -> TrajectoryMetrics:
    if episode is None:
        return TrajectoryMetrics(status=status, error=error, wall_s=wall_s, dropped=dropped)
    records = episode.records
    return TrajectoryMetrics(
        status=status,
        error=error,
        finished=episode.finished,
        end_reason=episode.end_reason,
        turns=len(records),
        valid_action_share=sum(r.ok for r in records) / len(records) if records else 0.0,
        policy_prompt_tokens=sum(r.policy_prompt_tokens for r in records),
        policy_completion_tokens=sum(r.policy_completion_tokens for r in records),
        executor_llm_calls=episode.llm_calls,
        executor_tokens=episode.tokens,
        score_method=score_method,
        wall_s=wall_s,
        dropped=dropped,
    )


def _canvas_failed(episode: EpisodeResult) -> bool:
    """Whether the director could not drive the canvas to the end (a `CanvasCallError`): a failed trajectory.

    Directors record that error in `episode.error` and return before collecting the workflow, so the episode has
    no graph statistics (`stats` is an empty dict, never None). An episode that was collected but whose
    workflow produced no answer also carries an `error`, yet it is an outcome (C = 0, S from its graph), not a
    failure: the policy built that workflow, so its reward and tokens count.
    """
    return episode.error is not None and not episode.stats


class _Trajectory:
    """One rollout slot: runs, grades and converts a single episode; never raises except for fatal config errors."""

    def __init__(
        self,
        problem: Problem,
        rollout_index: int,
        group_id: str,
        episode_id: str,
        director: Director,
    ) -> None:
        self.problem = problem
        self.rollout_index = rollout_index
        self.group_id = group_id
        self.episode_id = episode_id
        self.director = director

    async def run(
        self,
        *,
        make_client: MakeClient,
        timeout_s: float | None,
        score_fn: ScoreFn,
        reward_config: RewardConfig,
        mode: ObservationMode,
        delete_workflow: bool,
    ) -> EpisodeSample:
        started = time.monotonic()
        run = await run_director(
            self.director,
            task_for(self.problem),
            make_client=make_client,
            timeout_s=timeout_s,
            delete_workflow=delete_workflow,
        )
        episode: EpisodeResult | None = run.episode
        status: TrajectoryStatus = "ok"
        error: str | None = None
        if run.error is not None:  # the client or director failed: a failed trajectory, not a failed batch
            status, error, episode = "error", run.error, None
        elif run.timed_out:
            status, error, episode = "timeout", f"trajectory exceeded its time limit of {timeout_s} s", None
        if episode is not None and _canvas_failed(episode):
            status, error = "error", episode.error

        reward, score_method, sequences, dropped = await self._grade(
            episode if status == "ok" else None, score_fn, reward_config, mode
        )
        if status != "ok":
            log.warning("trajectory_failed", episode=self.episode_id, status=status, error=error)
        metrics = _metrics(episode, status, error, time.monotonic() - started, score_method, dropped)
        return EpisodeSample(
            episode_id=self.episode_id,
            group_id=self.group_id,
            problem_id=self.problem.id,
            source=self.problem.source,
            problem_type=self.problem.problem_type,
            rollout_index=self.rollout_index,
            sequences=sequences,
            reward=reward,
            metrics=metrics,
            stats=dict(episode.stats) if status == "ok" and episode is not None and episode.stats else {},
        )

    async def _grade(
        self,
        episode: EpisodeResult | None,
        score_fn: ScoreFn,
        reward_config: RewardConfig,
        mode: ObservationMode,
    ) -> tuple[RewardBreakdown, str | None, list[TurnSample], str | None]:
        if episode is None:
            failed = compute_reward(EMPTY_WORKFLOW_STATS, correctness=0.0, finished=False, config=reward_config)
            return failed, None, [], "failed"
        graded = await grade(score_fn, self.problem, episode.answer, episode=self.episode_id)
        # A scorer bug must not sink the batch: C = 0 and the method says why.
        correctness, method = (graded.result.score, graded.result.method) if graded.result else (0.0, "scoring_error")
        reward = compute_reward(
            episode.stats or EMPTY_WORKFLOW_STATS,
            correctness=correctness,
            finished=episode.finished,
            config=reward_config,
            executor_tokens=episode.tokens,
        )
        try:
            sequences = build_sequences(mode, episode.records, episode_id=self.episode_id, group_id=self.group_id)
        except PrefixMismatch as mismatch:
            log.info("history_prefix_mismatch", episode=self.episode_id, turn=mismatch.turn_index)
            return reward, method, [], "prefix_mismatch"
        return reward, method, sequences, None


def episode_key(prefix: str, problem: Problem, rollout_index: int) -> str:
    """A trajectory's episode id: what its `EpisodeSample` is named and what it leases a policy replica by."""
    return f"{prefix}{problem.id}#{rollout_index}"


def _group_id(problem: Problem, grouping: Grouping) -> str:
    if grouping == "problem":
        return problem.id
    if grouping == "source":
        return problem.source
    raise ValueError(f"grouping must be 'problem' or 'source', got {grouping!r}")


async def collect_groups(
    problems: Sequence[Problem],
    *,
    make_director: MakeDirector,
    make_client: MakeClient,
    group_size: int,
    concurrency: int,
    timeout_s: float | None = None,
    reward_config: RewardConfig | None = None,
    grouping: Grouping = "problem",
    mode: ObservationMode = "markovian",
    score_fn: ScoreFn = score,
    advantage_eps: float = 1e-6,
    advantage_scale: AdvantageScale = "std",
    drop_zero_variance: bool = False,
    delete_workflows: bool = True,
    episode_prefix: str = "",
    on_episode: Callable[[EpisodeSample], None] | None = None,
    replicas: ReplicaPool | None = None,
    canvas_servers: CorePool | None = None,
) -> RolloutBatch:
    """Run `group_size` rollouts of every problem, at most `concurrency` at a time, and group them.

    `make_director(problem, rollout_index)` builds each trajectory's director (e.g. a `PolicyDirector` on the
    current adapter name with a per-rollout seed). `on_episode` is called as each trajectory completes.
    `replicas`: the pool the directors' policy client routes through (leasing by `episode_key`); a trajectory
    whose replica died during it is run again from scratch with a new director, on a replica it has not run on,
    and `RolloutBatch.retried` counts those attempts. When no replica is left the batch stops with
    `NoReplicaLeftError`. `canvas_servers`: the pool of the MCP fleet `make_client` opens sessions on
    (`RemoteClients.pool`); each attempt's session is leased under its episode id, and an episode whose server
    died under it is run again from scratch on a server it has not run on, by the same rule.
    Raises `ValueError` on bad arguments and `MissingTokenIds` / `TokenCountMismatch` when the policy server
    does not return usable token ids.
    """
    _check_batch(problems, group_size, concurrency, timeout_s)
    slots = _slots(problems, group_size, grouping, episode_prefix, make_director)
    retries = _Retries([pool for pool in (replicas, canvas_servers) if pool is not None], make_director)
    run_attempt = partial(
        _Trajectory.run,
        make_client=make_client,
        timeout_s=timeout_s,
        score_fn=score_fn,
        reward_config=reward_config or RewardConfig(),
        mode=mode,
        delete_workflow=delete_workflows,
    )
    results: list[EpisodeSample | None] = [None] * len(slots)
    fatal: list[Exception] = []
    limiter = anyio.CapacityLimiter(concurrency)
    started = time.monotonic()

    async with anyio.create_task_group() as group:

        async def run_slot(position: int, slot: _Trajectory) -> None:
            async with limiter:
                try:
                    sample = await _attempts(slot, run_attempt, retries, named=canvas_servers is not None)
                except (MissingTokenIds, TokenCountMismatch, NoReplicaLeftError) as error:
                    fatal.append(error)
                    group.cancel_scope.cancel()
                    return
            results[position] = sample
            if on_episode is not None:
                on_episode(sample)

        for position, slot in enumerate(slots):
            group.start_soon(run_slot, position, slot)

    if fatal:
        raise fatal[0]
    episodes = [sample for sample in results if sample is not None]
    stats = _assign_advantages(episodes, advantage_eps, advantage_scale, drop_zero_variance)
    wall_s = time.monotonic() - started
    batch = RolloutBatch(
        episodes=episodes, advantages=stats, mode=mode, grouping=grouping, wall_s=wall_s, retried=retries.count
    )
    _log_batch(batch)
    return batch


async def _attempts(
    slot: _Trajectory,
    run_attempt: Callable[[_Trajectory], Awaitable[EpisodeSample]],
    retries: _Retries,
    *,
    named: bool,
) -> EpisodeSample:
    """The slot's attempts until one stands (`_Retries`); `named`: its canvas sessions are leased by episode id."""
    episode = CANVAS_EPISODE.set(slot.episode_id) if named else None
    try:
        attempt: _Trajectory | None = slot
        while attempt is not None:
            sample = await run_attempt(attempt)
            attempt = retries.next_attempt(attempt, sample)
        return sample
    finally:
        retries.forget(slot.episode_id)
        if episode is not None:
            CANVAS_EPISODE.reset(episode)


def _slots(
    problems: Sequence[Problem], group_size: int, grouping: Grouping, prefix: str, make_director: MakeDirector
) -> list[_Trajectory]:
    """Every rollout of the batch, problem by problem, each with its group, episode id and own director."""
    return [
        _Trajectory(
            problem,
            index,
            _group_id(problem, grouping),
            episode_key(prefix, problem, index),
            make_director(problem, index),
        )
        for problem in problems
        for index in range(group_size)
    ]


def _check_batch(problems: Sequence[Problem], group_size: int, concurrency: int, timeout_s: float | None) -> None:
    """Refuse a batch that cannot run as asked, before any episode starts."""
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if not problems:
        raise ValueError("no problems: a batch needs at least one problem")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive or None, got {timeout_s!r}")
    ids = [p.id for p in problems]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"problem ids must be unique in one batch (they name episodes and groups): {repeated}")


class _Retries:
    """When an attempt is run again: its policy replica or its canvas server died under it (`pools`)."""

    def __init__(self, pools: Sequence[CorePool], make_director: MakeDirector) -> None:
        self.pools = list(pools)
        self.make_director = make_director
        self.count = 0  # attempts run again

    def next_attempt(self, slot: _Trajectory, sample: EpisodeSample) -> _Trajectory | None:
        """A fresh attempt of `slot` if it failed because a pool lost it and each such pool has a live member it
        has not run on, else None (an attempt that got all its answers stands, whatever happened later)."""
        lost = [pool for pool in self.pools if pool.end_episode(slot.episode_id)]
        if not lost or sample.metrics.status == "ok":
            return None
        for pool in lost:
            pool.require_alive()
            if not pool.can_retry(slot.episode_id):
                return None
        self.count += 1
        log.warning(
            "trajectory_retried",
            episode=slot.episode_id,
            lost=[pool.role for pool in lost],
            alive={pool.role: pool.n_alive for pool in self.pools},
        )
        director = self.make_director(slot.problem, slot.rollout_index)
        return _Trajectory(slot.problem, slot.rollout_index, slot.group_id, slot.episode_id, director)

    def forget(self, episode_id: str) -> None:
        for pool in self.pools:
            pool.forget(episode_id)


def _assign_advantages(
    episodes: list[EpisodeSample], eps: float, scale: AdvantageScale, drop_zero_variance: bool
) -> AdvantageStats:
    """Give each episode its group advantage and whether it is trained on; returns the groups' statistics."""
    advantages, stats = group_advantages(
        [e.reward.total for e in episodes],
        [e.group_id for e in episodes],
        eps=eps,
        scale=scale,
        drop_zero_variance=drop_zero_variance,
    )
    for episode, advantage, keep in zip(episodes, advantages, stats.keep, strict=True):
        episode.advantage = advantage
        episode.keep = keep
    return stats


def _log_batch(batch: RolloutBatch) -> None:
    stats = batch.advantages
    log.info(
        "rollouts_collected",
        trajectories=len(batch.episodes),
        groups=stats.n_groups,
        zero_variance_groups=stats.n_zero_variance_groups,
        timeouts=batch.n_timeouts,
        errors=batch.n_errors,
        prefix_mismatch=batch.n_prefix_mismatch,
        retried=batch.retried,
        reward_mean=round(stats.reward_mean, 4),
        wall_s=round(batch.wall_s, 2),
    )
