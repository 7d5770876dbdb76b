"""Where `solve(director="policy")` finds its Flow-Director.

Why: a client should be able to let the learned director design a workflow with one call, on the same canvas
the tools edit. The policy is an OpenAI-compatible endpoint, found one of two ways:

- `--policy-url/--policy-model`: an endpoint the operator of this server runs;
- `--serve-director`: the server serves the shipped director (flowsteer_mcp/director/card.py) itself, from its
  lifespan's start to its end, with the `DirectorServing` function the `flowsteer serve` command passes in (this
  package cannot import the `training` layer that starts vLLM or the local model server). Serving loads a model,
  which takes minutes, so it starts in the background: calls made before it is ready are refused with a message
  saying so, and the server answers everything else meanwhile.

Without either, `solve` stays listed, and a policy call is refused with the flag to pass and the locator's word
on the shipped director; nothing is created. The server's state (`ToolKit.policy`) holds the `PolicySource`, and
its lifespan serves the shipped director; the director drives the canvas in process (kit_link.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import structlog
from mcp.server.mcpserver.exceptions import ToolError

from flowsteer_mcp.director.card import DirectorCardError, ShippedDirector, shipped_director
from flowsteer_mcp.director.served import DirectorServing, ServeMode
from flowsteer_mcp.server.settings import ServerSettings

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class PolicyEndpoint:
    url: str  # an OpenAI client's base_url
    model: str  # the served model name
    via: str  # "policy-url" (the operator's endpoint), "vllm" or "local" (served by this server)


class PolicySource:
    """The policy endpoint of this server: fixed (`--policy-url`), served by the server, or none."""

    def __init__(
        self,
        fixed: PolicyEndpoint | None = None,
        shipped: ShippedDirector | None = None,
        serving: DirectorServing | None = None,
        mode: ServeMode = "auto",
        executor_url: str | None = None,
    ) -> None:
        if (shipped is None) != (serving is None):
            raise ValueError("serving the shipped director needs both the director and a serving function")
        self.fixed = fixed
        self.shipped = shipped
        self._serving = serving
        self._mode = mode
        self._executor_url = executor_url  # mode `executor`: the server the adapter is loaded onto
        self._served: PolicyEndpoint | None = None
        self._problem: str | None = None
        self._running = False

    @classmethod
    def from_settings(cls, settings: ServerSettings, serving: DirectorServing | None) -> PolicySource:
        """Raises ValueError (a DirectorCardError among them) when `--serve-director` cannot be honoured."""
        if settings.policy_url is not None and settings.policy_model is not None:
            return cls(fixed=PolicyEndpoint(settings.policy_url, settings.policy_model, "policy-url"))
        if settings.serve_director is None:
            return cls()
        if serving is None:
            raise ValueError(
                "--serve-director needs the model servers of the `flowsteer` command: run `flowsteer serve "
                "--serve-director ...`, or start the director yourself and pass --policy-url/--policy-model"
            )
        return cls(
            shipped=shipped_director(),
            serving=serving,
            mode=settings.serve_director,
            executor_url=settings.director_executor_url,
        )

    @property
    def configured(self) -> bool:
        return self.fixed is not None or self.shipped is not None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The server's lifespan: serve the shipped director in the background while it lasts (once: a nested
        lifespan, e.g. a second in-memory client, shares the first one's server)."""
        if self.shipped is None or self._running:
            yield
            return
        self._running, self._problem = True, None
        stop = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._serve, stop)
                try:
                    yield
                finally:
                    stop.set()
        finally:
            self._running, self._served = False, None

    async def _serve(self, stop: anyio.Event) -> None:
        assert self.shipped is not None and self._serving is not None
        name = self.shipped.card.name
        log.info("director_serving", director=name, mode=self._mode)
        try:
            async with self._serving(self.shipped, self._mode, executor_url=self._executor_url) as served:
                self._served = PolicyEndpoint(served.url, served.model, served.via)
                log.info("director_served", director=name, via=served.via, url=served.url)
                await stop.wait()
        except Exception as error:  # the serving layer's errors (DirectorServingError...) are not ours to type
            self._problem = f"the shipped director {name!r} could not be served: {error}"
            log.warning("director_serving_failed", director=name, error=str(error))
        finally:
            self._served = None

    def endpoint(self) -> PolicyEndpoint:
        """The endpoint to call now, or a ToolError that says what to do."""
        if self.fixed is not None:
            return self.fixed
        if self.shipped is not None:
            if self._served is not None:
                return self._served
            if self._problem is not None:
                raise ToolError(f"{self._problem}. Restart the server, or pass --policy-url/--policy-model.")
            if self._running:
                raise ToolError(
                    f"the shipped director {self.shipped.card.name!r} is still starting (its model server loads "
                    f"{self.shipped.card.base_model}, which takes minutes); call again shortly, or use "
                    "director='library' meanwhile."
                )
            raise ToolError("the shipped director is served only while the server runs (stdio or HTTP).")
        raise ToolError(_unconfigured())


def _unconfigured() -> str:
    try:
        shipped = shipped_director()
    except DirectorCardError as error:
        ships = f"Note: {error}."
    else:
        ships = f"The installed director {shipped.card.name!r} is served by `flowsteer serve --serve-director`."
    return (
        "solve with director='policy' needs a Flow-Director, and this server has none configured: start it with "
        "--policy-url URL --policy-model NAME (an OpenAI-compatible endpoint serving the policy) or, to serve the "
        f"shipped director, with `flowsteer serve --serve-director`. {ships} Nothing was created; "
        "director='library' works without one."
    )
