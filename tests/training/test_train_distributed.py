"""The data-parallel learner (training/train/distributed.py): token-balanced shards, and on 2 real gloo processes
the same update as one process, the other rank following rank 0's broadcasts, and every rank resuming from the
checkpoint rank 0 wrote."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
import torch

from training.rollout import RolloutBatch
from training.rollout.samples import TurnSample
from training.train.checkpoint import Restored
from training.train.config import TrainConfig, load_train_config
from training.train.distributed import SINGLE, Topology, init_topology, shard_by_tokens
from training.train.loop import Learner

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "cpu-smoke.yaml"
SMOKE_DATA = ROOT / "examples" / "train" / "smoke.jsonl"


# -- sharding (pure) --------------------------------------------------------------------------------------------


def test_shards_cover_every_index_once_and_keep_their_order() -> None:
    tokens = [5, 1, 9, 3, 3, 7, 2]
    shards = shard_by_tokens(range(7), tokens, 3)
    assert sorted(i for shard in shards for i in shard) == list(range(7))
    assert all(shard == sorted(shard) for shard in shards)


def test_shards_balance_tokens_longest_first_into_the_lightest_rank() -> None:
    tokens = [10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]  # one long sequence, ten short ones
    shards = shard_by_tokens(range(len(tokens)), tokens, 2)
    assert shards[0] == [0]  # the long one alone
    assert [sum(tokens[i] for i in shard) for shard in shards] == [10, 10]


def test_shards_of_a_subset_and_more_ranks_than_items() -> None:
    tokens = [4, 8, 2, 6]
    assert shard_by_tokens([3, 1], tokens, 3) == [[1], [3], []]
    assert shard_by_tokens([2, 0, 3], tokens, 1) == [[2, 0, 3]]
    assert shard_by_tokens([], tokens, 2) == [[], []]


def test_shards_are_deterministic_on_ties() -> None:
    tokens = [3, 3, 3, 3]
    assert shard_by_tokens(range(4), tokens, 2) == [[0, 2], [1, 3]]
    with pytest.raises(ValueError, match="world"):
        shard_by_tokens(range(4), tokens, 0)


def test_without_torchrun_the_run_is_one_process() -> None:
    assert init_topology({}) == SINGLE
    assert init_topology({"WORLD_SIZE": "1", "RANK": "0"}) == SINGLE
    assert SINGLE.is_main and not SINGLE.distributed
    assert Topology(rank=1, world=2).is_main is False


# -- two gloo processes -----------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as handle:
        handle.bind(("127.0.0.1", 0))
        return int(handle.getsockname()[1])


def _config(out_dir: Path, *overrides: str) -> TrainConfig:
    return load_train_config(
        CONFIG,
        [
            *overrides,
            f"run.out_dir={out_dir}",
            "optim.minibatches=2",
            "optim.micro_batch_size=1",
            "loss.kl_beta=0.05",
            "loss.entropy_coef=0.01",
        ],
    )


def _sequences() -> list[tuple[TurnSample, float]]:
    g = torch.Generator().manual_seed(3)

    def ids(n: int) -> list[int]:
        return torch.randint(5, 1000, (n,), generator=g).tolist()

    def sample(
        prompt: int, completion: int, advantage: float, mask: list[int] | None = None
    ) -> tuple[TurnSample, float]:
        flags = mask or [1] * completion
        turn = TurnSample(
            episode_id="e",
            group_id="g",
            turn_index=0,
            prompt_ids=ids(prompt),
            completion_ids=ids(completion),
            completion_mask=flags,
            behaviour_logprobs=[-3.0 if f else 0.0 for f in flags],
        )
        return turn, advantage

    return [
        sample(9, 4, 1.0),
        sample(3, 7, -0.5, mask=[1, 1, 0, 0, 0, 1, 1]),
        sample(14, 2, 0.25),
        sample(5, 5, -1.5),
        sample(6, 9, 0.75),
        sample(4, 1, -0.25),
    ]


def _learner(model_dir: Path, config: TrainConfig, topology: Topology, restored: Restored | None = None) -> Learner:
    """The run's learner with a non-identity adapter (B != 0, the same on every rank), so A gets gradients too."""
    torch.manual_seed(config.run.seed)
    learner = Learner.build(model_dir, config, restored, topology)
    if restored is None:
        generator = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for name, parameter in learner.policy.model.named_parameters():
                if "lora_B" in name:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return learner


