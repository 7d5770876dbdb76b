"""`flowsteer train sft --check`: what a warm start would train on, without loading a model.

Why: a warm start runs for half an hour on 2 cores before its first numbers, and its mix names families by
hand (`code/direct8-redraw: 2`), so a typo should surface before the run. The check reads the config and the
transcripts and prints, per family, the episodes and turns found and the share of the draws the mix gives
them. It names the mix's families that no transcript has, which the run refuses.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from training.sft.dataset import episode_weights, load_transcripts
from training.sft.trainer import sft_settings
from training.train.config import TrainConfig


@dataclass(frozen=True)
class FamilyPlan:
    family: str
    episodes: int
    turns: int
    share: float  # of the drawn episodes, as the mix weighs them


@dataclass(frozen=True)
class SftPlan:
    families: list[FamilyPlan]
    absent: list[str]  # families the mix names that no transcript has

    def render(self) -> str:
        lines = [f"{'family':<28} {'episodes':>8} {'turns':>6} {'mix share':>9}"]
        lines += [f"{f.family:<28} {f.episodes:>8} {f.turns:>6} {f.share:>9.3f}" for f in self.families]
        lines += [f"the mix names {family!r}, which no transcript has" for family in self.absent]
        return "\n".join(lines)


def sft_plan(config: TrainConfig) -> SftPlan:
    """Per family, what the config's transcripts hold and its share of the draws (before the held-out split)."""
    settings = sft_settings(config)
    transcripts = load_transcripts(settings.data)
    families = [t.family for t in transcripts]
    episodes = Counter(families)
    mix = settings.mix
    absent = sorted(set(mix) - set(episodes)) if isinstance(mix, dict) else []
    present = {f: w for f, w in mix.items() if f in episodes} if isinstance(mix, dict) else mix
    weights = episode_weights(families, present)
    total = sum(weights) or 1.0
    turns: Counter[str] = Counter()
    share: dict[str, float] = {}
    for transcript, weight in zip(transcripts, weights, strict=True):
        turns[transcript.family] += len(transcript.turns)
        share[transcript.family] = share.get(transcript.family, 0.0) + weight / total
    rows = [FamilyPlan(f, episodes[f], turns[f], share[f]) for f in sorted(episodes)]
    return SftPlan(rows, absent)
