"""Transcripts as supervised examples: chat-template tokenisation, the action-only mask, the family mix.

A transcript line (written by `flowsteer traces collect`) is one episode: its outcome and, per Flow-Director
turn, the observation messages the policy saw and the text it should write. An example is one turn: the
prompt is the observation rendered by the policy's chat template exactly as vLLM renders it for generation
(`add_generation_prompt`), the completion is the turn text plus the end-of-turn token, so the policy learns to
stop after its action. Prompt and completion are tokenised separately because at rollout time the completion
is generated after the prompt's token ids, never tokenised together with them.

The mix is over episodes: with "balanced" every workflow family contributes equally many episodes to the
sampling order (a family with few episodes repeats them), and every turn of a drawn episode is trained on.
The held-out split is by episode, per family, so held-out observations come from episodes never trained on.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from training.errors import TrainingError
from training.rollout.samples import TurnSample

log = structlog.get_logger(__name__)

IGNORE_INDEX = -100  # the label of a position no loss is computed on (the transformers convention)
UNKNOWN_FAMILY = "unknown"
Mix = Literal["balanced", "natural"] | Mapping[str, float]


class TranscriptError(TrainingError, ValueError):
    """A transcript file is missing or holds a line that is not a transcript; the message names the line."""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str = Field(min_length=1)
    content: str


class TranscriptTurn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    messages: list[ChatMessage] = Field(min_length=1)  # the observation, as the policy receives it
    completion: str = Field(min_length=1)  # the turn text the policy should write
    kind: Literal["action", "prompt"] = "action"  # which canvas parser reads the turn


class TranscriptEpisode(BaseModel):
    """The episode's outcome; only `family` is read here, the rest travels along for reports."""

    model_config = ConfigDict(extra="allow")

    family: str = UNKNOWN_FAMILY  # the workflow family the mix balances over


class Transcript(BaseModel):
    """One episode as the warm start reads it. A `flowsteer traces collect` record (flat, with `system` and
    per turn `observation`/`text`/`ok`) is read too: see `_from_trace_record`."""

    model_config = ConfigDict(extra="ignore")

    episode: TranscriptEpisode = Field(default_factory=TranscriptEpisode)
    turns: list[TranscriptTurn] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_trace_record(cls, data: Any) -> Any:
        """Map a trace record onto this shape: action turns see the system prompt and the observation, prompt
        turns the observation alone (as `PolicyDirector` sends them); the family is the library workflow it
        comes from, under its task type; turns the canvas rejected are left out, since the policy should not learn
        them."""
        if not (isinstance(data, dict) and "system" in data and "episode" not in data):
            return data
        turns = []
        for turn in data.get("turns") or []:
            if not isinstance(turn, dict) or turn.get("ok") is False:
                continue
            kind = turn.get("kind", "action")
            context = [{"role": "system", "content": data["system"]}] if kind == "action" else []
            messages = [*context, {"role": "user", "content": turn.get("observation")}]
            turns.append({"messages": messages, "completion": turn.get("text"), "kind": kind})
        family = data.get("base_workflow") or data.get("workflow") or UNKNOWN_FAMILY
        if data.get("task_type") and family != UNKNOWN_FAMILY:
            family = f"{data['task_type']}/{family}"  # library names repeat across task types (`classic`)
        outcome = {key: data.get(key) for key in ("problem_id", "workflow", "structure", "correctness", "reward")}
        return {"episode": {"family": family, **outcome}, "turns": turns}

    @property
    def family(self) -> str:
        return self.episode.family


@dataclass(frozen=True)
class SftExample:
    """One turn as token ids: the prompt (never trained on) and the completion (the action tokens)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    family: str
    episode: int  # index of its transcript
    turn: int
    kind: Literal["action", "prompt"]
    messages: tuple[dict[str, str], ...]

    @property
    def input_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.completion_ids]

    @property
    def labels(self) -> list[int]:
        """Targets per position: the token on completion positions, IGNORE_INDEX on every prompt position."""
        return [IGNORE_INDEX] * len(self.prompt_ids) + list(self.completion_ids)

    def turn_sample(self) -> TurnSample:
        """The learner's sequence type: mask 1 exactly on the completion (the canvas mask)."""
        n = len(self.completion_ids)
        return TurnSample(
            episode_id=str(self.episode),
            group_id=self.family,
            turn_index=self.turn,
            prompt_ids=self.prompt_ids,
            completion_ids=self.completion_ids,
            completion_mask=[1] * n,
            behaviour_logprobs=[0.0] * n,
        )


def transcript_files(paths: Iterable[str | Path]) -> list[Path]:
    """The transcript files at `paths`: files as given, folders searched for `*.jsonl` and `*.jsonl.gz` (a
    published collection is committed compressed)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted([*path.rglob("*.jsonl"), *path.rglob("*.jsonl.gz")]))
        elif path.is_file():
            files.append(path)
        else:
            raise TranscriptError(
                f"no transcript file or folder at {path} (write them with `flowsteer traces collect`)"
            )
    return files


def read_transcript_text(file: Path) -> str:
    """A transcript file's text, decompressed when it is gzipped (`*.gz`)."""
    raw = file.read_bytes()
    return (gzip.decompress(raw) if file.name.endswith(".gz") else raw).decode("utf-8")


