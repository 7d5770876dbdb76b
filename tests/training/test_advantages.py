"""Group-relative advantages: hand-computed values, per-group independence, zero-variance handling."""

from __future__ import annotations

import math

import pytest

from training.advantages import group_advantages, turn_advantage


def test_single_group_matches_hand_computation() -> None:
    # rewards 1, 0, 0, -1: mean 0, population variance (1 + 0 + 0 + 1) / 4 = 0.5, std = 0.70710678...
    advantages, stats = group_advantages([1.0, 0.0, 0.0, -1.0], ["p"] * 4, eps=0.0)
    root_half = math.sqrt(0.5)
    assert advantages == pytest.approx([1 / root_half, 0.0, 0.0, -1 / root_half])
    assert advantages[0] == pytest.approx(1.4142135623730951)
    assert stats.n_groups == 1
    assert stats.n_zero_variance_groups == 0


def test_eps_is_added_to_the_std() -> None:
    # rewards 2, 0: mean 1, std 1 -> (2 - 1) / (1 + 0.5) = 2/3.
    advantages, _ = group_advantages([2.0, 0.0], ["g", "g"], eps=0.5)
    assert advantages == pytest.approx([2 / 3, -2 / 3])


def test_groups_are_normalised_independently_and_order_is_kept() -> None:
    # group a: 0, 1 (mean .5, std .5) -> -1, +1; group b: 10, 20, 30 (mean 20, std sqrt(200/3)=8.1649658).
    rewards = [0.0, 10.0, 1.0, 20.0, 30.0]
    groups = ["a", "b", "a", "b", "b"]
    advantages, stats = group_advantages(rewards, groups, eps=0.0)
    b_std = math.sqrt(200 / 3)
    assert advantages == pytest.approx([-1.0, -10 / b_std, 1.0, 0.0, 10 / b_std])
    assert stats.n_groups == 2
    assert stats.n_samples == 5
    assert stats.mean_group_std == pytest.approx((0.5 + b_std) / 2)
    assert stats.reward_mean == pytest.approx(12.2)


def test_each_group_sums_to_zero() -> None:
    rewards = [0.3, -1.0, 0.9, 0.1, -0.4, 0.2, 0.7]
    groups = ["x", "y", "x", "y", "x", "y", "x"]
    advantages, _ = group_advantages(rewards, groups)
    for group in ("x", "y"):
        assert sum(a for a, g in zip(advantages, groups, strict=True) if g == group) == pytest.approx(0.0, abs=1e-12)


def test_scale_none_only_centres() -> None:
    advantages, _ = group_advantages([3.0, 1.0, 2.0], ["g"] * 3, scale="none")
    assert advantages == pytest.approx([1.0, -1.0, 0.0])


def test_zero_variance_groups_are_counted_with_exactly_zero_advantage() -> None:
    rewards = [-0.2, -0.2, -0.2, 1.0, 0.0]
    groups = ["flat", "flat", "flat", "live", "live"]
    advantages, stats = group_advantages(rewards, groups)
    assert advantages[:3] == [0.0, 0.0, 0.0]
    assert advantages[3] == pytest.approx(1.0, rel=1e-5)
    assert stats.n_zero_variance_groups == 1
    assert stats.zero_variance_share == 0.5
    assert stats.keep == [True] * 5  # counted, not dropped, unless asked
    assert stats.n_dropped == 0


def test_zero_variance_groups_can_be_dropped_with_a_mask() -> None:
    rewards = [-0.2, -0.2, 1.0, 0.0, 5.0]
    groups = ["flat", "flat", "live", "live", "singleton"]
    _, stats = group_advantages(rewards, groups, drop_zero_variance=True)
    assert stats.keep == [False, False, True, True, False]  # a singleton has no spread either
    assert stats.n_dropped == 3
    assert stats.n_zero_variance_groups == 2
    assert stats.zero_variance_share == pytest.approx(2 / 3)


def test_float_noise_is_not_blown_up_into_signal() -> None:
    # The reference's std floor of 0.01 turns a 1e-12 spread into |A| ~ 1; here it is no spread at all.
    advantages, stats = group_advantages([0.5, 0.5 + 1e-12], ["g", "g"])
    assert advantages == [0.0, 0.0]
    assert stats.n_zero_variance_groups == 1


def test_source_grouping_is_just_other_group_ids() -> None:
    # `grouping: source`: the caller passes dataset names; four problems from two sources.
    rewards = [1.0, 0.0, 0.5, 0.5]
    sources = ["gsm8k", "gsm8k", "hotpotqa", "hotpotqa"]
    advantages, stats = group_advantages(rewards, sources, eps=0.0)
    assert advantages == pytest.approx([1.0, -1.0, 0.0, 0.0])
    assert stats.n_groups == 2


@pytest.mark.parametrize(
    ("rewards", "groups", "kwargs", "message"),
    [
        ([1.0, 2.0], ["a"], {}, "group ids"),
        ([], [], {}, "no rewards"),
        ([1.0, float("nan")], ["a", "a"], {}, "finite"),
        ([1.0, 2.0], ["a", "a"], {"eps": -1.0}, "eps"),
        ([1.0, 2.0], ["a", "a"], {"scale": "mad"}, "scale"),
    ],
)
def test_bad_input_is_rejected(rewards: list[float], groups: list[str], kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, groups, **kwargs)


def test_a_refused_turn_keeps_a_negative_advantage_and_loses_a_positive_one() -> None:
    assert turn_advantage(0.7, refused=True, rule="never_reinforce") == 0.0
    assert turn_advantage(-0.4, refused=True, rule="never_reinforce") == -0.4
    assert turn_advantage(0.7, refused=False, rule="never_reinforce") == 0.7
    assert turn_advantage(0.7, refused=True, rule="share") == 0.7
