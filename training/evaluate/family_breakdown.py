"""Which kinds of workflow a canvas director built on each dataset, and how each kind fared against the baseline.

Why: a director's score says whether it lost to the baseline (the run's first director, as in the paired
comparisons, usually `direct`), not which of its habits lost. The families of training (`training/train/families.py`,
read from each item's final graph stats) split its episodes, and on the same problems the baseline's score says
whether a family helps or hurts. Families overlap, so the rows do not add up.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from flowsteer_mcp.director.graded import ItemResult
from training.evaluate.paired import present_directors
from training.train.families import FAMILY_NAMES, families_of


class FamilyRow(BaseModel):
    """One family of one director on one dataset."""

    model_config = ConfigDict(frozen=True)

    director: str
    source: str
    family: str
    episodes: int
    solved: int
    baseline: str
    baseline_solved: int | None  # the baseline on the same problems; None when it did not run on all of them


def family_rows(items: Sequence[ItemResult], directors: Sequence[str]) -> list[FamilyRow]:
    """Rows for every director but the baseline (per dataset, the first of `directors` that ran there, as in the
    paired comparisons) whose items carry graph stats (journals written before stats were kept: none)."""
    by_source: dict[str, list[ItemResult]] = {}
    for item in items:
        by_source.setdefault(item.source, []).append(item)
    baselines = {source: next(iter(present_directors(group, directors)), "") for source, group in by_source.items()}
    baseline = {
        (item.source, item.problem_id): item.correct for item in items if item.director == baselines[item.source]
    }
    groups: dict[tuple[str, str], list[ItemResult]] = {}
    for item in items:
        if item.stats and item.director != baselines[item.source]:
            groups.setdefault((item.director, item.source), []).append(item)
    rows = []
    for (director, source), group in groups.items():
        memberships = [families_of(item.stats, item.problem_type) for item in group]
        for family in FAMILY_NAMES:
            members = [item for item, names in zip(group, memberships, strict=True) if family in names]
            if not members:
                continue
            keys = [(item.source, item.problem_id) for item in members]
            rows.append(
                FamilyRow(
                    director=director,
                    source=source,
                    family=family,
                    episodes=len(members),
                    solved=sum(item.correct for item in members),
                    baseline=baselines[source],
                    baseline_solved=sum(baseline[key] for key in keys) if all(k in baseline for k in keys) else None,
                )
            )
    return rows


def family_tables(rows: Sequence[FamilyRow]) -> str:
    """One Markdown table per (director, dataset); empty text when no item had graph stats."""
    tables: dict[tuple[str, str], list[FamilyRow]] = {}
    for row in rows:
        tables.setdefault((row.director, row.source), []).append(row)
    parts = []
    for (director, source), group in tables.items():
        lines = [
            f"#### {director} on {source}",
            "",
            f"| family | episodes | solved | {group[0].baseline or 'baseline'} solved, same problems |",
            "|---|---:|---:|---:|",
        ]
        for row in group:
            base = "n/a" if row.baseline_solved is None else str(row.baseline_solved)
            lines.append(f"| {row.family} | {row.episodes} | {row.solved} | {base} |")
        parts.append("\n".join(lines))
    if not parts:
        return ""
    intro = (
        "### Workflow families\n\nThe kinds of workflow each canvas director built (training/train/families.py; "
        "they overlap), and how the run's first director, the baseline of the paired comparisons, did on the same "
        "problems."
    )
    return "\n\n".join([intro, *parts])
