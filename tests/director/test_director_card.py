"""The shipped-director locator: a present director is found and checked, an absent or broken one explained."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from flowsteer_mcp.director.card import (
    ADAPTER_DIR,
    ADAPTER_WEIGHTS,
    CARD_FILE,
    DIRECTOR_DIR_ENV,
    SHIPPED_DIR,
    DirectorCardError,
    NoShippedDirectorError,
    director_folder,
    lora_rank,
    shipped_director,
)
from tests.support.shipped_director import SMALL_MODEL, fake_director


def test_a_present_director_is_found_with_its_card_and_adapter(tmp_path: Path) -> None:
    shipped = shipped_director(fake_director(tmp_path))
    assert shipped.card.name == "test-director" and shipped.card.base_model == SMALL_MODEL
    assert shipped.adapter == tmp_path / ADAPTER_DIR
    assert lora_rank(shipped) == 8
    digest = hashlib.sha256(b"not really weights").hexdigest()[:16]
    assert shipped.identity() == f"{SMALL_MODEL} + test-director@sha256:{digest}"


def test_the_environment_variable_points_the_locator_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DIRECTOR_DIR_ENV, str(fake_director(tmp_path)))
    assert director_folder() == tmp_path
    assert shipped_director().folder == tmp_path
    monkeypatch.delenv(DIRECTOR_DIR_ENV)
    assert director_folder() == SHIPPED_DIR


def test_an_absent_director_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(NoShippedDirectorError) as caught:
        shipped_director(tmp_path)
    message = str(caught.value)
    assert "no Flow-Director ships with this install" in message and str(tmp_path / CARD_FILE) in message
    assert "docs/design/shipped-director.md" in message and "--policy-url/--policy-model" in message
    assert isinstance(caught.value, FileNotFoundError)


def test_the_installed_folder_holds_a_usable_director_or_says_none_ships(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DIRECTOR_DIR_ENV, raising=False)
    if (SHIPPED_DIR / CARD_FILE).exists():
        assert shipped_director().card.name
        return
    with pytest.raises(NoShippedDirectorError, match=r"\(flowsteer_mcp/director/shipped/card\.json is missing\)"):
        shipped_director()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"results": 3}, "not a usable director card"),
        ({"seed": 1}, "Extra inputs are not permitted"),
        ({"steps": -1}, "greater than or equal to 0"),
        ({"base_model": "gpt-17"}, "which `flowsteer models` does not know"),
        ({"adapter_bytes": 999}, "a truncated copy or a Git LFS pointer"),
    ],
)
def test_a_wrong_card_is_refused_with_the_reason(tmp_path: Path, overrides: dict[str, object], message: str) -> None:
    with pytest.raises(DirectorCardError, match=message):
        shipped_director(fake_director(tmp_path, **overrides))


def test_an_unreadable_card_or_adapter_is_refused(tmp_path: Path) -> None:
    folder = fake_director(tmp_path)
    (folder / CARD_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(DirectorCardError, match="not a usable director card"):
        shipped_director(folder)
    fake_director(folder)
    (folder / ADAPTER_DIR / ADAPTER_WEIGHTS).unlink()
    with pytest.raises(DirectorCardError, match=r"lacks .*adapter_model\.safetensors"):
        shipped_director(folder)
    fake_director(folder)
    (folder / ADAPTER_DIR / "adapter_config.json").write_text(json.dumps({"peft_type": "IA3"}), encoding="utf-8")
    with pytest.raises(DirectorCardError, match="does not describe a LoRA adapter"):
        shipped_director(folder)
