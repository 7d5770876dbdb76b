"""Each graded item keeps its final run's per-node trace (for the episode browser); old journals still resume."""

from __future__ import annotations

import json
from pathlib import Path

from mcp import Client

from flowsteer_mcp.canvas.execution import NoRunner
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.episode import EpisodeResult
from flowsteer_mcp.director.graded import ItemResult
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.store.memory import MemoryStore
from training.data import Problem
from training.evaluate.journal import JOURNAL_NAME, ItemJournal
from training.evaluate.results import EvalConfig
from training.evaluate.runner import TRACE_OUTPUT_CHARS, run_episode

LONG_OUTPUT = "x" * (TRACE_OUTPUT_CHARS + 500)
TRACE = [
    {"node_id": "node_1", "operator": "Programmer", "ok": True, "output": LONG_OUTPUT, "llm_calls": 1, "tokens": 9},
    {"node_id": "node_2", "operator": "Custom", "ok": False, "output": "short", "error": "boom"},
]


class TracingDirector:
    """Answers at once and reports a canned trace, as `finalize` would collect it from the canvas."""

    name = "tracing"

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult:
        return EpisodeResult(director=self.name, task=task, answer="2", dsl="Programmer -> Custom", trace=TRACE)


async def test_the_final_runs_trace_is_recorded_with_outputs_clipped() -> None:
    server = build_server(ServerSettings(), runner=NoRunner(), store=MemoryStore())
    problem = Problem(id="toy/1", source="toy", problem_type="math", problem="What is 1 + 1?", ground_truth="2")
    item = await run_episode(TracingDirector(), problem, make_client=lambda: Client(server.mcp))
    assert item.correct
    assert [row["node_id"] for row in item.trace] == ["node_1", "node_2"]
    assert item.trace[0]["output"] == LONG_OUTPUT[:TRACE_OUTPUT_CHARS]
    assert item.trace[0]["tokens"] == 9
    assert item.trace[1] == TRACE[1]
    assert TRACE[0]["output"] == LONG_OUTPUT  # the episode's own record is not altered


def test_a_journal_written_before_traces_still_resumes(tmp_path: Path) -> None:
    config = EvalConfig(directors=["direct"], concurrency=1)
    old_item = ItemResult(director="direct", problem_id="toy/1", source="toy", problem_type="math", answer="2")
    old_line = old_item.model_dump(mode="json")
    del old_line["trace"]
    header = {"journal": 1, "config": config.model_dump(mode="json")}
    (tmp_path / JOURNAL_NAME).write_text(f"{json.dumps(header)}\n{json.dumps(old_line)}\n", encoding="utf-8")

    journal, items = ItemJournal.open(tmp_path, config, resume=True)
    traced = ItemResult(
        director="direct", problem_id="toy/2", source="toy", problem_type="math", answer="3", trace=TRACE[1:]
    )
    journal.append(traced)
    journal.close()

    assert [item.trace for item in items] == [[]]
    reopened, reread = ItemJournal.open(tmp_path, config, resume=True)
    reopened.close()
    assert [item.trace for item in reread] == [[], TRACE[1:]]
