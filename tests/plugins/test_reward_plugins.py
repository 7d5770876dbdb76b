"""Reward schedules plug in from outside the package: by `register_reward_schedule`, and by a real entry point
in the `flowsteer.rewards` group. A `RewardConfig` selects one by name, `compute_reward` sums its terms, and
its weights are validated when the config is."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from tests.support.distributions import install_distribution, module_name
from training.reward import RewardConfig, WorkflowShape, compute_reward
from training.reward_schedules import (
    ENTRY_POINT_GROUP,
    RewardSchedule,
    register_reward_schedule,
    reward_schedules,
)

TOY_MODULE = """
from pydantic import BaseModel, ConfigDict

from training.reward_schedules import RewardSchedule


class Weights(BaseModel):
    model_config = ConfigDict(extra="forbid")
    per_type: float = 0.5


def terms(shape, weights):
    return {"types": weights.per_type * shape.unique_types}


SCHEDULE = RewardSchedule("diversity", terms, Weights)
"""

STATS = {"total_operators": 4, "unique_types": 3}


class LengthWeights(BaseModel):
    model_config = ConfigDict(extra="forbid")
    per_operator: float = 0.1


def length_terms(shape: WorkflowShape, weights: LengthWeights) -> dict[str, float]:
    return {"length": weights.per_operator * shape.total_operators}


LENGTH = RewardSchedule("length", length_terms, LengthWeights)


def test_a_schedule_registered_from_outside_is_selected_by_name_and_used() -> None:
    assert register_reward_schedule(LENGTH) is LENGTH
    config = RewardConfig(schedule="length", weights={"per_operator": 0.2}, release=0.5)
    reward = compute_reward(STATS, correctness=1.0, finished=True, config=config)
    assert reward.schedule == "length"
    assert reward.terms == {"length": pytest.approx(0.8)}
    assert reward.released and reward.total == pytest.approx(-1.0 + 0.8 + 1.0)

    defaults = compute_reward(STATS, correctness=0.0, finished=True, config=RewardConfig(schedule="length"))
    assert defaults.terms == {"length": pytest.approx(0.4)}  # the weights model's defaults


def test_a_plug_in_schedules_weights_are_validated_with_the_config() -> None:
    register_reward_schedule(LENGTH)
    with pytest.raises(ValidationError, match="per_operatr"):
        RewardConfig(schedule="length", weights={"per_operatr": 0.2})
    with pytest.raises(ValidationError, match=r"reward\.weights is for plug-in schedules; give milestones's under"):
        RewardConfig(schedule="milestones", weights={"per_operator": 0.2})


def test_an_unknown_schedule_lists_the_registered_ones() -> None:
    register_reward_schedule(LENGTH)
    with pytest.raises(
        ValidationError, match=r"unknown reward schedule 'nope'; registered: flowsteer-v4, milestones, length"
    ):
        RewardConfig(schedule="nope")


def test_the_weights_key_stays_out_of_dumps_unless_set() -> None:
    """Configs (and the run fingerprints hashed from their dumps) from before plug-in schedules are unchanged."""
    assert "weights" not in RewardConfig().model_dump(mode="json")
    register_reward_schedule(LENGTH)
    dumped = RewardConfig(schedule="length", weights={"per_operator": 0.3}).model_dump(mode="json")
    assert dumped["weights"] == {"per_operator": 0.3}
    assert RewardConfig.model_validate(dumped).weights == {"per_operator": 0.3}


def test_a_schedule_published_as_an_entry_point_is_loaded_and_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError, match="unknown reward schedule 'diversity'"):
        RewardConfig(schedule="diversity")  # not installed yet
    reward_schedules.cache_clear()  # a fresh process: the registry is built on first use

    module = module_name("fs_reward_plugin", tmp_path)
    install_distribution(
        tmp_path / "site", module, TOY_MODULE, ENTRY_POINT_GROUP, {"diversity": f"{module}:SCHEDULE"}, monkeypatch
    )

    config = RewardConfig.model_validate({"schedule": "diversity", "weights": {"per_type": 0.25}, "release": 0.5})
    reward = compute_reward(STATS, correctness=1.0, finished=True, config=config)
    assert reward.schedule == "diversity" and reward.terms == {"types": pytest.approx(0.75)}
    assert reward.released and reward.total == pytest.approx(-1.0 + 0.75 + 1.0)
