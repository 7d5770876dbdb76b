"""Shipped-director folders for tests: a fake one for the locator, a real random LoRA adapter for serving.

The random adapter is UNTRAINED (PEFT with random A and B matrices on smollm2-135m-instruct): it checks that a
release's adapter is found, served and spoken to end to end, never how well a director plays.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowsteer_mcp.director.card import ADAPTER_CONFIG, ADAPTER_DIR, ADAPTER_WEIGHTS, CARD_FILE
from operators.models import is_prepared

SMALL_MODEL = "smollm2-135m-instruct"

requires_small_model = pytest.mark.skipif(
    not is_prepared(SMALL_MODEL),
    reason=f"{SMALL_MODEL} is not prepared (run `flowsteer models prepare {SMALL_MODEL}`)",
)


def write_card(folder: Path, **overrides: Any) -> Path:
    """card.json for the adapter in `folder/adapter`; adapter_bytes defaults to the weights file's real size."""
    weights = folder / ADAPTER_DIR / ADAPTER_WEIGHTS
    card = {
        "name": "test-director",
        "base_model": SMALL_MODEL,
        "adapter_bytes": weights.stat().st_size if weights.is_file() else 1,
        "trained_on": "nothing: a random, untrained LoRA adapter made by the test",
        "steps": 0,
        "command": "tests/support/shipped_director.py",
        "results": "| untrained | - |",
        **overrides,
    }
    (folder / CARD_FILE).write_text(json.dumps(card), encoding="utf-8")
    return folder


def fake_director(folder: Path, **overrides: Any) -> Path:
    """A director folder whose adapter is not loadable weights: enough for the locator, not for a server."""
    adapter = folder / ADAPTER_DIR
    adapter.mkdir(parents=True, exist_ok=True)
    (adapter / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 8}), encoding="utf-8")
    (adapter / ADAPTER_WEIGHTS).write_bytes(b"not really weights")
    return write_card(folder, **overrides)


def random_lora_director(folder: Path) -> Path:
    """A director folder holding a real, randomly initialised LoRA adapter (r=8) on SMALL_MODEL."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from operators.models import resolve_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(SMALL_MODEL), dtype=torch.float32)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM"
    )
    get_peft_model(model, config).save_pretrained(str(folder / ADAPTER_DIR))
    return write_card(folder)