def read_transcript_records(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every episode line of the transcripts at `paths` as a plain dict: the summaries and screens read only a
    few fields, and should not fail on a collection written before a field was added."""
    return [
        json.loads(line)
        for file in transcript_files(paths)
        for line in read_transcript_text(file).splitlines()
        if line.strip()
    ]


def load_transcripts(paths: Iterable[str | Path]) -> list[Transcript]:
    transcripts: list[Transcript] = []
    for file in transcript_files(paths):
        for number, line in enumerate(read_transcript_text(file).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                transcripts.append(Transcript.model_validate(json.loads(line)))
            except (json.JSONDecodeError, ValidationError) as error:
                raise TranscriptError(f"{file}:{number}: not a transcript: {error}") from None
    if not transcripts:
        raise TranscriptError("the transcript files hold no episodes")
    return transcripts


def split_held_out(transcripts: Sequence[Transcript], fraction: float, *, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) episode indices: `fraction` of each family's episodes, rounded, held out; a family
    with a single episode stays in training."""
    by_family: dict[str, list[int]] = defaultdict(list)
    for index, transcript in enumerate(transcripts):
        by_family[transcript.family].append(index)
    train: list[int] = []
    held: list[int] = []
    for family in sorted(by_family):
        members = list(by_family[family])
        random.Random(f"{seed}:held-out:{family}").shuffle(members)
        n_held = min(round(len(members) * fraction), len(members) - 1) if fraction > 0 else 0
        if fraction > 0 and n_held == 0 and len(members) > 1:
            n_held = 1
        held.extend(members[:n_held])
        train.extend(members[n_held:])
    return sorted(train), sorted(held)


def episode_weights(families: Sequence[str], mix: Mix) -> list[float]:
    """A sampling weight per episode so that each family's total weight follows the mix."""
    counts = Counter(families)
    if mix == "natural":
        return [1.0] * len(families)
    if mix == "balanced":
        return [1.0 / counts[family] for family in families]
    assert not isinstance(mix, str)
    missing = sorted(set(mix) - set(counts))
    if missing:
        raise TranscriptError(
            f"sft.mix names {', '.join(missing)}, which no transcript has; the transcripts' families are "
            f"{', '.join(sorted(counts))} (`flowsteer train sft --check` lists them)"
        )
    return [mix.get(family, 0.0) / counts[family] for family in families]


class SftDataset:
    """Tokenised turns of the training episodes with their sampling weights and the held-out turns."""

    def __init__(
        self,
        transcripts: Sequence[Transcript],
        tokenizer: Any,
        *,
        mix: Mix,
        held_out_fraction: float,
        max_seq_len: int,
        seed: int,
        enable_thinking: bool | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self._enable_thinking = enable_thinking
        train_episodes, held_episodes = split_held_out(transcripts, held_out_fraction, seed=seed)
        weights = episode_weights([transcripts[i].family for i in train_episodes], mix)
        self.train: list[SftExample] = []
        self.weights: list[float] = []
        self.too_long = 0
        for episode, weight in zip(train_episodes, weights, strict=True):
            for example in self._episode_examples(transcripts[episode], episode):
                if len(example.input_ids) > max_seq_len:
                    self.too_long += 1
                    continue
                self.train.append(example)
                self.weights.append(weight)
        self.held_out = [ex for i in held_episodes for ex in self._episode_examples(transcripts[i], i)]
        if not any(self.weights):
            raise TranscriptError("no training turn has a positive mix weight (check sft.mix and sft.max_seq_len)")
        log.info(
            "sft.dataset",
            train_turns=len(self.train),
            held_out_turns=len(self.held_out),
            too_long=self.too_long,
            families=dict(Counter(ex.family for ex in self.train)),
        )

    def prompt_ids(self, messages: Sequence[Mapping[str, str]], kind: str = "action") -> list[int]:
        """The observation as vLLM renders and tokenises it for generation (prompt turns never think, as in
        `PolicyDirector`)."""
        thinking = False if kind == "prompt" and self._enable_thinking is not None else self._enable_thinking
        kwargs = {} if thinking is None else {"enable_thinking": thinking}
        text = self._tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=True, **kwargs
        )
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def completion_ids(self, completion: str) -> list[int]:
        ids = list(self._tokenizer(completion, add_special_tokens=False)["input_ids"])
        eos = self._tokenizer.eos_token_id
        return [*ids, eos] if eos is not None else ids

    def _episode_examples(self, transcript: Transcript, episode: int) -> list[SftExample]:
        examples = []
        for index, turn in enumerate(transcript.turns):
            messages = tuple(message.model_dump() for message in turn.messages)
            examples.append(
                SftExample(
                    prompt_ids=self.prompt_ids(messages, turn.kind),
                    completion_ids=self.completion_ids(turn.completion),
                    family=transcript.family,
                    episode=episode,
                    turn=index,
                    kind=turn.kind,
                    messages=messages,
                )
            )
        return examples

    def order(self, seed: int, epoch: int) -> list[int]:
        """One pass of the sampling order: len(train) draws by weight, from (seed, epoch) alone, so that a
        (epoch, position) cursor restores it exactly."""
        rng = random.Random(f"{seed}:sft:{epoch}")
        return rng.choices(range(len(self.train)), weights=self.weights, k=len(self.train))

    def family_shares(self, indices: Iterable[int]) -> dict[str, float]:
        """Each training family's share of the drawn turns (0.0 for a family not drawn, so plots stay aligned)."""
        counts = Counter(self.train[i].family for i in indices)
        total = sum(counts.values()) or 1
        return {family: counts[family] / total for family in sorted({ex.family for ex in self.train})}