def _trainable(learner: Learner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.policy.model.named_parameters() if p.requires_grad}


def _moments(learner: Learner) -> list[torch.Tensor]:
    """AdamW's first moments: a fixed linear mix of the updates' gradients (Adam's step itself hides their scale)."""
    return [state["exp_avg"].clone() for state in learner.optimizer.state_dict()["state"].values()]


def _join(rank: int, world: int, port: int) -> Topology:
    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    return init_topology()


def _update_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    from training.train.distributed import broadcast_object, leaving_together
    from training.train.loop import Trainer
    from training.train.update import policy_update

    topology = _join(rank, world, port)
    with leaving_together(topology):
        config = _config(Path(out) / "run")
        learner = _learner(Path(model_dir), config, topology)
        if topology.is_main:  # what Trainer._learn and the end of Trainer.run do on rank 0
            sequences = broadcast_object(_sequences(), topology)
            metrics = policy_update(
                learner.policy,
                learner.optimizer,
                sequences,
                config.optim,
                config.loss,
                learner.update_generator,
                topology,
            )
            broadcast_object(None, topology)
            torch.save(metrics, Path(out) / "metrics.pt")
        else:
            Trainer(config, topology=topology)._follow(learner)
        torch.save({**_trainable(learner), "moments": _moments(learner)}, Path(out) / f"rank{rank}.pt")


def _resume_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    from training.train.checkpoint import latest_checkpoint, load_checkpoint
    from training.train.distributed import barrier, broadcast_object, leaving_together
    from training.train.loop import Trainer
    from training.train.stream import StreamCursor
    from training.train.update import policy_update

    topology = _join(rank, world, port)
    with leaving_together(topology):
        config = _config(Path(out) / "run")
        trainer = Trainer(config, topology=topology)
        learner = _learner(Path(model_dir), config, topology)
        policy_update(
            learner.policy,
            learner.optimizer,
            _sequences(),
            config.optim,
            config.loss,
            learner.update_generator,
            topology,
        )
        learner.scheduler.step()
        if topology.is_main:  # rank 0 alone writes the checkpoint
            cursor = StreamCursor(epoch=0, position=2)
            trainer._checkpoint(1, learner, cursor)
        barrier(topology)
        folder = broadcast_object(latest_checkpoint(trainer.checkpoints) if topology.is_main else None, topology)
        restored = load_checkpoint(folder, fingerprint=config.fingerprint())
        resumed = _learner(Path(model_dir), config, topology, restored)
        moments = _moments(resumed)
        torch.save(
            {
                "trained": _trainable(learner),
                "resumed": _trainable(resumed),
                "moments": moments,
                "step": restored.state.step,
                "folder": str(folder),
                "generator": resumed.update_generator.get_state(),
                "lr": resumed.scheduler.get_last_lr(),
            },
            Path(out) / f"rank{rank}.pt",
        )


def _fsdp_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    from training.train.distributed import fully_shard_policy, leaving_together
    from training.train.optim import build_optimizer
    from training.train.update import policy_update

    topology = _join(rank, world, port)
    with leaving_together(topology):
        config = _config(Path(out) / "run")
        learner = _learner(Path(model_dir), config, topology)
        fully_shard_policy(learner.policy)
        optimizer, _ = build_optimizer(learner.policy.trainable_parameters(), config.optim, config.run.steps)
        metrics = policy_update(
            learner.policy, optimizer, _sequences(), config.optim, config.loss, learner.update_generator, topology
        )
        full = {
            n: p.full_tensor().detach().clone() for n, p in learner.policy.model.named_parameters() if p.requires_grad
        }
        moments = [state["exp_avg"].full_tensor().clone() for state in optimizer.state.values()]
        if topology.is_main:
            torch.save({"params": full, "moments": moments, "metrics": metrics}, Path(out) / "fsdp.pt")


