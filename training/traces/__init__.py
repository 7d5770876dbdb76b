"""Transcripts of scripted Flow-Director episodes in the policy's own dialect, for supervised warm start."""

from training.traces.collect import ScriptedDirector, collect_traces, training_problems
from training.traces.transcript import TraceEpisode, TraceTurn, read_episodes, write_episodes
from training.traces.variations import variation, variations

__all__ = [
    "ScriptedDirector",
    "TraceEpisode",
    "TraceTurn",
    "collect_traces",
    "read_episodes",
    "training_problems",
    "variation",
    "variations",
    "write_episodes",
]
