"""The rows of one batched `generate` in the local backend: the job each row answers, the per-row stopping
rule, and cutting a finished row at its own end.

Why apart from the backend: these are the pure, per-row parts of batching (no locks, threads or model
loading), and both ways a batch forms share them: concurrent greedy requests padded together, and the n
sampled rows of one `complete_many` request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from operators.backends.base import ChatRequest, SamplingParams


@dataclass
class RowJob:
    """One request (or one sample of an `n` request) travelling through the batcher into `generate` and back."""

    request: ChatRequest
    sampling: SamplingParams
    prompt_ids: list[int] = field(default_factory=list)
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str | None = None
    error: BaseException | None = None
    done: bool = False
    cancelled: bool = False
    mates: list[RowJob] = field(default_factory=list)  # the other samples of an `n` request: same prompt, same batch

    @property
    def greedy(self) -> bool:
        return self.sampling.temperature <= 0.0


class RowStopper:
    """Per-row stopping rule for a batched `generate`: each row's own `max_tokens` and stop strings.

    transformers marks a row finished when this returns True for it; we remember the step and why, so
    the caller can cut the row exactly where it ended.
    """

    def __init__(self, tokenizer: Any, prompt_width: int, jobs: list[RowJob]) -> None:
        self.tokenizer = tokenizer
        self.prompt_width = prompt_width
        self.limits = [job.sampling.max_tokens for job in jobs]
        self.stops = [[s for s in job.sampling.stop if s] for job in jobs]
        self.windows = [4 * max((len(s) for s in stops), default=0) + 2 for stops in self.stops]
        self.ended_at: list[int | None] = [None] * len(jobs)
        self.reason: list[str | None] = [None] * len(jobs)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        generated = input_ids[:, self.prompt_width :]
        steps = generated.shape[1]
        for row in range(generated.shape[0]):
            if self.ended_at[row] is not None:
                continue
            if self.stops[row]:
                tail = self.tokenizer.decode(generated[row, -self.windows[row] :], skip_special_tokens=True)
                if any(stop in tail for stop in self.stops[row]):
                    self.ended_at[row], self.reason[row] = steps, "stop"
                    continue
            if steps >= self.limits[row]:
                self.ended_at[row], self.reason[row] = steps, "length"
        return torch.tensor([end is not None for end in self.ended_at], dtype=torch.bool, device=input_ids.device)


def finish_row(
    job: RowJob,
    generated: list[int],
    ended_at: int | None,
    reason: str | None,
    *,
    tokenizer: Any,
    stop_ids: set[int],
) -> None:
    """Cut one row at its end (eos, stop string or its own max_tokens) and decode it into `job`."""
    limit = min(ended_at if ended_at is not None else len(generated), job.sampling.max_tokens)
    eos_at = next((i for i, token in enumerate(generated[:limit]) if token in stop_ids), None)
    if eos_at is not None:
        kept, job.completion_tokens, job.finish_reason = generated[:eos_at], eos_at + 1, "stop"
    else:
        kept, job.completion_tokens = generated[:limit], limit
        job.finish_reason = reason if reason == "stop" else "length"
    text = tokenizer.decode(kept, skip_special_tokens=True)
    cuts = [text.find(stop) for stop in job.sampling.stop if stop and stop in text]
    if cuts:
        text, job.finish_reason = text[: min(cuts)], "stop"
    job.text = text