class _BatchOf:
    """What `Trainer._learn` reads of a rollout batch."""

    def training_sequences(self, refused_turns: str = "share") -> list[tuple[TurnSample, float]]:
        return _sequences()


def _run_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    """`Trainer.run` on both ranks; rank 0's vLLM-and-rollout side replaced by two `_learn` calls on a fixed batch."""
    import anyio

    from training.train.distributed import leaving_together
    from training.train.loop import Trainer, TrainingRun

    class Leader(Trainer):
        async def _lead(self, learner: Learner, *args: object) -> None:
            run = cast(TrainingRun, SimpleNamespace(learner=learner))
            learned = [await self._learn(run, cast(RolloutBatch, _BatchOf()), step) for step in (1, 2)]
            torch.save({"learned": learned, "params": _trainable(learner)}, Path(out) / "rank0.pt")

    class Follower(Trainer):
        def _follow(self, learner: Learner) -> None:
            super()._follow(learner)
            torch.save({"params": _trainable(learner)}, Path(out) / "rank1.pt")

    topology = _join(rank, world, port)
    with leaving_together(topology):
        config = _config(
            Path(out) / "run", f"policy.model={model_dir}", f"data.paths=[{SMOKE_DATA}]", "optim.warmup_steps=2"
        )
        trainer = (Leader if topology.is_main else Follower)(config, topology=topology)
        summary = anyio.run(trainer.run)
        assert (summary.first_step, summary.resumed_from) == (1, None)


def _fsdp_run_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    """`Trainer.run` on both ranks with `policy.shard: fsdp`; rank 0 learns two steps on a fixed batch, then
    writes the adapter and a checkpoint from the gathered state, as publishing and `_checkpoint_if_due` do."""
    import anyio

    from training.train.distributed import leaving_together
    from training.train.loop import Trainer, TrainingRun
    from training.train.stream import StreamCursor

    class Leader(Trainer):
        async def _lead(self, learner: Learner, *args: object) -> None:
            run = cast(TrainingRun, SimpleNamespace(learner=learner))
            learned = [await self._learn(run, cast(RolloutBatch, _BatchOf()), step) for step in (1, 2)]
            learner.policy.save_adapter(Path(out) / "adapter")
            self._checkpoint(2, learner, StreamCursor(epoch=0, position=4))
            torch.save({"learned": learned, "sharded": learner.policy.sharded}, Path(out) / "rank0.pt")

    topology = _join(rank, world, port)
    with leaving_together(topology):
        trainer = (Leader if topology.is_main else Trainer)(_fsdp_config(Path(out), model_dir), topology=topology)
        anyio.run(trainer.run)


def _fsdp_resume_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    """Both ranks resume the FSDP run's step-2 checkpoint sharded, take one more update, and rank 0 writes it."""
    from training.train.checkpoint import load_checkpoint
    from training.train.distributed import leaving_together

    topology = _join(rank, world, port)
    with leaving_together(topology):
        config = _fsdp_config(Path(out), model_dir)
        restored = load_checkpoint(Path(out) / "run" / "checkpoints" / "step-2", fingerprint=config.fingerprint())
        learner = Learner.build(Path(model_dir), config, restored, topology)
        learner.update(_sequences(), config, topology)
        if topology.is_main:
            learner.policy.save_adapter(Path(out) / "resumed-adapter")


