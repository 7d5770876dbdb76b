"""The shipped Flow-Director: a trained LoRA adapter and its card, carried as package data.

Why: a user should run the policy director without training one and without starting a server by hand. A
release puts the adapter in `flowsteer_mcp/director/shipped/` (`card.json` + `adapter/`, a PEFT folder) and
`flowsteer solve|eval --director policy` serve it (docs/design/shipped-director.md). This module only finds and
checks that folder; serving it needs the vLLM launcher or the local model server, which live in other layers.

`FLOWSTEER_DIRECTOR_DIR` points the locator at another folder of the same layout (tests, a director trained
locally, a newer adapter than the installed one).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from openai import AsyncOpenAI
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flowsteer_mcp.director.play import DirectorPlay
from flowsteer_mcp.director.policy import PolicyDirector
from flowsteer_mcp.errors import FlowSteerError
from operators.models.catalog import CATALOG
from operators.registry import OperatorRegistry

DIRECTOR_DIR_ENV = "FLOWSTEER_DIRECTOR_DIR"
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
CARD_FILE = "card.json"
ADAPTER_DIR = "adapter"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OBSERVATION_FILE = "observation.txt"  # the observation template a director plays on, when not the built-in one
ADAPTER_SERVED_NAME = "flow-director"
"""The name the adapter is served under (vLLM's `--lora-modules flow-director=...`, the local server's name)."""
TRAIN_DOC = "docs/design/shipped-director.md"


class DirectorCardError(FlowSteerError, ValueError):
    """A shipped director that cannot be used: no card, an unreadable card, or an adapter that does not match it."""


class NoShippedDirectorError(DirectorCardError, FileNotFoundError):
    """No Flow-Director ships with this install (or the folder `FLOWSTEER_DIRECTOR_DIR` names has none)."""


class DirectorCard(BaseModel):
    """What a release says about its adapter; the numbers come from the run that trained it, never from here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    base_model: str = Field(min_length=1)  # a prepared-model name as `flowsteer models` knows it
    adapter_bytes: int = Field(gt=0)  # size of adapter/adapter_model.safetensors: catches truncated or LFS copies
    trained_on: str = Field(min_length=1)  # the data (sources, slices) the adapter was trained on
    steps: int = Field(ge=0)
    command: str = Field(min_length=1)  # the command that trained it, to reproduce it
    results: str = ""  # a short table of measured results (Markdown), copied from the run's report
    # How it plays (observation template, sampling, canvas options): its training config's rollout settings
    play: DirectorPlay = Field(default_factory=DirectorPlay)


@dataclass(frozen=True)
class ShippedDirector:
    """A checked card and the adapter folder it describes."""

    card: DirectorCard
    folder: Path  # the folder holding card.json

    @property
    def adapter(self) -> Path:
        return self.folder / ADAPTER_DIR

    def director(self, client: AsyncOpenAI, model: str, *, registry: OperatorRegistry | None = None) -> PolicyDirector:
        """The policy director on `client`/`model` (where the adapter is served), playing the game it learned."""
        return self.card.play.director(client, model, self.folder, registry=registry)

    def identity(self) -> str:
        """Base model, card name and the adapter's digest: what an evaluation records as the policy's weights, so a
        resumed run notices a different adapter even under the same name."""
        digest = hashlib.sha256()
        with (self.adapter / ADAPTER_WEIGHTS).open("rb") as weights:
            for block in iter(lambda: weights.read(1 << 20), b""):
                digest.update(block)
        return f"{self.card.base_model} + {self.card.name}@sha256:{digest.hexdigest()[:16]}"


def director_folder() -> Path:
    """`$FLOWSTEER_DIRECTOR_DIR` when set, else the package's `shipped/` folder."""
    override = os.environ.get(DIRECTOR_DIR_ENV)
    return Path(override).expanduser() if override else SHIPPED_DIR


def shipped_director(folder: Path | None = None) -> ShippedDirector:
    """The director in `folder` (default `director_folder()`), checked; raises a DirectorCardError that says what
    is wrong and what to do instead."""
    folder = folder if folder is not None else director_folder()
    card_path = folder / CARD_FILE
    if not card_path.is_file():
        raise NoShippedDirectorError(
            f"no Flow-Director ships with this install ({_shown(card_path)} is missing); train one ({TRAIN_DOC}) "
            "or pass --policy-url/--policy-model"
        )
    try:
        card = DirectorCard.model_validate(json.loads(card_path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValidationError) as error:
        raise DirectorCardError(f"{card_path} is not a usable director card: {error}") from error
    if card.base_model.lower() not in CATALOG:
        raise DirectorCardError(
            f"{card_path} names the base model {card.base_model!r}, which `flowsteer models` does not know "
            f"(known: {', '.join(sorted(CATALOG))})"
        )
    shipped = ShippedDirector(card=card, folder=folder)
    _check_adapter(shipped)
    observation = card.play.observation
    if observation is not None and not (folder / observation).is_file():
        raise DirectorCardError(
            f"{card_path} says the director plays on the observation template {observation!r}, but "
            f"{folder / observation} is missing: copy the template its training config names into that folder"
        )
    return shipped


def _check_adapter(shipped: ShippedDirector) -> None:
    adapter = shipped.adapter
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not (adapter / name).is_file():
            raise DirectorCardError(
                f"the director {shipped.card.name!r} lacks {adapter / name} (a PEFT adapter folder)"
            )
    try:
        config = json.loads((adapter / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DirectorCardError(f"{adapter / ADAPTER_CONFIG} is not readable JSON: {error}") from error
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise DirectorCardError(f"{adapter / ADAPTER_CONFIG} does not describe a LoRA adapter (peft_type LORA)")
    size = (adapter / ADAPTER_WEIGHTS).stat().st_size
    if size != shipped.card.adapter_bytes:
        raise DirectorCardError(
            f"{adapter / ADAPTER_WEIGHTS} has {size} bytes, but its card says {shipped.card.adapter_bytes}: a "
            "truncated copy or a Git LFS pointer instead of the weights (run `git lfs pull`)"
        )


def lora_rank(shipped: ShippedDirector) -> int:
    """The adapter's LoRA rank `r` (a server must be started with at least this `--max-lora-rank`)."""
    config = json.loads((shipped.adapter / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise DirectorCardError(f"{shipped.adapter / ADAPTER_CONFIG} has no valid LoRA rank r: {rank!r}")
    return rank


def _shown(path: Path) -> str:
    """The card path as the message should show it: relative to the package for the shipped folder."""
    try:
        return str(path.relative_to(SHIPPED_DIR.parents[2]))
    except ValueError:
        return str(path)
