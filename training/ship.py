"""Ship a trained adapter as the package's Flow-Director: the adapter folder, its card, and how it plays.

Why a function and not a checklist: the card must say exactly how the director was trained to play (observation
template, sampling, canvas options); copied by hand, one missed setting makes users play a game the policy never
learned. Everything here is taken from the training config and the adapter folder, nothing is typed in.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from flowsteer_mcp.director.card import (
    ADAPTER_CONFIG,
    ADAPTER_DIR,
    ADAPTER_WEIGHTS,
    CARD_FILE,
    OBSERVATION_FILE,
    DirectorCard,
    ShippedDirector,
    shipped_director,
)
from training.evaluate.policy_play import play_of
from training.train.config import TrainConfig


def ship_director(
    config: TrainConfig,
    adapter: Path,
    out: Path,
    *,
    name: str,
    steps: int,
    trained_on: str,
    command: str,
    results: str = "",
    temperature: float | None = None,
) -> ShippedDirector:
    """Write `out` (card.json, adapter/, the observation template) and return it as the locator reads it.

    The folder is built beside `out` and renamed into place, so a failure leaves the previous director whole.
    Raises DirectorCardError (or ValueError) when the result would not load.
    """
    for required in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not (adapter / required).is_file():
            raise ValueError(f"{adapter} is not a PEFT adapter folder: {required} is missing")
    card = DirectorCard(
        name=name,
        base_model=config.policy.model,
        adapter_bytes=(adapter / ADAPTER_WEIGHTS).stat().st_size,
        trained_on=trained_on,
        steps=steps,
        command=command,
        results=results,
        play=play_of(config, temperature=temperature),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the package folder is read by whoever installs it
    try:
        (staging / ADAPTER_DIR).mkdir()
        shutil.copyfile(adapter / ADAPTER_WEIGHTS, staging / ADAPTER_DIR / ADAPTER_WEIGHTS)
        _write_adapter_config(adapter / ADAPTER_CONFIG, staging / ADAPTER_DIR / ADAPTER_CONFIG, card.base_model)
        if config.rollout.system_template:
            shutil.copyfile(config.rollout.system_template, staging / OBSERVATION_FILE)
        text = json.dumps(card.model_dump(mode="json", exclude_defaults=True), indent=2) + "\n"
        (staging / CARD_FILE).write_text(text, encoding="utf-8")
        shipped_director(staging)  # refuse a folder the locator would refuse
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return shipped_director(out)


def _write_adapter_config(source: Path, target: Path, base_model: str) -> None:
    """Copy PEFT's adapter config with the base named as the card names it: PEFT records the trainer's local
    path (e.g. under /root/.cache), which says nothing on a user's machine and should not leave the trainer's."""
    settings = json.loads(source.read_text(encoding="utf-8"))
    if not isinstance(settings, dict):
        raise ValueError(f"{source} is not a PEFT adapter config (a JSON object)")
    settings["base_model_name_or_path"] = base_model
    target.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
