"""The episode browser: a read-only web view of one evaluation or training run folder (`flowsteer view RUN_DIR`).

The folder is re-read on every request, because a run may still be writing it (an evaluation appends to
`items.jsonl` as episodes finish; training appends to `metrics.jsonl` and redraws its plots). Journal lines
are read through a lenient view model (`extra="ignore"`, defaults everywhere), so journals older or newer than
this code still open. Only files the index lists are ever served, and hidden tests never reach a page: of an
item's `score_details` only `SHOWN_SCORE_DETAILS` is shown (a sandbox's stderr or reason can echo a hidden
assert).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import structlog
import uvicorn
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.director.graded import ItemResult
from flowsteer_mcp.host_policy import HostGuard, HostPolicy, check_bind
from flowsteer_mcp.viewer import episode_pages as pages
from flowsteer_mcp.viewer.app import STATIC_TYPES, static_file
from flowsteer_mcp.viewer.security import SecurityHeadersMiddleware, ViewerAuth, ViewerAuthMiddleware

log = structlog.get_logger(__name__)

JOURNAL_NAME = "items.jsonl"  # an evaluation's journal (training.evaluate.journal writes it)
REPORT_NAME = "report.json"
METRICS_NAME = "metrics.jsonl"  # a training run's per-step metrics (training.train.metrics writes it)
RUN_FILES = (JOURNAL_NAME, REPORT_NAME, METRICS_NAME)  # a folder holding none of them is no run
PLOT_SUFFIXES = (".png", ".svg")
PLOT_MEDIA_TYPES = {".png": "image/png", ".svg": "image/svg+xml"}
# score_details fields that say how the grading went without revealing a test; everything else stays hidden
SHOWN_SCORE_DETAILS = ("test_kind", "status", "passed", "failed", "total", "isolation")


class EpisodeView(ItemResult):
    """One journal line as the browser reads it: the evaluation's own item schema (`ItemResult`), but lenient,
    so a journal from an older or newer harness still shows: unknown fields are ignored, missing ones default."""

    model_config = ConfigDict(extra="ignore")

    director: str = "?"
    problem_id: str = "?"
    source: str = "?"
    problem_type: str = ""

    @property
    def result(self) -> str:
        return "pass" if self.correct else "fail"

    def shown_score_details(self) -> dict[str, Any]:
        """The allow-listed grading facts (counts, status, isolation); never stderr, reasons or gold answers."""
        return {name: self.score_details[name] for name in SHOWN_SCORE_DETAILS if name in self.score_details}

    def shown_error(self) -> str | None:
        """The episode's error; a scorer's failure message can quote the tests, so only its kind is shown."""
        if self.error is not None and self.score_method == "scoring_error":
            return "scoring failed (details withheld: they may quote hidden tests)"
        return self.error

    def node_traces(self) -> list[NodeTrace]:
        """The recorded trace rows that still read as `NodeTrace`s (a malformed row is left out)."""
        rows = []
        for row in self.trace:
            try:
                rows.append(NodeTrace.model_validate(row))
            except ValidationError:
                continue
        return rows


class SummaryRow(BaseModel):
    """One (director, dataset) cell of the run's accuracy summary."""

    model_config = ConfigDict(extra="ignore")

    director: str
    source: str
    n: int
    correct: int
    score_mean: float
    ci_low: float | None = None
    ci_high: float | None = None
    failures: int = 0
    mean_tokens: float | None = None


class MetricSummary(BaseModel):
    """One training metric over the run's steps."""

    name: str
    first: float
    last: float
    low: float
    high: float


