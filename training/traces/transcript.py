"""Transcript records: what a Flow-Director policy saw and wrote in one scripted episode, and how it scored.

Why these fields: supervised warm start trains on the policy's own chat messages, so each turn keeps the
observation exactly as `PolicyDirector` would have built it (markovian mode: the system prompt plus the current
observation on action turns, the prompt-turn text alone on prompt turns) and the `act` text exactly as sent; the
episode's outcome (S, C, reward) lets a mix choose good and bad workflows on purpose. One JSON object per line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from training.reward import RewardBreakdown


class TraceTurn(BaseModel):
    """One turn: the observation before it, the text sent to `act`, and the canvas's answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    kind: Literal["action", "prompt"]
    observation: str  # the user message of this turn (ObservationBuilder.turn / .prompt_turn)
    text: str  # exactly what was sent to `act`: the completion the policy should learn to write
    ok: bool  # the canvas accepted the turn
    feedback: str  # what the canvas answered (the next action turn's observation quotes it)


class TraceEpisode(BaseModel):
    """One scripted episode of one workflow on one training problem, with its graded outcome."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    problem_id: str
    source: str
    task_type: str
    workflow: str  # library name, or NAME~K for the K-th seeded variation of it
    base_workflow: str  # the library entry it comes from
    variation: int = Field(ge=0)  # 0 for the library entry itself
    rationale: str
    # prompt turns the script wrote with a stand-in instruction because the workflow leaves that slot to the
    # operator's default (e.g. the direct-* entries), which a prompt turn cannot express
    filled_prompts: int = Field(default=0, ge=0)
    intended_dsl: str  # the workflow the script builds
    dsl: str = ""  # the workflow the canvas ended with
    system: str  # the system prompt of action turns (from create_workflow)
    turns: list[TraceTurn] = Field(default_factory=list)
    finished: bool = False
    end_reason: str | None = None
    answer: str | None = None
    error: str | None = None  # why the episode or its grading failed, if it did
    structure: float = 0.0  # S
    correctness: float = 0.0  # C
    reward: float = 0.0  # R
    reward_breakdown: RewardBreakdown | None = None
    score_method: str | None = None
    llm_calls: int = 0
    tokens: int = 0
    wall_s: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        """What identifies an episode in a collection (resuming skips the keys already written)."""
        return (self.problem_id, self.workflow)

    @property
    def valid_share(self) -> float:
        return sum(turn.ok for turn in self.turns) / len(self.turns) if self.turns else 0.0

    def messages(self, index: int) -> list[dict[str, str]]:
        """Turn `index` as chat messages (the last one is the assistant's), as the policy director sends them."""
        turn = self.turns[index]
        context = [{"role": "system", "content": self.system}] if turn.kind == "action" else []
        return [*context, {"role": "user", "content": turn.observation}, {"role": "assistant", "content": turn.text}]


def write_episodes(path: str | Path, episodes: Iterable[TraceEpisode]) -> int:
    """Write episodes as JSONL (replacing the file); returns how many."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as handle:
        for episode in episodes:
            handle.write(episode.model_dump_json() + "\n")
            count += 1
    return count


def read_episodes(path: str | Path) -> Iterator[TraceEpisode]:
    """The episodes of a JSONL file; a blank line is skipped, a malformed one raises naming its line."""
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield TraceEpisode.model_validate_json(line)
            except ValueError as error:
                raise ValueError(f"{path}:{number}: not a trace episode ({error})") from None
