"""The data-parallel learner on PyTorch distributed (docs/design/training.md, "Data-parallel learner").

`torchrun --nproc-per-node N -m training train --config ...` starts N learner processes; without torchrun (no
`WORLD_SIZE` in the environment) the run is one process, as it always was, and nothing here opens a process group.

- Rank 0 is the run: it serves the policy on vLLM, collects the step's rollouts through MCP, logs, checkpoints and
  publishes the adapter. Every step it broadcasts the step's training sequences to the other ranks
  (`broadcast_object_list`), so every rank holds the same batch and draws the same minibatch partition.
- Each minibatch is sharded over the ranks by tokens (`shard_by_tokens`); each rank back-propagates its shard with
  the loss weighted by the *global* minibatch token (or sequence) count, then the trainable parameters' gradients
  are summed over the ranks (`all_reduce_gradients`, SUM): the result is exactly the one-process gradient of the
  minibatch's token-mean loss, and the gradient clipping and AdamW step that follow are identical on every rank.
- The other ranks (`Trainer._follow`) wait at the next broadcast while rank 0 rolls out, publishes and checkpoints.
- FSDP (`fully_shard_policy`, `policy.shard: fsdp`) shards a policy too large for one device; `policy_update`
  handles it, and `whole_learner_state` gathers what rank 0 publishes and checkpoints (see the design note).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import structlog
import torch
import torch.distributed as dist

from training.errors import TrainingError

log = structlog.get_logger(__name__)

TIMEOUT_ENV = "FLOWSTEER_DIST_TIMEOUT_S"
# The other ranks wait at a broadcast while rank 0 rolls a whole step out: far longer than a collective usually takes.
DEFAULT_TIMEOUT_S = 4 * 3600


@dataclass(frozen=True)
class Topology:
    """Where this process stands among the learner's processes."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


SINGLE = Topology()


class LearnerDeviceError(TrainingError, RuntimeError):
    """The learner was asked to run where it cannot (`policy.device: cuda` without a GPU for its rank)."""


def learner_device(choice: str, topology: Topology) -> torch.device:
    """The device `policy.device` names for this rank: its GPU under torchrun (`topology.device`), the first GPU
    in one process, else the CPU; `cuda` without a usable GPU is an error rather than a silent CPU run."""
    if choice == "cpu":
        return torch.device("cpu")
    if topology.device.type == "cuda":
        return topology.device
    if torch.cuda.is_available() and not topology.distributed:
        return torch.device("cuda", 0)
    if choice == "cuda":
        raise LearnerDeviceError(
            "policy.device is 'cuda' but no GPU is usable here"
            + (" for every local rank (fewer GPUs than --nproc-per-node)" if topology.distributed else "")
            + "; set policy.device to 'auto' or 'cpu' to train on the CPU"
        )
    return torch.device("cpu")


def launched_by_torchrun(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return int(env.get("WORLD_SIZE", "1")) > 1 and "RANK" in env


def init_topology(environ: dict[str, str] | None = None) -> Topology:
    """The topology torchrun's environment describes (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR/PORT`),
    with the default process group initialised; one process (`SINGLE`) when not launched by torchrun.

    The group holds gloo for CPU tensors and, where every local rank has a GPU, NCCL for CUDA tensors
    (`cpu:gloo,cuda:nccl`), so collectives run on whichever device the learner's tensors live on; object
    collectives and barriers go through gloo. `device` is the rank's GPU then, where the learner runs unless
    `policy.device` says otherwise (`learner_device`)."""
    env = dict(os.environ if environ is None else environ)
    if not launched_by_torchrun(env):
        return SINGLE
    rank, world, local_rank = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    # One GPU per local rank, or none: every rank must choose the same backends.
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= int(env.get("LOCAL_WORLD_SIZE", world))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(
            backend="cpu:gloo,cuda:nccl" if cuda else "gloo",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=float(env.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))),
        )
    log.info("process_group_ready", rank=rank, world=world, backend=dist.get_backend())
    return Topology(rank=rank, world=world, local_rank=local_rank, device=device)


def shutdown(topology: Topology) -> None:
    """Destroy the process group now (a failing rank: its peers may never arrive at a barrier)."""
    if topology.distributed and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def leaving_together(topology: Topology) -> Iterator[None]:
    """Destroy the process group on the way out; after a clean exit only once every rank has got there.

    Why: a rank that closes its gloo connections while a peer still has collective traffic in flight makes the
    peer's gloo thread throw "Connection closed by peer", which ends that process with SIGABRT (seen on 2 CPU
    ranks under load). A failing rank skips the barrier, so it never waits for peers that will not come.
    """
    try:
        yield
    except BaseException:
        shutdown(topology)
        raise
    if topology.distributed and dist.is_initialized():
        dist.barrier()
    shutdown(topology)


