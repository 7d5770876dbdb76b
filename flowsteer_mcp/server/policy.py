"""Where `solve(director="policy")` finds its Flow-Director, and how the policy drives the server's own canvas.

Why: a client should be able to let the learned director design a workflow with one call, on the same canvas
the tools edit. The policy is an OpenAI-compatible endpoint, found one of two ways:

- `--policy-url/--policy-model`: an endpoint the operator of this server runs;
- `--serve-director`: the server serves the shipped director (flowsteer_mcp/director/card.py) itself, from its
  lifespan's start to its end, with the `DirectorServing` function the `flowsteer serve` command passes in (this
  package cannot import the `training` layer that starts vLLM or the local model server). Serving loads a model,
  which takes minutes, so it starts in the background: calls made before it is ready are refused with a message
  saying so, and the server answers everything else meanwhile.

Without either, `solve` stays listed, and a policy call is refused with the flag to pass and the locator's word
on the shipped director; nothing is created. The director drives the canvas in process (`KitLink`): each turn
goes through the same `Canvas.act` as the `act` tool, under the same busy rule and progress reporting, without a
second MCP connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.director.card import DirectorCardError, ShippedDirector, shipped_director
from flowsteer_mcp.director.link import CanvasCallError
from flowsteer_mcp.director.served import DirectorServing, ServeMode
from flowsteer_mcp.server.settings import ServerSettings
from flowsteer_mcp.server.toolkit import ToolKit
from flowsteer_mcp.server.tools import detail_of, step_of

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
    ) -> None:
        if (shipped is None) != (serving is None):
            raise ValueError("serving the shipped director needs both the director and a serving function")
        self.fixed = fixed
        self.shipped = shipped
        self._serving = serving
        self._mode = mode
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
        return cls(shipped=shipped_director(), serving=serving, mode=settings.serve_director)

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
            async with self._serving(self.shipped, self._mode) as served:
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


class KitLink:
    """`CanvasCalls` on this server's own canvas: what the policy director calls, without an MCP round trip.

    Only the three tools a policy episode uses are here; each answers the JSON its MCP tool would."""

    def __init__(self, kit: ToolKit, ctx: Context, options: CanvasOptions) -> None:
        self.kit = kit
        self.ctx = ctx
        self.options = options
        self.workflow_id: str | None = None

    async def create(self, task: TaskSpec, options: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            created = await self.kit.created(
                CanvasState(task=task, options=self.options), "Workflow created for the Flow-Director."
            )
        except ToolError as error:
            raise CanvasCallError(f"create_workflow: {error}") from None
        self.workflow_id = created.workflow_id
        return created.model_dump(mode="json")

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        workflow_id = str(arguments["workflow_id"])
        try:
            if tool == "act":
                async with self.kit.working(workflow_id, self.ctx, "solve") as (canvas, progress):
                    step = step_of(workflow_id, await canvas.act(str(arguments["text"]), progress))
                return step.model_dump(mode="json")
            if tool == "get_workflow":
                async with self.kit.opened(workflow_id, write=False) as canvas:
                    return detail_of(workflow_id, canvas).model_dump(mode="json")
        except ToolError as error:
            raise CanvasCallError(f"{tool}: {error}") from None
        raise CanvasCallError(f"{tool}: not offered to an in-process director")
