"""Which weights the policy server serves under the evaluated name, for the journal's identity.

Why: `--policy-model trained` names a served model, not weights. A journal resumed against a server that now
serves another adapter under the same name would put two policies in one table. vLLM lists every served name
at `GET /models` with its `root` (for a LoRA module, the adapter's path) and `parent` (the base it rides on),
which is what the journal records and a resume compares.
"""

from __future__ import annotations

from typing import Any

import httpx2
import structlog

from training.errors import TrainingError

log = structlog.get_logger(__name__)

MODELS_TIMEOUT_S = 30.0


class PolicyServerError(TrainingError, ValueError):
    """The policy server answers, but not under the evaluated name; the message lists what it serves."""


def _weights_of(entry: dict[str, Any], model: str) -> str:
    root = str(entry.get("root") or model)
    parent = entry.get("parent")
    return f"{parent} + {root}" if parent else root


async def served_weights(url: str, model: str, *, api_key: str | None = None) -> str | None:
    """What the server at `url` serves as `model`: `parent + root` for an adapter, the root for a model.

    An unreachable server gives None with a warning: its episodes then fail as run failures, which withhold
    the figures and run again on `--resume`. A server that answers without `model` raises PolicyServerError,
    as every episode would fail the same way.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx2.AsyncClient(timeout=MODELS_TIMEOUT_S, headers=headers) as http:
            response = await http.get(f"{url.rstrip('/')}/models")
            response.raise_for_status()
            entries = response.json().get("data") or []
    except (httpx2.HTTPError, ValueError, AttributeError) as error:
        log.warning("policy_weights_unknown", url=url, error=f"{type(error).__name__}: {error}")
        return None
    served = {str(entry.get("id")): entry for entry in entries if isinstance(entry, dict)}
    if model not in served:
        raise PolicyServerError(
            f"the policy server at {url} serves {', '.join(sorted(served)) or 'no model'}, not {model!r}; "
            "check --policy-model (a LoRA adapter is served under its --lora-modules name)"
        )
    return _weights_of(served[model], model)
