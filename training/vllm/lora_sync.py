"""Hand each optimizer step's LoRA adapter to a running vLLM server under a fresh name, and prove it is live.

One name and one folder per step (`<run>@<step>` from `adapters/step-<step>`): vLLM keeps serving the old
weights when a name is reloaded from the same path, so reuse would silently roll out a stale policy. Every
failure is fatal (`LoraSyncError`): generating from the base model while believing it is the adapter
would corrupt the CWRPO ratio without any visible symptom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2
import structlog
from pydantic import BaseModel, ConfigDict, Field

from training.errors import TrainingError

log = structlog.get_logger(__name__)

ADAPTER_CONFIG = "adapter_config.json"


class LoraSyncError(TrainingError, RuntimeError):
    """An adapter could not be loaded, confirmed or retired; the message carries the server's own words."""


class ProbeDelta(BaseModel):
    """How much a fixed probe prompt's token log-probs differ between the base model and an adapter."""

    model_config = ConfigDict(frozen=True)

    base_model: str
    adapter: str
    tokens_compared: int = Field(ge=0)
    max_abs_diff: float = Field(ge=0.0)

    @property
    def changed(self) -> bool:
        return self.max_abs_diff > 0.0


def adapter_name(run_name: str, step: int) -> str:
    """The served name of the adapter written after optimizer step `step`."""
    return f"{run_name}@{step}"


