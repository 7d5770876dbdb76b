"""Turn an episode's recorded turns into training sequences: `markovian` or `history` mode.

markovian: every turn is its own (prompt, completion) pair, exactly as the policy server tokenised and
    sampled it; mask 0 on the prompt, 1 on the completion. All of an episode's pairs share its advantage.
history: one sequence per episode: the first prompt, then each completion (mask 1) followed by the tokens the
    next turn's prompt adds (the canvas feedback and the next observation, mask 0). This is only valid when
    each prompt extends the previous prompt + completion token for token; otherwise the sequence would not be
    what the policy actually conditioned on, so the episode raises `PrefixMismatch` (the worker drops it from
    training and counts it). The director side of history mode (sending the accumulated transcript) is not
    implemented yet: today's `PolicyDirector` builds a fresh observation each turn, so history assembly of
    its episodes would fail the check at turn 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from flowsteer_mcp.director.episode import TurnRecord
from training.errors import TrainingError
from training.rollout.samples import MissingTokenIds, TokenCountMismatch, TurnSample

ObservationMode = Literal["markovian", "history"]


class PrefixMismatch(TrainingError, ValueError):
    """A turn's prompt does not start with the previous prompt + completion tokens (history mode)."""

    def __init__(self, episode_id: str, turn_index: int, position: int) -> None:
        self.episode_id = episode_id
        self.turn_index = turn_index
        self.position = position
        super().__init__(
            f"episode {episode_id}, turn {turn_index}: the prompt diverges from the previous prompt + completion "
            f"at token {position}; the history sequence would not be what the policy saw"
        )


def turn_tokens(record: TurnRecord, episode_id: str, turn_index: int) -> tuple[list[int], list[int], list[float]]:
    """The (prompt ids, completion ids, behaviour log-probs) the server returned for one turn, checked."""
    missing = [
        name
        for name, value in (
            ("prompt token ids", record.prompt_token_ids),
            ("completion token ids", record.completion_token_ids),
            ("completion log-probs", record.completion_logprobs),
        )
        if value is None
    ]
    if missing:
        raise MissingTokenIds(episode_id, turn_index, missing)
    assert record.prompt_token_ids is not None  # narrowed for mypy by the check above
    assert record.completion_token_ids is not None
    assert record.completion_logprobs is not None
    if len(record.completion_token_ids) != len(record.completion_logprobs):
        raise TokenCountMismatch(
            episode_id, turn_index, len(record.completion_token_ids), len(record.completion_logprobs)
        )
    return list(record.prompt_token_ids), list(record.completion_token_ids), list(record.completion_logprobs)


def markovian_sequences(records: Sequence[TurnRecord], *, episode_id: str, group_id: str) -> list[TurnSample]:
    sequences: list[TurnSample] = []
    for index, record in enumerate(records):
        prompt, completion, logprobs = turn_tokens(record, episode_id, index)
        sequences.append(
            TurnSample(
                episode_id=episode_id,
                group_id=group_id,
                turn_index=index,
                prompt_ids=prompt,
                completion_ids=completion,
                completion_mask=[1] * len(completion),
                behaviour_logprobs=logprobs,
                refused=not record.ok,
            )
        )
    return sequences


def history_sequence(records: Sequence[TurnRecord], *, episode_id: str, group_id: str) -> TurnSample:
    if not records:
        raise ValueError(f"episode {episode_id}: no turns to assemble")
    prompt, completion, logprobs = turn_tokens(records[0], episode_id, 0)
    context = [*prompt, *completion]
    ids, mask, behaviour = list(completion), [1] * len(completion), list(logprobs)
    for index, record in enumerate(records[1:], start=1):
        next_prompt, completion, logprobs = turn_tokens(record, episode_id, index)
        divergence = _divergence(context, next_prompt)
        if divergence is not None:
            raise PrefixMismatch(episode_id, index, divergence)
        added = next_prompt[len(context) :]
        ids += [*added, *completion]
        mask += [0] * len(added) + [1] * len(completion)
        behaviour += [0.0] * len(added) + logprobs
        context = [*next_prompt, *completion]
    return TurnSample(
        episode_id=episode_id,
        group_id=group_id,
        turn_index=0,
        n_turns=len(records),
        prompt_ids=prompt,
        completion_ids=ids,
        completion_mask=mask,
        behaviour_logprobs=behaviour,
    )


def _divergence(prefix: list[int], sequence: list[int]) -> int | None:
    """First position where `sequence` stops extending `prefix`, or None when it starts with all of it."""
    for position, token in enumerate(prefix):
        if position >= len(sequence) or sequence[position] != token:
            return position
    return None


def build_sequences(
    mode: ObservationMode, records: Sequence[TurnRecord], *, episode_id: str, group_id: str
) -> list[TurnSample]:
    """Training sequences of one episode. Raises `MissingTokenIds`, `TokenCountMismatch` or (history)
    `PrefixMismatch`; an episode without turns gives no sequences."""
    if not records:
        return []
    if mode == "markovian":
        return markovian_sequences(records, episode_id=episode_id, group_id=group_id)
    if mode == "history":
        return [history_sequence(records, episode_id=episode_id, group_id=group_id)]
    raise ValueError(f"mode must be 'markovian' or 'history', got {mode!r}")
