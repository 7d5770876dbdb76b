"""Sample assembly from recorded turns: markovian pairs, history sequences and their token checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from flowsteer_mcp.director.episode import TurnRecord
from training.rollout.modes import (
    ObservationMode,
    PrefixMismatch,
    build_sequences,
    history_sequence,
    markovian_sequences,
)
from training.rollout.samples import MissingTokenIds, TokenCountMismatch, TurnSample


def record(
    prompt: list[int] | None, completion: list[int] | None, logprobs: list[float] | None, *, ok: bool = True
) -> TurnRecord:
    return TurnRecord(
        round=1,
        kind="action",
        prompt="p",
        completion="c",
        sent="c",
        prompt_token_ids=prompt,
        completion_token_ids=completion,
        completion_logprobs=logprobs,
        ok=ok,
    )


def test_markovian_pairs_carry_the_returned_tokens_and_mask_only_the_completion() -> None:
    turns = [record([1, 2, 3], [10, 11], [-0.1, -0.2]), record([4, 5], [12], [-0.3])]
    first, second = markovian_sequences(turns, episode_id="e", group_id="g")
    assert first.input_ids == [1, 2, 3, 10, 11]
    assert first.mask == [0, 0, 0, 1, 1]
    assert first.behaviour_logprobs_full == [0.0, 0.0, 0.0, -0.1, -0.2]
    assert (second.turn_index, second.prompt_ids, second.completion_ids) == (1, [4, 5], [12])
    assert second.mask == [0, 0, 1] and second.behaviour_logprobs == [-0.3]
    assert first.episode_id == "e" and first.group_id == "g"


def test_markovian_pairs_say_which_turns_the_canvas_refused() -> None:
    turns = [record([1], [10], [-0.1]), record([2], [11], [-0.2], ok=False), record([3], [12], [-0.3])]
    assert [s.refused for s in markovian_sequences(turns, episode_id="e", group_id="g")] == [False, True, False]


def test_history_sequence_masks_canvas_tokens_between_completions() -> None:
    turns = [
        record([1, 2], [10, 11], [-0.1, -0.2]),
        record([1, 2, 10, 11, 50, 51], [12], [-0.3]),  # extends prompt+completion by feedback tokens 50, 51
        record([1, 2, 10, 11, 50, 51, 12, 60], [13, 14], [-0.4, -0.5]),
    ]
    sample = history_sequence(turns, episode_id="e", group_id="g")
    assert sample.input_ids == [1, 2, 10, 11, 50, 51, 12, 60, 13, 14]
    assert sample.mask == [0, 0, 1, 1, 0, 0, 1, 0, 1, 1]
    assert sample.behaviour_logprobs_full == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3, 0.0, -0.4, -0.5]
    assert sample.n_turns == 3 and sample.n_policy_tokens == 5


def test_history_prefix_mismatch_names_the_turn_and_position() -> None:
    turns = [record([1, 2], [10, 11], [-0.1, -0.2]), record([1, 2, 10, 99, 50], [12], [-0.3])]
    with pytest.raises(PrefixMismatch) as caught:
        history_sequence(turns, episode_id="e", group_id="g")
    assert (caught.value.turn_index, caught.value.position) == (1, 3)


def test_history_prompt_shorter_than_the_previous_context_is_a_mismatch() -> None:
    turns = [record([1, 2], [10, 11], [-0.1, -0.2]), record([1, 2, 10], [12], [-0.3])]
    with pytest.raises(PrefixMismatch) as caught:
        build_sequences("history", turns, episode_id="e", group_id="g")
    assert caught.value.position == 3


@pytest.mark.parametrize("mode", ["markovian", "history"])
@pytest.mark.parametrize(
    ("turn", "missing"),
    [
        (record(None, [10], [-0.1]), "prompt token ids"),
        (record([1], None, [-0.1]), "completion token ids"),
        (record([1], [10], None), "completion log-probs"),
    ],
)
def test_a_turn_without_token_ids_is_refused(mode: ObservationMode, turn: TurnRecord, missing: str) -> None:
    with pytest.raises(MissingTokenIds, match="never re-tokenises") as caught:
        build_sequences(mode, [record([1], [2], [-0.5]), turn], episode_id="e", group_id="g")
    assert caught.value.turn_index == 1 and caught.value.missing == [missing]


def test_logprob_count_must_match_the_completion() -> None:
    with pytest.raises(TokenCountMismatch, match="2 completion token ids but 1 log-probs"):
        markovian_sequences([record([1], [10, 11], [-0.1])], episode_id="e", group_id="g")


def test_no_turns_gives_no_sequences() -> None:
    assert build_sequences("markovian", [], episode_id="e", group_id="g") == []
    assert build_sequences("history", [], episode_id="e", group_id="g") == []


def test_turn_sample_rejects_misaligned_or_invalid_values() -> None:
    base = dict(episode_id="e", group_id="g", turn_index=0, prompt_ids=[1])
    with pytest.raises(ValidationError, match="same length"):
        TurnSample(**base, completion_ids=[2, 3], completion_mask=[1], behaviour_logprobs=[-0.1, -0.1])
    with pytest.raises(ValidationError, match="only 0 and 1"):
        TurnSample(**base, completion_ids=[2], completion_mask=[2], behaviour_logprobs=[-0.1])
    with pytest.raises(ValidationError, match="finite and <= 0"):
        TurnSample(**base, completion_ids=[2], completion_mask=[1], behaviour_logprobs=[0.5])
