"""In-process executor: a small transformers model on the CPU, behind the `ChatBackend` interface.

Generation runs in worker threads so the event loop stays responsive. One lock guards the model; while
it is busy, greedy requests queue up and the next free worker takes several of them into one padded
`generate` call, which raises throughput on a small CPU (decoding is bound by reading the weights). Sampled requests run alone so each
can honour its own seed without touching the process-wide RNG state.
"""

from __future__ import annotations

import gc
import hashlib
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import structlog

from operators.backends.base import BackendError, ChatRequest, ChatResponse, SamplingParams, Usage, effective_sampling
from operators.models.chat_template import CHATML_TEMPLATE
from operators.models.manifest import folder_fingerprint
from operators.models.offline import hub_offline
from operators.models.prepare import resolve_model

log = structlog.get_logger(__name__)

_DTYPES = ("auto", "bfloat16", "float32", "float16")


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU computes bf16 natively (AVX512-BF16 or AMX); without it bf16 is emulated and
    slower than fp32 (measured on an AVX2-only machine: fp32 ~1.5-2x faster for Qwen2.5-Coder-0.5B)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_dtype(dtype: str) -> str:
    """`auto` picks bf16 where the CPU has native bf16 support, else fp32."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if cpu_has_native_bf16() else "float32"


@dataclass
class _Job:
    """One request travelling from `complete` through the batcher into `generate` and back."""

    request: ChatRequest
    sampling: SamplingParams
    prompt_ids: list[int] = field(default_factory=list)
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str | None = None
    error: BaseException | None = None
    done: bool = False
    cancelled: bool = False

    @property
    def greedy(self) -> bool:
        return self.sampling.temperature <= 0.0


class _RowStopper:
    """Per-row stopping rule for a batched `generate`: each row's own `max_tokens` and stop strings.

    transformers marks a row finished when this returns True for it; we remember the step and why, so
    the caller can cut the row exactly where it ended.
    """

    def __init__(self, tokenizer: Any, prompt_width: int, jobs: list[_Job]) -> None:
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


class LocalBackend:
    """Runs a prepared (or any local) transformers chat model in this process.

    `model` is a catalog name prepared with `flowsteer models prepare` or a model folder path. `dtype`
    defaults to "auto": bf16 (half the memory traffic of fp32) where the CPU computes bf16 natively, else
    fp32; pass "float32" for bit-exact agreement with fp32 references. `num_threads` sets torch's
    intra-op threads for the whole process when the model loads. `max_batch_size=1` disables batching,
    which makes every greedy answer independent of what else is in flight (left padding can change
    low-order bits in bf16; in fp32 batched and solo answers matched in our tests).
    """

    def __init__(
        self,
        model: str | Path,
        *,
        home: Path | None = None,
        dtype: str = "auto",
        num_threads: int | None = None,
        defaults: SamplingParams | None = None,
        max_batch_size: int = 4,
    ) -> None:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        self._path = resolve_model(model, home=home)
        self._name = self._path.name
        self._fingerprint = folder_fingerprint(self._path)
        self._dtype_name = resolve_dtype(dtype)
        self._num_threads = num_threads
        self._defaults = defaults or SamplingParams()
        self._max_batch_size = max_batch_size
        self._model_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: list[_Job] = []
        self._hf_model: Any = None
        self._tokenizer: Any = None
        self._stop_ids: set[int] = set()
        self._context_len = 0
        self._closed = False
        self._limiter: tuple[object, anyio.CapacityLimiter] | None = None

    @property
    def model(self) -> str:
        return self._name

    @property
    def path(self) -> Path:
        return self._path

    def cache_key(self) -> str:
        sampling = hashlib.sha256(self._defaults.model_dump_json().encode()).hexdigest()[:12]
        return f"local:{self._name}:{self._fingerprint[:16]}:{self._dtype_name}:{sampling}"

    async def load(self) -> None:
        """Load the weights now instead of on the first request (useful before timing anything)."""
        await anyio.to_thread.run_sync(self._load_locked, limiter=self._thread_limiter())

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if self._closed:
            raise BackendError(f"local backend for {self._name} is closed")
        if not request.messages:
            raise BackendError("a chat request needs at least one message")
        sampling = effective_sampling(request, self._defaults)
        if sampling.max_tokens < 1:
            raise BackendError(f"max_tokens must be at least 1, got {sampling.max_tokens}")
        job = _Job(request=request, sampling=sampling)
        started = time.monotonic()
        with self._pending_lock:
            self._pending.append(job)
        try:
            # One worker thread at a time: waiting requests wait here (not in blocked threads), and the
            # generating thread is reused, which keeps torch's per-thread OpenMP pools warm.
            await anyio.to_thread.run_sync(self._serve, job, abandon_on_cancel=True, limiter=self._thread_limiter())
        finally:
            if not job.done:
                job.cancelled = True
                with self._pending_lock:
                    if job in self._pending:
                        self._pending.remove(job)
        if job.error is not None:
            if isinstance(job.error, BackendError):
                raise job.error
            raise BackendError(f"local generation with {self._name} failed: {job.error}") from job.error
        return ChatResponse(
            text=job.text,
            model=self._name,
            usage=Usage(prompt_tokens=len(job.prompt_ids), completion_tokens=job.completion_tokens),
            latency_s=time.monotonic() - started,
            finish_reason=job.finish_reason,
        )

    def _thread_limiter(self) -> anyio.CapacityLimiter:
        """A one-slot limiter for the running event loop (a backend may outlive a loop, e.g. in tests)."""
        loop = anyio.lowlevel.current_token()
        if self._limiter is None or self._limiter[0] is not loop.native_token:
            self._limiter = (loop.native_token, anyio.CapacityLimiter(1))
        return self._limiter[1]

    async def aclose(self) -> None:
        self._closed = True
        await anyio.to_thread.run_sync(self._unload)

    # -- worker-thread side ---------------------------------------------------------------------------

    def _unload(self) -> None:
        with self._model_lock:
            self._hf_model = None
            self._tokenizer = None
            with self._pending_lock:
                for job in self._pending:
                    job.error, job.done = BackendError(f"local backend for {self._name} was closed"), True
                self._pending.clear()
        gc.collect()

    def _load_locked(self) -> None:
        with self._model_lock:
            self._ensure_loaded()

    def _ensure_loaded(self) -> None:
        if self._hf_model is not None:
            return
        if self._closed:
            raise BackendError(f"local backend for {self._name} is closed")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self._num_threads:
            torch.set_num_threads(self._num_threads)
        started = time.monotonic()
        with hub_offline():
            tokenizer = AutoTokenizer.from_pretrained(self._path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                self._path, dtype=getattr(torch, self._dtype_name), local_files_only=True
            )
        model.eval()
        if not tokenizer.chat_template:
            log.warning("local_model_without_chat_template", model=self._name, using="ChatML")
            tokenizer.chat_template = CHATML_TEMPLATE
        eos = model.generation_config.eos_token_id
        stop_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            stop_ids.add(int(tokenizer.eos_token_id))
        if not stop_ids:
            raise BackendError(f"{self._path} defines no end-of-sequence token; cannot tell when to stop")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token_id = min(stop_ids)
        self._stop_ids = stop_ids
        self._context_len = int(getattr(model.config, "max_position_embeddings", 0) or 32768)
        self._tokenizer, self._hf_model = tokenizer, model
        log.info(
            "local_model_loaded",
            model=self._name,
            dtype=self._dtype_name,
            threads=torch.get_num_threads(),
            seconds=round(time.monotonic() - started, 2),
        )

    def _serve(self, job: _Job) -> None:
        """Runs in a worker thread: wait for the model, then answer `job` (and any batch-mates it takes)."""
        with self._model_lock:
            if job.done or job.cancelled:
                return
            batch = self._take_batch(job)
            try:
                self._ensure_loaded()
                ready = [j for j in batch if self._render(j)]
                if ready:
                    self._generate(ready)
            except BaseException as exc:
                for j in batch:
                    if not j.done:
                        j.error = exc
            finally:
                for j in batch:
                    j.done = True

    def _take_batch(self, job: _Job) -> list[_Job]:
        with self._pending_lock:
            if job in self._pending:
                self._pending.remove(job)
            batch = [job]
            if job.greedy:
                for other in list(self._pending):
                    if len(batch) >= self._max_batch_size:
                        break
                    if other.greedy and not other.cancelled:
                        self._pending.remove(other)
                        batch.append(other)
        return batch

    def _render(self, job: _Job) -> bool:
        """Apply the chat template; a prompt that does not fit the context becomes that job's error."""
        messages = [message.model_dump() for message in job.request.messages]
        text = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        job.prompt_ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(job.prompt_ids) >= self._context_len:
            job.error = BackendError(
                f"prompt has {len(job.prompt_ids)} tokens; {self._name} handles at most {self._context_len}"
            )
            job.done = True
            return False
        return True

    def _generate(self, jobs: list[_Job]) -> None:
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        pad_id = int(self._tokenizer.pad_token_id)
        width = max(len(job.prompt_ids) for job in jobs)
        input_ids = torch.full((len(jobs), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(jobs), width), dtype=torch.long)
        for row, job in enumerate(jobs):  # left padding: every prompt ends at the same column
            input_ids[row, width - len(job.prompt_ids) :] = torch.tensor(job.prompt_ids)
            attention[row, width - len(job.prompt_ids) :] = 1
        max_new = min(max(job.sampling.max_tokens for job in jobs), self._context_len - width)
        lead = jobs[0].sampling
        config = GenerationConfig(
            max_new_tokens=max_new,
            do_sample=not jobs[0].greedy,
            temperature=lead.temperature if not jobs[0].greedy else None,
            top_p=lead.top_p if not jobs[0].greedy else None,
            top_k=None,
            eos_token_id=sorted(self._stop_ids),
            pad_token_id=pad_id,
        )
        stopper = _RowStopper(self._tokenizer, width, jobs)
        started = time.monotonic()
        with torch.inference_mode(), torch.random.fork_rng(devices=[]):
            if not jobs[0].greedy:
                torch.manual_seed(lead.seed if lead.seed is not None else random.getrandbits(63))
            output = self._hf_model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=config,
                stopping_criteria=StoppingCriteriaList([stopper]),
            )
        new_tokens = 0
        for row, job in enumerate(jobs):
            self._finish(job, output[row, width:].tolist(), stopper.ended_at[row], stopper.reason[row])
            new_tokens += job.completion_tokens
        seconds = time.monotonic() - started
        log.debug(
            "local_generate",
            model=self._name,
            batch=len(jobs),
            prompt_width=width,
            new_tokens=new_tokens,
            seconds=round(seconds, 3),
            tokens_per_s=round(new_tokens / seconds, 1) if seconds > 0 else None,
        )

    def _finish(self, job: _Job, generated: list[int], ended_at: int | None, reason: str | None) -> None:
        """Cut one row at its end (eos, stop string or its own max_tokens) and decode it."""
        limit = min(ended_at if ended_at is not None else len(generated), job.sampling.max_tokens)
        eos_at = next((i for i, token in enumerate(generated[:limit]) if token in self._stop_ids), None)
        if eos_at is not None:
            kept, job.completion_tokens, job.finish_reason = generated[:eos_at], eos_at + 1, "stop"
        else:
            kept, job.completion_tokens = generated[:limit], limit
            job.finish_reason = reason if reason == "stop" else "length"
        text = self._tokenizer.decode(kept, skip_special_tokens=True)
        cuts = [text.find(stop) for stop in job.sampling.stop if stop and stop in text]
        if cuts:
            text, job.finish_reason = text[: min(cuts)], "stop"
        job.text = text