def _leaving_worker(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    """Rank 1 fails inside the group; rank 0 leaves cleanly and so waits for it at the barrier."""
    import time

    from training.train.distributed import leaving_together

    topology = _join(rank, world, port)
    started = time.monotonic()
    try:
        with leaving_together(topology):
            if rank == 1:
                raise RuntimeError("rank 1 failed")
        outcome = "clean"
    except RuntimeError as error:
        outcome = f"raised: {error}"
    torch.save({"outcome": outcome, "seconds": time.monotonic() - started}, Path(out) / f"rank{rank}.pt")


def _fsdp_config(out: Path, model_dir: str | Path, shard: str = "fsdp") -> TrainConfig:
    settings = [f"policy.model={model_dir}", f"data.paths=[{SMOKE_DATA}]", "optim.warmup_steps=2"]
    return _config(out / "run", *settings, f"policy.shard={shard}", "logging.plots=false")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from operators.models import prepare

    return prepare("tiny-qwen3", home=tmp_path_factory.mktemp("models"))


def _spawn(worker: Callable[..., None], model_dir: Path, out: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(2, _free_port(), str(model_dir), str(out)), nprocs=2, join=True)


@pytest.mark.slow
def test_a_failing_rank_does_not_leave_its_peer_waiting_at_the_exit_barrier(tmp_path: Path) -> None:
    """The clean rank's barrier fails at once when the failing rank destroys the group (no 4-hour wait)."""
    import torch.multiprocessing as mp

    mp.spawn(_leaving_worker, args=(2, _free_port(), "", str(tmp_path)), nprocs=2, join=True)
    clean, failed = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    assert failed["outcome"] == "raised: rank 1 failed"
    assert clean["outcome"].startswith("raised:") and clean["seconds"] < 60


@pytest.mark.slow
def test_two_ranks_make_the_one_process_update(model_dir: Path, tmp_path: Path, one_torch_thread: None) -> None:
    from training.train.update import policy_update

    _spawn(_update_worker, model_dir, tmp_path)
    config = _config(tmp_path / "single")
    single = _learner(model_dir, config, SINGLE)
    before = _trainable(single)
    expected = policy_update(
        single.policy, single.optimizer, _sequences(), config.optim, config.loss, single.update_generator
    )
    after = _trainable(single)
    assert expected["optim/updates"] == 2.0
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for name, value in after.items():  # after both optimizer steps
        assert not torch.equal(value, before[name]) or "lora_A" in name  # the step moved the adapter
        torch.testing.assert_close(ranks[0][name], value, atol=1e-6, rtol=0)
        assert torch.equal(ranks[0][name], ranks[1][name])  # the ranks stay identical
    for rank in ranks:  # the summed gradients are the one process's (a mean over ranks would halve them)
        for got, want in zip(rank["moments"], _moments(single), strict=True):
            torch.testing.assert_close(got, want, atol=1e-7, rtol=1e-5)
    metrics = torch.load(tmp_path / "metrics.pt")
    assert metrics["dist/ranks"] == 2.0
    for key in ("loss/loss", "loss/kl", "loss/entropy", "loss/ratio_max", "optim/grad_norm", "optim/policy_tokens"):
        assert metrics[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key


@pytest.mark.slow
def test_every_rank_resumes_from_the_checkpoint_rank_0_wrote(model_dir: Path, tmp_path: Path) -> None:
    _spawn(_resume_worker, model_dir, tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert ranks[0]["folder"] == ranks[1]["folder"]
    assert ranks[0]["step"] == ranks[1]["step"] == 1
    assert ranks[0]["lr"] == ranks[1]["lr"]
    assert torch.equal(ranks[0]["generator"], ranks[1]["generator"])
    for rank in ranks:
        for name, value in rank["trained"].items():
            assert torch.equal(rank["resumed"][name], value)  # the checkpoint holds what was trained
            assert torch.equal(rank["resumed"][name], ranks[0]["resumed"][name])
    for a, b in zip(ranks[0]["moments"], ranks[1]["moments"], strict=True):
        assert torch.equal(a, b)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-1"]


@pytest.mark.slow
def test_fsdp_on_two_cpu_ranks_makes_the_one_process_update(
    model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    """FSDP2 over gloo: parameters sharded by decoder layer, ranks padded to the same number of forwards,
    gradients reduce-scattered (a mean, scaled back to the sum)."""
    from training.train.update import policy_update

    _spawn(_fsdp_worker, model_dir, tmp_path)
    config = _config(tmp_path / "single")
    single = _learner(model_dir, config, SINGLE)
    expected = policy_update(
        single.policy, single.optimizer, _sequences(), config.optim, config.loss, single.update_generator
    )
    got = torch.load(tmp_path / "fsdp.pt", weights_only=False)
    params = {n.replace("_fsdp_wrapped_module.", ""): v for n, v in got["params"].items()}
    for name, value in _trainable(single).items():
        torch.testing.assert_close(params[name], value, atol=1e-6, rtol=0)
    for a, b in zip(got["moments"], _moments(single), strict=True):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-5)
    for key in ("loss/loss", "loss/kl", "optim/grad_norm"):
        assert got["metrics"][key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key


@pytest.mark.slow
def test_trainer_run_on_two_ranks_follows_rank_0_and_writes_only_there(model_dir: Path, tmp_path: Path) -> None:
    _spawn(_run_worker, model_dir, tmp_path)
    leader, follower = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2))
    assert [step["optim/updates"] for step in leader["learned"]] == [2.0, 2.0]
    assert all(step["dist/ranks"] == 2.0 for step in leader["learned"])
    assert leader["learned"][0]["optim/lr"] != leader["learned"][1]["optim/lr"]  # both ranks stepped the schedule
    for name, value in leader["params"].items():
        assert torch.equal(follower["params"][name], value)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.yaml"]  # rank 0's, and nothing else


@pytest.mark.slow
def test_an_fsdp_trainer_publishes_and_checkpoints_the_one_process_learner(
    model_dir: Path, tmp_path: Path, one_torch_thread: None
) -> None:
    """`policy.shard: fsdp` through the Trainer: the adapter rank 0 writes from the gathered shards is the one a
    single process trains, and the checkpoint's whole optimizer state resumes an unsharded learner exactly."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    from training.train.checkpoint import load_checkpoint
    from training.train.distributed import WHOLE_OPTIMIZER

    _spawn(_fsdp_run_worker, model_dir, tmp_path)
    assert torch.load(tmp_path / "rank0.pt", weights_only=False)["sharded"] is True
    single_config = _fsdp_config(tmp_path / "single", model_dir, shard="none")
    torch.manual_seed(single_config.run.seed)
    single = Learner.build(model_dir, single_config, None, SINGLE)
    for _ in range(2):
        single.update(_sequences(), single_config, SINGLE)
        single.scheduler.step()
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    expected = get_peft_model_state_dict(single.policy.model)
    assert saved.keys() == expected.keys() and any(bool(v.any()) for k, v in saved.items() if "lora_B" in k)
    for key, value in expected.items():
        torch.testing.assert_close(saved[key], value, atol=1e-6, rtol=0)

    sharded_config = _fsdp_config(tmp_path, model_dir)  # under one process: warned, and the policy stays whole
    restored = load_checkpoint(tmp_path / "run" / "checkpoints" / "step-2", fingerprint=sharded_config.fingerprint())
    assert WHOLE_OPTIMIZER in restored.trainer["optimizer"]
    resumed = Learner.build(model_dir, sharded_config, restored, SINGLE)
    for got, want in zip(_moments(resumed), _moments(single), strict=True):
        torch.testing.assert_close(got, want, atol=1e-7, rtol=1e-5)
    for name, value in _trainable(single).items():
        torch.testing.assert_close(_trainable(resumed)[name], value, atol=1e-6, rtol=0)

    _spawn(_fsdp_resume_worker, model_dir, tmp_path)  # the same checkpoint resumed sharded, one step further
    single.update(_sequences(), single_config, SINGLE)
    further = load_file(tmp_path / "resumed-adapter" / "adapter_model.safetensors")
    for key, value in get_peft_model_state_dict(single.policy.model).items():
        torch.testing.assert_close(further[key], value, atol=1e-6, rtol=0)


def test_the_learner_runs_where_policy_device_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from training.train.distributed import LearnerDeviceError, learner_device

    assert learner_device("cpu", SINGLE) == torch.device("cpu")
    on_gpu = Topology(rank=1, world=2, local_rank=1, device=torch.device("cuda", 1))
    assert learner_device("auto", on_gpu) == torch.device("cuda", 1)  # torchrun's rank keeps its own GPU
    assert learner_device("cpu", on_gpu) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert learner_device("auto", SINGLE) == torch.device("cpu")
    with pytest.raises(LearnerDeviceError, match=r"no GPU is usable.*'auto' or 'cpu'"):
        learner_device("cuda", SINGLE)
    with pytest.raises(LearnerDeviceError, match="fewer GPUs than --nproc-per-node"):
        learner_device("cuda", Topology(rank=0, world=2))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert learner_device("auto", SINGLE) == torch.device("cuda", 0)