class RunFolder:
    """The files of one run folder, read afresh on each call."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def journal(self) -> Path:
        return self.path / JOURNAL_NAME

    def is_run(self) -> bool:
        """An evaluation (items.jsonl, or only its report.json) or a training run (metrics.jsonl)."""
        return any((self.path / name).is_file() for name in RUN_FILES)

    def episodes(self) -> list[tuple[int, EpisodeView]]:
        """(line index in items.jsonl, episode) for every readable item line; the header is line 0."""
        return [(index, episode) for index, episode in self._journal_lines() if episode is not None]

    def episode(self, index: int) -> EpisodeView | None:
        return next((episode for number, episode in self._journal_lines() if number == index), None)

    def _journal_lines(self) -> Iterator[tuple[int, EpisodeView | None]]:
        for index, line in enumerate(_lines(self.journal)):
            if index == 0:  # the header: {"journal": 1, "config": {...}}
                continue
            try:
                yield index, EpisodeView.model_validate_json(line)
            except ValidationError:  # a line still being written, or not an item
                yield index, None

    def summary(self, episodes: Sequence[tuple[int, EpisodeView]]) -> tuple[list[SummaryRow], str]:
        """Per director and dataset accuracy of `episodes` (this folder's): from report.json while it covers
        them all, else counted from the items."""
        report = _json_file(self.path / REPORT_NAME)
        aggregates, reported = report.get("aggregates"), report.get("items")
        current = isinstance(reported, list) and (len(reported) == len(episodes) or not self.journal.is_file())
        if isinstance(aggregates, list) and current:  # a report older than the journal would hide episodes
            parsed = [_summary_row(cell) for cell in aggregates if isinstance(cell, dict)]
            return [row for row in parsed if row is not None], REPORT_NAME
        cells: dict[tuple[str, str], list[EpisodeView]] = {}
        for _, episode in episodes:
            cells.setdefault((episode.director, episode.source), []).append(episode)
        rows = [
            SummaryRow(
                director=director,
                source=source,
                n=len(cell),
                correct=sum(episode.correct for episode in cell),
                score_mean=sum(episode.score for episode in cell) / len(cell),
            )
            for (director, source), cell in sorted(cells.items())
        ]
        return rows, JOURNAL_NAME

    def metrics(self) -> tuple[int, list[MetricSummary]]:
        """(number of steps, every numeric metric's first/last/min/max) of a training run's metrics.jsonl."""
        steps: list[dict[str, Any]] = []
        for line in _lines(self.path / METRICS_NAME):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                steps.append(row)
        series: dict[str, list[float]] = {}
        for row in steps:
            for name, value in row.items():
                if name != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                    series.setdefault(name, []).append(float(value))
        summaries = [
            MetricSummary(name=name, first=values[0], last=values[-1], low=min(values), high=max(values))
            for name, values in sorted(series.items())
        ]
        return len(steps), summaries

    def plots(self) -> dict[str, Path]:
        """Plot file name -> resolved file, from the folder and its `plots/` subfolder (the folder wins a clash).

        A link leading out of those two folders, or to a file of another kind (e.g. `x.png -> items.jsonl`),
        is not listed, so it can never be served."""
        homes = {self.path.resolve(), (self.path / "plots").resolve()}
        found: dict[str, Path] = {}
        for folder in (self.path, self.path / "plots"):
            if not folder.is_dir():
                continue
            for file in sorted(folder.iterdir()):
                resolved = file.resolve()
                is_plot = file.suffix.lower() in PLOT_SUFFIXES and resolved.suffix.lower() == file.suffix.lower()
                if is_plot and resolved.parent in homes and resolved.is_file():
                    found.setdefault(file.name, resolved)
        return found


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def _json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _summary_row(cell: dict[str, Any]) -> SummaryRow | None:
    ci = cell.get("ci")
    ci = ci if isinstance(ci, dict) else {}
    try:
        return SummaryRow.model_validate({**cell, "ci_low": ci.get("low"), "ci_high": ci.get("high")})
    except ValidationError:
        return None


# ----- app -------------------------------------------------------------------------------------------------
def _is_public(path: str) -> bool:
    """What an unauthenticated browser may fetch: the sign-in call and the viewer's own script and style."""
    return path == "/session" or path in {f"/static/{name}" for name in STATIC_TYPES}


def episodes_app(run_dir: Path, *, token: str | None = None) -> Starlette:
    """The browser over `run_dir`: `/`, `/episode/{n}`, `/plots/{name}`, static files and the sign-in POST."""
    folder = RunFolder(Path(run_dir))
    auth = ViewerAuth(token, base_path="")

    def index(request: Request) -> Response:
        chosen = pages.Filters.from_query(request.query_params)
        episodes = folder.episodes()
        summary, summary_from = folder.summary(episodes)
        steps, metrics = folder.metrics()
        body = pages.index_page(
            folder.path.name,
            episodes,
            chosen,
            summary=summary,
            summary_from=summary_from,
            steps=steps,
            metrics=metrics,
            plots=sorted(folder.plots()),
        )
        return HTMLResponse(body)

    def episode(request: Request) -> Response:
        number: int = request.path_params["n"]
        found = folder.episode(number)
        if found is None:
            return HTMLResponse(pages.missing_page(number), status_code=404)
        return HTMLResponse(pages.episode_page(number, found))

    def plot(request: Request) -> Response:
        path = folder.plots().get(request.path_params["name"])
        if path is None:
            return PlainTextResponse("no such plot in this run", status_code=404)
        return FileResponse(path, media_type=PLOT_MEDIA_TYPES[path.suffix.lower()])

    def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_TYPES:
            return PlainTextResponse("not found", status_code=404)
        return Response(static_file(name), media_type=STATIC_TYPES[name])

    routes = [
        Route("/", index),
        Route("/episode/{n:int}", episode),
        Route("/plots/{name}", plot),
        Route("/static/{name}", static),
        Route("/session", auth.sign_in, methods=["POST"]),
    ]
    middleware = [Middleware(SecurityHeadersMiddleware), Middleware(ViewerAuthMiddleware, auth=auth, public=_is_public)]
    return Starlette(routes=routes, middleware=middleware)


async def serve_episodes(run_dir: Path, *, host: str, port: int, token: str | None, log_level: str = "warning") -> None:
    """Serve `episodes_app` with the MCP server's bind rule and Host/Origin check."""
    check_bind(host, authenticated=token is not None)
    app: ASGIApp = episodes_app(run_dir, token=token)
    app = SecurityHeadersMiddleware(HostGuard(app, HostPolicy.for_server(host, (), authenticated=token is not None)))
    log.info("episode_browser", run_dir=str(run_dir), host=host, port=port, auth="token" if token else "none")
    await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level.lower())).serve()
