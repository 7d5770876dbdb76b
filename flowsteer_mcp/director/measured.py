"""What the published evaluations measured for each library workflow, shipped with the package.

Why: a client choosing a workflow (an assistant asking for "the best known workflow for this code task")
needs the evidence, not only the names: accuracy with its interval, executor tokens and calls per episode,
and `direct`'s score and tokens on the same problems in the same run, since a workflow is worth its tokens
only against that baseline. `library_measurements.json` is generated from `docs/runs/*/report.json` by
`scripts/library_measurements.py`, and a test keeps the two equal, so every number here traces to a run.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

DATA_FILE = "library_measurements.json"


class Measurement(BaseModel):
    """One library workflow on one dataset in one published run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run: str = Field(description="the run's folder in the repository, e.g. docs/runs/full-code/best-two")
    date: str = Field(description="the day the run started (UTC)")
    dataset: str = Field(description="the data source, e.g. humaneval, mbpp, gsm8k, hotpotqa, squad_v2")
    items: str = Field(description="which problems: the first n of the dataset's dev file")
    n: int = Field(description="problems scored")
    score: float = Field(description="mean score: pass@1 (code), accuracy (math), token F1 (qa); 0-1")
    ci_low: float = Field(description="95% interval of the score, low end")
    ci_high: float = Field(description="95% interval of the score, high end")
    tokens: float = Field(description="executor tokens per episode (prompt + completion)")
    llm_calls: float = Field(description="executor requests per episode")
    direct_score: float = Field(description="`direct` (one greedy call) on the same problems in the same run")
    direct_tokens: float = Field(description="`direct`'s executor tokens per episode in that run")
    executor: str = Field(description="the executor model and server the run used")
    note: str | None = Field(default=None, description="why this measurement may not describe the workflow today")


class LibraryMeasurements(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(description="where the numbers come from")
    workflows: dict[str, dict[str, list[Measurement]]] = Field(
        description="task type -> library workflow name -> its measurements"
    )


@cache
def library_measurements() -> LibraryMeasurements:
    text = resources.files("flowsteer_mcp.director").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return LibraryMeasurements.model_validate_json(text)


def measurements_of(task_type: str, workflow: str) -> list[Measurement]:
    """The published measurements of a library workflow (empty when it was never measured)."""
    return list(library_measurements().workflows.get(task_type, {}).get(workflow, []))
