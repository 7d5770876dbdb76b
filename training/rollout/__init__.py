"""CWRPO rollouts through the MCP canvas: asynchronous grouped trajectories and token-in/token-out samples.

batch = await collect_groups(problems, make_director=..., make_client=..., group_size=G, concurrency=N)
for sequence, advantage in batch.training_sequences(): ...
"""

from training.rollout.clients import RemoteClients, in_process_clients, remote_clients
from training.rollout.modes import ObservationMode, PrefixMismatch, build_sequences
from training.rollout.samples import EpisodeSample, MissingTokenIds, TokenCountMismatch, TrajectoryMetrics, TurnSample
from training.rollout.worker import RolloutBatch, collect_groups, episode_key

__all__ = [
    "EpisodeSample",
    "MissingTokenIds",
    "ObservationMode",
    "PrefixMismatch",
    "RemoteClients",
    "RolloutBatch",
    "TokenCountMismatch",
    "TrajectoryMetrics",
    "TurnSample",
    "build_sequences",
    "collect_groups",
    "episode_key",
    "in_process_clients",
    "remote_clients",
]
