"""Build directors from their command-line names (`direct`, `template`, `template:NAME`, `policy`) and
workflow files (`--workflow FILE`, reported as `workflow:STEM`).

The director modules are imported lazily so that, e.g., a `template`-only run never imports the OpenAI client.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import httpx2
from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.director.episode import Director
from operators.backends.base import ChatBackend
from training.evaluate.policy_play import PolicyPlay

DirectorName = Literal["direct", "template", "policy"]
DIRECTOR_NAMES: tuple[DirectorName, ...] = ("direct", "template", "policy")
TEMPLATE_PREFIX = "template:"
REPLAY_POLICY_URL = "http://policy-replay.invalid/v1"  # never contacted: the replay transport answers
POLICY_REPLICAS_BASE_URL = "http://policy-replicas"  # a placeholder: the replica transport picks the host


class PolicyEndpoint(BaseModel):
    """Where the policy model is served, and how its calls are seeded, recorded or replayed."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    # Replicas of the policy (`--policy-url` repeated), `url` among them: requests go through a `ReplicaPool`
    # (least in flight, one episode sticking to one replica, a dead replica's requests sent to the others).
    urls: list[Annotated[str, Field(pattern=r"^https?://\S+$")]] = Field(default_factory=list)
    model: str | None = None
    api_key_env: str | None = None  # the NAME of a variable holding the key, never the key
    seed: int | None = None
    record: Path | None = None
    replay: Path | None = None
    reask_max_tokens: int | None = Field(default=None, ge=1)  # None: the policy director's default
    play: PolicyPlay | None = None  # the training config's rollout settings; None: the director's defaults


def _policy_director(endpoint: PolicyEndpoint) -> Director:
    from openai import AsyncOpenAI

    from flowsteer_mcp.director.generation import PolicySampling
    from flowsteer_mcp.director.policy import REASK_MAX_TOKENS, PolicyDirector
    from training.evaluate.policy_recording import RecordingPolicyTransport, ReplayPolicyTransport
    from training.evaluate.recording import replay_backend

    transport: httpx2.AsyncBaseTransport | None = None
    model, url = endpoint.model, endpoint.url
    if endpoint.replay is None and len(endpoint.urls) > 1:
        from operators.backends.replicas import ReplicaPool, ReplicaTransport

        transport = ReplicaTransport(ReplicaPool(endpoint.urls, role="policy"), failover=True)
        url = POLICY_REPLICAS_BASE_URL
    if endpoint.replay is not None:
        replayer = replay_backend(endpoint.replay, policy=True)
        transport = ReplayPolicyTransport(replayer)
        model, url = model or replayer.model, url or REPLAY_POLICY_URL
    elif endpoint.record is not None:
        transport = RecordingPolicyTransport(endpoint.record, inner=transport)
    if not url or not model:
        raise ValueError("the policy director needs --policy-url and --policy-model")
    api_key = None
    if endpoint.api_key_env is not None:
        api_key = os.environ.get(endpoint.api_key_env)
        if not api_key:
            raise ValueError(f"environment variable {endpoint.api_key_env} (--policy-api-key-env) is not set or empty")
    client = AsyncOpenAI(
        base_url=url,
        api_key=api_key or "not-needed",
        max_retries=2,
        http_client=httpx2.AsyncClient(transport=transport) if transport is not None else None,
    )
    play = endpoint.play
    if play is None:
        return PolicyDirector(
            client,
            model,
            sampling=PolicySampling(seed=endpoint.seed),
            reask_max_tokens=endpoint.reask_max_tokens or REASK_MAX_TOKENS,
        )
    return PolicyDirector(
        client,
        model,
        sampling=PolicySampling(**play.sampling, seed=endpoint.seed if play.seeded else None),
        canvas_options=play.canvas,
        reask=play.reask,
        reask_max_tokens=endpoint.reask_max_tokens or play.reask_max_tokens,
        transcript=play.transcript,
    )


def build_director(
    name: str, *, executor_backend: ChatBackend | None = None, policy: PolicyEndpoint | None = None
) -> Director:
    """One director by name; raises ValueError naming what is missing."""
    if name == "direct":
        if executor_backend is None:
            raise ValueError("the direct director needs an executor backend")
        from flowsteer_mcp.director.direct import DirectDirector

        return DirectDirector(executor_backend)
    if name == "template" or name.startswith(TEMPLATE_PREFIX):
        from flowsteer_mcp.director.template import TemplateDirector

        return TemplateDirector(name.removeprefix(TEMPLATE_PREFIX) if name != "template" else None)
    if name == "policy":
        return _policy_director(policy or PolicyEndpoint())
    raise ValueError(f"unknown director {name!r}; choose from {', '.join(DIRECTOR_NAMES)} or template:NAME")


def check_director_name(name: str) -> str:
    """`name` if it names a director (`template:NAME` only with a library NAME); else ValueError listing names."""
    if name in DIRECTOR_NAMES:
        return name
    if name.startswith(TEMPLATE_PREFIX):
        from flowsteer_mcp.director.library import require_known

        require_known(name.removeprefix(TEMPLATE_PREFIX))
        return name
    raise ValueError(f"invalid choice: {name!r} (choose from {', '.join(DIRECTOR_NAMES)} or template:NAME)")


def build_workflow_director(path: Path) -> Director:
    """The `workflow:STEM` director for a workflow JSON export; ValueError/OSError when the file is unusable."""
    from flowsteer_mcp.director.template import workflow_file_director

    return workflow_file_director(path)
