"""The reward schedule registry: every `reward.schedule` a config may name, built-in or plugged in.

A schedule computes the structural terms S is summed from (`training/reward.py`). A plug-in schedule is a
`RewardSchedule`, registered with `register_reward_schedule(spec)` or published under the `flowsteer.rewards`
entry point group; its weights are given as `reward.weights` and validated by its weights model at load time,
so a typo fails before a run starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from operators.plugins import PluginRegistry

if TYPE_CHECKING:
    from training.reward import RewardConfig, WorkflowShape

__all__ = ["ENTRY_POINT_GROUP", "RewardSchedule", "register_reward_schedule", "reward_schedules"]

ENTRY_POINT_GROUP = "flowsteer.rewards"


@dataclass(frozen=True)
class RewardSchedule:
    """One schedule: `terms(shape, weights)` -> each S term by name, and the pydantic model of its weights.

    `weights` None: the schedule takes none (`terms` gets None). `config_field`: the `RewardConfig` field that
    holds a built-in schedule's weights (`flowsteer_v4`, `milestones`); a plug-in's come from `reward.weights`.
    """

    name: str
    terms: Callable[[WorkflowShape, Any], Mapping[str, float]]
    weights: type[BaseModel] | None = None
    config_field: str | None = None

    def weights_for(self, config: RewardConfig) -> BaseModel | None:
        """This schedule's weights in `config`; raises `ValueError` for weights it does not accept."""
        if self.config_field is not None:
            if config.weights:
                raise ValueError(
                    f"reward.weights is for plug-in schedules; give {self.name}'s under {self.config_field}"
                )
            weights: BaseModel = getattr(config, self.config_field)
            return weights
        if self.weights is None:
            if config.weights:
                raise ValueError(f"reward schedule {self.name!r} takes no weights, but reward.weights is set")
            return None
        return self.weights.model_validate(config.weights)


def _builtin_schedules() -> tuple[RewardSchedule, ...]:
    from training.reward import FlowSteerV4Weights, MilestoneWeights, flowsteer_v4_terms, milestone_terms

    return (
        RewardSchedule("flowsteer-v4", flowsteer_v4_terms, FlowSteerV4Weights, config_field="flowsteer_v4"),
        RewardSchedule("milestones", milestone_terms, MilestoneWeights, config_field="milestones"),
    )


@lru_cache(maxsize=1)
def reward_schedules() -> PluginRegistry[RewardSchedule]:
    """The built-in schedules plus every installed plug-in (loaded once, on first use)."""
    registry = PluginRegistry(
        kind="reward schedule",
        group=ENTRY_POINT_GROUP,
        spec_type=RewardSchedule,
        name_of=lambda spec: spec.name,
        builtins=_builtin_schedules(),
    )
    registry.load_entry_points()
    return registry


def register_reward_schedule(spec: RewardSchedule) -> RewardSchedule:
    """Make `spec` selectable as `reward.schedule` in this process."""
    return reward_schedules().register(spec)
