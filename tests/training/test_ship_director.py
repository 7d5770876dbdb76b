"""Shipping an adapter: the card records how the director was trained to play, and every player uses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowsteer_mcp.director.card import CARD_FILE, OBSERVATION_FILE, DirectorCardError, shipped_director
from flowsteer_mcp.director.play import DirectorPlay
from tests.support.shipped_director import fake_director
from training.evaluate.policy_play import play_of, policy_play, shipped_play
from training.ship import ship_director
from training.train.config import load_train_config

CONFIG = Path("configs/cpu-director.yaml")


def _ship(tmp_path: Path) -> Path:
    adapter_source = fake_director(tmp_path / "trained") / "adapter"
    out = tmp_path / "shipped"
    ship_director(
        load_train_config(CONFIG),
        adapter_source,
        out,
        name="flow-director-test",
        steps=3,
        trained_on="a test",
        command="flowsteer train sft --config configs/cpu-director.yaml",
    )
    return out


def test_the_card_carries_the_training_runs_game(tmp_path: Path) -> None:
    out = _ship(tmp_path)
    shipped = shipped_director(out)
    config = load_train_config(CONFIG)
    play = shipped.card.play
    assert play.sampling.stop == ["\n"] and play.sampling.temperature == 1.0
    assert play.sampling.max_action_tokens == config.rollout.sampling.max_action_tokens
    assert play.canvas == config.rollout.canvas.model_dump(mode="json")
    assert play.canvas_options()["max_rounds"] == 3 and play.canvas_options()["finish"] == "relaxed"
    assert play.seeded is False and play.reask is False
    assert (out / OBSERVATION_FILE).read_text() == Path(config.rollout.system_template or "").read_text()
    assert shipped.card.adapter_bytes == (out / "adapter" / "adapter_model.safetensors").stat().st_size


def test_evaluation_plays_the_card_as_it_would_play_the_config(tmp_path: Path) -> None:
    """`flowsteer eval --director policy` on the shipped director and `--policy-config` on its training config
    give the same game (only where the settings came from differs)."""
    from_card = shipped_play(shipped_director(_ship(tmp_path)))
    from_config = policy_play(CONFIG)
    assert from_card.identity() == from_config.identity()
    assert from_card.source == "card:flow-director-test"


def test_a_shipped_director_renders_its_own_system_prompt(tmp_path: Path) -> None:
    """It reads the template it was trained on, whatever the server it plays on was started with."""
    from openai import AsyncOpenAI

    shipped = shipped_director(_ship(tmp_path))
    director = shipped.director(AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="x"), "flow-director")
    system = director._system_prompt()
    assert director.own_system_prompt and director.canvas_options["max_rounds"] == 3
    assert system.startswith(Path(load_train_config(CONFIG).rollout.system_template or "").read_text()[:40])


def test_the_shipped_adapter_names_its_base_by_catalog_name_not_the_trainers_path(tmp_path: Path) -> None:
    """PEFT records where the trainer's base model lay (e.g. /root/.cache/...); a release must not carry that
    machine's path, and the adapter's own config must name the base the card names."""
    source = fake_director(tmp_path / "trained") / "adapter"
    trained = json.loads((source / "adapter_config.json").read_text())
    trained["base_model_name_or_path"] = "/home/trainer/.cache/flowsteer/models/smollm2-135m-instruct"
    (source / "adapter_config.json").write_text(json.dumps(trained))
    out = tmp_path / "shipped"
    config = load_train_config(CONFIG)
    ship_director(config, source, out, name="x", steps=1, trained_on="x", command="x")
    shipped = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert shipped == {**trained, "base_model_name_or_path": config.policy.model}
    assert shipped_director(out).card.base_model == config.policy.model


def test_the_packaged_director_names_its_base_by_catalog_name() -> None:
    packaged = Path("flowsteer_mcp/director/shipped")
    adapter_config = json.loads((packaged / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == shipped_director(packaged).card.base_model


def test_a_card_without_play_settings_plays_the_defaults(tmp_path: Path) -> None:
    shipped = shipped_director(fake_director(tmp_path))
    assert shipped.card.play == DirectorPlay()


def test_a_card_whose_template_is_missing_is_refused(tmp_path: Path) -> None:
    out = _ship(tmp_path)
    (out / OBSERVATION_FILE).unlink()
    with pytest.raises(DirectorCardError, match="observation template"):
        shipped_director(out)


def test_a_card_with_unknown_canvas_options_is_refused(tmp_path: Path) -> None:
    out = _ship(tmp_path)
    card = json.loads((out / CARD_FILE).read_text())
    card["play"]["canvas"]["max_round"] = 3
    (out / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(DirectorCardError, match="max_round"):
        shipped_director(out)


def test_shipping_refuses_a_folder_that_is_no_adapter_and_keeps_the_old_one(tmp_path: Path) -> None:
    out = _ship(tmp_path)
    before = (out / CARD_FILE).read_bytes()
    with pytest.raises(ValueError, match="not a PEFT adapter folder"):
        ship_director(load_train_config(CONFIG), tmp_path, out, name="x", steps=1, trained_on="x", command="x")
    assert (out / CARD_FILE).read_bytes() == before


def test_play_of_the_warm_start_config_matches_its_rollouts() -> None:
    play = play_of(load_train_config(CONFIG))
    assert play.observation == OBSERVATION_FILE and play.transcript is False


def test_a_deployment_may_play_at_another_temperature_only() -> None:
    config = load_train_config(CONFIG)
    greedy, rollouts = play_of(config, temperature=0.0), play_of(config)
    assert greedy.sampling.temperature == 0.0 and rollouts.sampling.temperature == 1.0
    assert greedy.model_copy(update={"sampling": rollouts.sampling}) == rollouts
