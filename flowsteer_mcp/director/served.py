"""A served Flow-Director: where its OpenAI-compatible endpoint listens and under which names.

Why a separate type: `flowsteer solve` (this package) plays the shipped director, but the servers that can serve
it (a vLLM child process, the local transformers server) are started by the `training` layer, which this package
must not import. The command therefore receives a `DirectorServing` function from its caller and speaks to what
it yields only through this description.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.director.card import ShippedDirector

StartMode = Literal["auto", "vllm", "local"]  # a server the command starts for the director
SERVE_MODES: tuple[StartMode, ...] = ("auto", "vllm", "local")  # what a command with no executor server offers
# executor: load the adapter onto the executor's own running vLLM server (one server, one copy of the base
# weights), for commands whose executor is such a server and whose director's base model is the executor's.
ServeMode = Literal[StartMode, "executor"]
SERVE_MODES_WITH_EXECUTOR: tuple[ServeMode, ...] = (*SERVE_MODES, "executor")


class ServedDirector(BaseModel):
    """An endpoint serving the adapter, valid while the serving context is open."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(pattern=r"^https?://\S+/v1$")  # an OpenAI client's base_url
    model: str = Field(min_length=1)  # the adapter's served name
    # The bare base model's name at the same url, when the server also serves it (vLLM does): an executor of the
    # same base model can use it, so one server and one copy of the weights serve both roles. None: not served.
    base_model: str | None = None
    via: Literal["vllm", "local", "executor"]


class DirectorServing(Protocol):
    """Serves a shipped director for as long as the returned context is open; stops whatever it started.
    `executor_url` is the executor's own server, which mode `executor` loads the adapter onto."""

    def __call__(
        self, shipped: ShippedDirector, mode: ServeMode, *, executor_url: str | None = None
    ) -> AbstractAsyncContextManager[ServedDirector]: ...