class LoraSync:
    """Publishes adapters to one vLLM server for one run and keeps at most `max_loaded` of them loaded.

    Only names this object loaded are ever unloaded, so a shared server's other models (the executor, other
    runs) are left alone. `max_loaded` should not exceed the server's `--max-loras`.
    """

    def __init__(
        self,
        server_base_url: str,
        run_name: str,
        *,
        max_loaded: int = 1,
        client: httpx2.AsyncClient | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        if not run_name or "@" in run_name or run_name.strip() != run_name:
            raise ValueError(f"run_name must be non-empty, without '@' or surrounding spaces, got {run_name!r}")
        if max_loaded < 1:
            raise ValueError(f"max_loaded must be >= 1, got {max_loaded}")
        self.base_url = server_base_url.rstrip("/")
        self.run_name = run_name
        self.max_loaded = max_loaded
        self.timeout_s = timeout_s
        self._owns_client = client is None
        self._client = client or httpx2.AsyncClient(timeout=timeout_s)
        self._loaded: list[str] = []  # oldest first

    @property
    def loaded(self) -> list[str]:
        """Adapter names this object has loaded and not yet unloaded, oldest first."""
        return list(self._loaded)

    @property
    def current(self) -> str | None:
        """The newest published adapter name: what rollouts should use as `model`."""
        return self._loaded[-1] if self._loaded else None

    async def publish(self, adapter_dir: Path, step: int) -> str:
        """Load `adapter_dir` (already written by peft `save_pretrained`) as `<run>@<step>` and confirm it.

        Then unloads this run's oldest names beyond `max_loaded`. Returns the new name.
        """
        name = adapter_name(self.run_name, step)
        path = self._checked_adapter_dir(adapter_dir, step, name)
        await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, action=f"load {name}")
        self._loaded.append(name)
        cards = await self.model_cards()
        card = next((c for c in cards if c.get("id") == name), None)
        if card is None:
            raise LoraSyncError(
                f"vLLM accepted {name} but does not list it in /v1/models (serves {[c.get('id') for c in cards]})"
            )
        root = card.get("root")
        if root is not None and Path(str(root)) != path:
            raise LoraSyncError(f"vLLM serves {name} from {root}, not from {path}")
        log.info("lora_published", name=name, path=str(path), step=step)
        while len(self._loaded) > self.max_loaded:
            await self.unload(self._loaded[0])
        return name

    async def adopt(self, step: int) -> str:
        """Take over `<run>@<step>` that the server already serves (a resumed run attached to the server the
        killed run used): loading it again would be refused, and it is exactly the checkpoint's adapter."""
        name = adapter_name(self.run_name, step)
        if name in self._loaded:
            raise LoraSyncError(f"{name} is already tracked by this sync")
        if name not in [c.get("id") for c in await self.model_cards()]:
            raise LoraSyncError(f"cannot adopt {name}: the server does not serve it")
        self._loaded.append(name)
        log.info("lora_adopted", name=name, step=step)
        while len(self._loaded) > self.max_loaded:
            await self.unload(self._loaded[0])
        return name

    async def served(self) -> list[str]:
        """The model names the server lists in `/v1/models` (its base model and every loaded adapter)."""
        return [str(card.get("id")) for card in await self.model_cards()]

    async def unload_later_than(self, step: int) -> list[str]:
        """Unload this run's adapters for steps after `step` that the server still serves: a killed run
        published them after its last checkpoint, and the resumed run will publish those steps afresh."""
        stale: list[str] = []
        for card in await self.model_cards():
            run, sep, suffix = str(card.get("id", "")).rpartition("@")
            if sep and run == self.run_name and suffix.isdigit() and int(suffix) > step:
                stale.append(f"{run}@{suffix}")
        for name in stale:
            response = await self._request(
                "POST", "/v1/unload_lora_adapter", {"lora_name": name}, action=f"unload {name}"
            )
            if response.status_code not in (200, 404):
                raise LoraSyncError(f"unload {name} failed ({response.status_code}): {_server_message(response)}")
            log.info("lora_unloaded_stale", name=name)
        return stale

    async def unload(self, name: str) -> None:
        """Unload one of this run's adapters; an adapter the server no longer knows counts as unloaded."""
        if name not in self._loaded:
            raise LoraSyncError(f"{name} was not loaded by this sync (loaded: {self._loaded})")
        response = await self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name}, action=f"unload {name}")
        if response.status_code == 404:
            log.warning("lora_unload_missing", name=name, message=_server_message(response))
        elif response.status_code != 200:
            raise LoraSyncError(f"unload {name} failed ({response.status_code}): {_server_message(response)}")
        self._loaded.remove(name)
        log.info("lora_unloaded", name=name)

    async def verify_changed(
        self, probe_messages: Sequence[dict[str, str]], *, base_model: str, adapter: str | None = None
    ) -> ProbeDelta:
        """Compare the probe prompt's token log-probs under the base model and under `adapter` (default: current).

        A delta of zero after training steps means the server is not applying the adapter (stale-adapter guard).
        A freshly initialised peft adapter (B = 0) legitimately gives zero.
        """
        adapter = adapter or self.current
        if adapter is None:
            raise LoraSyncError("verify_changed needs an adapter: nothing has been published yet")
        base = await self._prompt_logprobs(probe_messages, base_model)
        tuned = await self._prompt_logprobs(probe_messages, adapter)
        if len(base) != len(tuned):
            raise LoraSyncError(
                f"probe tokenised differently for {base_model} ({len(base)}) and {adapter} ({len(tuned)})"
            )
        diffs = [abs(a - b) for a, b in zip(base, tuned, strict=True)]
        return ProbeDelta(
            base_model=base_model, adapter=adapter, tokens_compared=len(diffs), max_abs_diff=max(diffs, default=0.0)
        )

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it (adapters stay loaded)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> LoraSync:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- internals ----------------------------------------------------------------------------------------------

    def _checked_adapter_dir(self, adapter_dir: Path, step: int, name: str) -> Path:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise LoraSyncError(f"step must be a non-negative int, got {step!r}")
        if name in self._loaded:
            raise LoraSyncError(f"{name} is already loaded: publish each optimizer step once, from a new folder")
        path = Path(adapter_dir).expanduser().resolve()
        if not (path / ADAPTER_CONFIG).is_file():
            raise LoraSyncError(f"{path} is not a saved peft adapter (no {ADAPTER_CONFIG})")
        return path

    async def _request(self, method: str, route: str, body: dict[str, Any] | None, *, action: str) -> httpx2.Response:
        try:
            return await self._client.request(method, f"{self.base_url}{route}", json=body)
        except httpx2.HTTPError as error:
            raise LoraSyncError(f"{action}: cannot reach vLLM at {self.base_url}: {error!r}") from error

    async def _post(self, route: str, body: dict[str, Any], *, action: str) -> httpx2.Response:
        response = await self._request("POST", route, body, action=action)
        if response.status_code != 200:
            raise LoraSyncError(f"{action} failed ({response.status_code}): {_server_message(response)}")
        return response

    async def model_cards(self) -> list[dict[str, Any]]:
        """The server's `/v1/models` entries (id, root, parent: None for a base model, the base for an adapter)."""
        response = await self._request("GET", "/v1/models", None, action="list models")
        if response.status_code != 200:
            raise LoraSyncError(f"GET /v1/models failed ({response.status_code}): {_server_message(response)}")
        data = _json(response).get("data")
        if not isinstance(data, list) or not all(isinstance(card, dict) for card in data):
            raise LoraSyncError(f"/v1/models returned an unexpected payload: {response.text[:300]}")
        return data

    async def _prompt_logprobs(self, messages: Sequence[dict[str, str]], model: str) -> list[float]:
        """Log-prob of each prompt token (after the first) under `model`, via vLLM's `prompt_logprobs` extension."""
        body = {"model": model, "messages": list(messages), "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
        response = await self._post("/v1/chat/completions", body, action=f"probe {model}")
        positions = _json(response).get("prompt_logprobs")
        if not isinstance(positions, list):
            raise LoraSyncError(f"probe {model}: the server returned no prompt_logprobs")
        values: list[float] = []
        for position in positions:
            if not position:  # the first prompt token has no log-prob
                continue
            # With prompt_logprobs=0 each position holds just the actual prompt token.
            entry = next(iter(position.values()))
            value = float(entry["logprob"] if isinstance(entry, dict) else entry)
            values.append(value if math.isfinite(value) else -1e30)
        return values


def _json(response: httpx2.Response) -> dict[str, Any]:
    try:
        payload = response.json()
    except ValueError as error:
        raise LoraSyncError(f"vLLM answered {response.status_code} with non-JSON: {response.text[:300]}") from error
    if not isinstance(payload, dict):
        raise LoraSyncError(f"vLLM answered {response.status_code} with unexpected JSON: {response.text[:300]}")
    return payload


def _server_message(response: httpx2.Response) -> str:
    """vLLM's error text: `{"error": {"message": ...}}` or `{"message": ...}` or `{"detail": ...}`, else the body."""
    try:
        payload = response.json()
    except ValueError:
        return response.text[:500] or "<empty body>"
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for key in ("message", "detail", "error"):
            if payload.get(key):
                return str(payload[key])
    return response.text[:500]