def shard_by_tokens(indices: Sequence[int], tokens: Sequence[int], world: int) -> list[list[int]]:
    """Split `indices` over `world` ranks with balanced token counts: longest first, each into the lightest rank
    (ties: the lowest rank). Deterministic, so every rank computes the same shards; each shard keeps the order of
    `indices`. `tokens[i]` is item i's cost (its policy tokens)."""
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    loads = [0] * world
    owner: dict[int, int] = {}
    for index in sorted(indices, key=lambda i: (-tokens[i], i)):
        rank = min(range(world), key=lambda r: (loads[r], r))
        owner[index] = rank
        loads[rank] += tokens[index]
    return [[i for i in indices if owner[i] == rank] for rank in range(world)]


def broadcast_object(value: Any, topology: Topology) -> Any:
    """Rank 0's `value` on every rank (pickled; rank 0's argument is returned on rank 0)."""
    if not topology.distributed:
        return value
    box = [value if topology.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_gradients(parameters: Sequence[torch.nn.Parameter]) -> None:
    """Sum the parameters' gradients over the ranks, in one flat buffer per dtype and device (a missing gradient
    counts as zeros, so a rank whose shard was empty still takes part)."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.nn.Parameter]] = {}
    for parameter in parameters:
        groups.setdefault((parameter.dtype, parameter.device), []).append(parameter)
    for group in groups.values():
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in group]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for parameter in group:
            n = parameter.numel()
            parameter.grad = flat[offset : offset + n].view_as(parameter).clone()
            offset += n


def all_reduce_sums(values: dict[str, float], names: Sequence[str]) -> dict[str, float]:
    """Sum `values` over the ranks for every name in `names`; a name is kept if any rank had it."""
    data = torch.tensor([[values.get(n, 0.0), float(n in values)] for n in names], dtype=torch.float64)
    dist.all_reduce(data, op=dist.ReduceOp.SUM)
    return {n: float(data[i, 0]) for i, n in enumerate(names) if data[i, 1] > 0}


def all_reduce_max(value: float) -> float:
    data = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(data, op=dist.ReduceOp.MAX)
    return float(data[0])


def broadcast_parameters(parameters: Sequence[torch.nn.Parameter]) -> None:
    """Rank 0's values of `parameters` on every rank (the learners start identical whatever their RNGs did)."""
    with torch.no_grad():
        for parameter in parameters:
            dist.broadcast(parameter.data, src=0)


def barrier(topology: Topology) -> None:
    if topology.distributed:
        dist.barrier()


def fully_shard_policy(policy: Any) -> None:
    """FSDP2 (`torch.distributed.fsdp.fully_shard`) over a `PolicyModel`: each decoder layer (the model's
    `_no_split_modules`) is one unit, the rest (embeddings, norm, head) the root's. Parameters, gradients and
    optimizer state are then sharded over the ranks (build the optimizer after this); gradients are
    reduce-scattered as a mean over ranks during backward, which `policy_update` accounts for."""
    from torch.distributed.fsdp import fully_shard

    model = policy.model
    units = set(getattr(model.get_base_model(), "_no_split_modules", None) or ())
    if not units:
        raise ValueError("the policy's model names no decoder layer class (_no_split_modules) to shard by")
    for module in list(model.modules()):
        if type(module).__name__ in units:
            fully_shard(module)
    fully_shard(model)
    policy.sharded = True


WHOLE_OPTIMIZER = "fsdp_full_state"  # the key of a sharded run's optimizer state in a checkpoint


def whole_learner_state(policy: Any, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """A sharded policy's state whole, for rank 0 to publish and checkpoint alone: gathers the trainable weights
    (`PolicyModel.gather_trainable`) and returns the optimizer state keyed by parameter name. A collective:
    every rank calls it at the same point. None for an unsharded policy (its own state is whole already)."""
    if not policy.sharded:
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    policy.gather_trainable()
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {WHOLE_OPTIMIZER: get_optimizer_state_dict(policy.model, optimizer, options=options)}


def load_optimizer_state(policy: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Restore a checkpoint's optimizer state: a sharded run's (by parameter name, whole; every rank reads the
    same file and keeps its shard) or a one-process run's (`optimizer.state_dict()`)."""
    if WHOLE_OPTIMIZER in state:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(policy.model, optimizer, state[WHOLE_OPTIMIZER], options=options)
        return
    if policy.sharded:
        raise ValueError(
            "this checkpoint's optimizer state was written by an unsharded learner: resume it with "
            "policy.shard: none (the update is the same), or start a sharded run from its adapter"
        )
    optimizer.load_state_dict(state)


def to_float(value: torch.Tensor) -> float:
    """A scalar tensor's value; a sharded (DTensor) one is gathered first."""
    full = getattr(value, "full_tensor", None)
    return float(full() if callable(full) else value)
