"""In-process executor: a small transformers model on the CPU, behind the `ChatBackend` interface.

Generation runs in worker threads so the event loop stays responsive. One lock guards the model; while
it is busy, greedy requests queue up and the next free worker takes several of them into one padded
`generate` call, which raises throughput on a small CPU (decoding is bound by reading the weights, so k rows
cost little more than one). A sampled `complete` still runs alone: one `generate` draws from one seeded RNG
stream, so two requests with their own seeds cannot share it without one seed deciding both answers.
`complete_many(request, n)` is the batched way to sample: its n rows share the prompt and ONE seed (as vLLM
seeds an `n` request), so they go into one `generate` of n rows; the engine sends a node's sampled draws
that way. The process-wide RNG state is never touched (`fork_rng`).
"""

from __future__ import annotations

import gc
import hashlib
import random
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import structlog

from operators.backends.base import BackendError, ChatRequest, ChatResponse, SamplingParams, Usage, effective_sampling
from operators.backends.local_rows import RowJob, RowStopper, finish_row
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


class LocalBackend:
    """Runs a prepared (or any local) transformers chat model in this process.

    `model` is a catalog name prepared with `flowsteer models prepare` or a model folder path. `dtype`
    defaults to "auto": bf16 (half the memory traffic of fp32) where the CPU computes bf16 natively, else
    fp32; pass "float32" for bit-exact agreement with fp32 references. `num_threads` sets torch's
    intra-op threads for the whole process when the model loads. `max_batch_size=1` disables batching,
    which makes every greedy answer independent of what else is in flight (left padding can change
    low-order bits in bf16; in fp32 batched and solo answers matched in our tests).

    `adapter` is a PEFT LoRA folder (a trained Flow-Director) applied on top of the model at load time and
    merged into its weights: generation then costs what the base model's does, and no second copy of the
    weights is kept. It needs `peft`.
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
        adapter: Path | None = None,
    ) -> None:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        self._path = resolve_model(model, home=home)
        self._name = self._path.name
        self._adapter = adapter
        if adapter is not None and not (adapter / "adapter_config.json").is_file():
            raise BackendError(f"{adapter} is not a PEFT adapter folder (no adapter_config.json)")
        self._fingerprint = folder_fingerprint(self._path)
        if adapter is not None:
            self._fingerprint = hashlib.sha256(
                f"{self._fingerprint}+{folder_fingerprint(adapter)}".encode()
            ).hexdigest()
        self._dtype_name = resolve_dtype(dtype)
        self._num_threads = num_threads
        self._defaults = defaults or SamplingParams()
        self._max_batch_size = max_batch_size
        self._model_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: list[RowJob] = []
        self._hf_model: Any = None
        self._tokenizer: Any = None
        self._stop_ids: set[int] = set()
        self._context_len = 0
        self._closed = False
        self._limiter: tuple[object, anyio.CapacityLimiter] | None = None
        self.generate_calls = 0  # `generate` calls and the rows they produced (for tests and logs)
        self.generated_rows = 0

    @property
    def model(self) -> str:
        return self._name

    @property
    def path(self) -> Path:
        return self._path

    @property
    def adapter(self) -> Path | None:
        return self._adapter

    def cache_key(self) -> str:
        sampling = hashlib.sha256(self._defaults.model_dump_json().encode()).hexdigest()[:12]
        return f"local:{self._name}:{self._fingerprint[:16]}:{self._dtype_name}:{sampling}"

    async def load(self) -> None:
        """Load the weights now instead of on the first request (useful before timing anything)."""
        await anyio.to_thread.run_sync(self._load_locked, limiter=self._thread_limiter())

    async def complete(self, request: ChatRequest) -> ChatResponse:
        job = self._job(request)
        started = time.monotonic()
        await self._run(job)
        return self._response(job, prompt_tokens=len(job.prompt_ids), started=started)

    async def complete_many(self, request: ChatRequest, n: int) -> list[ChatResponse]:
        """`n` samples of one prompt from ONE `generate` of n rows, seeded once from the draw's seed (as vLLM
        seeds an `n` request): the same seed gives the same n texts, and the rows differ from each other.

        Usage as the OpenAI backend reports an `n` request: the prompt counted once (first response), each
        response its own completion tokens. A greedy draw is generated once and returned n times, as vLLM
        returns n identical greedy choices; each copy reports the row's completion tokens, so the usage of a
        greedy `n` request is the same on both backends."""
        if n < 1:
            raise BackendError(f"complete_many needs n >= 1; got {n}")
        lead = self._job(request)
        if not lead.greedy:
            lead.mates = [RowJob(request=request, sampling=lead.sampling) for _ in range(n - 1)]
        started = time.monotonic()
        await self._run(lead)
        rows = [lead] * n if lead.greedy else [lead, *lead.mates]
        return [
            self._response(row, prompt_tokens=len(lead.prompt_ids) if index == 0 else 0, started=started)
            for index, row in enumerate(rows)
        ]

    def _job(self, request: ChatRequest) -> RowJob:
        if self._closed:
            raise BackendError(f"local backend for {self._name} is closed")
        if not request.messages:
            raise BackendError("a chat request needs at least one message")
        sampling = effective_sampling(request, self._defaults)
        if sampling.max_tokens < 1:
            raise BackendError(f"max_tokens must be at least 1, got {sampling.max_tokens}")
        return RowJob(request=request, sampling=sampling)

    async def _run(self, job: RowJob) -> None:
        """Queue `job` (with its mates) for the worker thread and wait; raises its error as a BackendError."""
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

    def _response(self, job: RowJob, *, prompt_tokens: int, started: float) -> ChatResponse:
        return ChatResponse(
            text=job.text,
            model=self._name,
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=job.completion_tokens),
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
            if self._adapter is not None:
                model = _with_adapter(model, self._adapter)
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
            adapter=str(self._adapter) if self._adapter is not None else None,
            dtype=self._dtype_name,
            threads=torch.get_num_threads(),
            seconds=round(time.monotonic() - started, 2),
        )

    def _serve(self, job: RowJob) -> None:
        """Runs in a worker thread: wait for the model, then answer `job` (and any batch-mates it takes)."""
        with self._model_lock:
            if job.done or job.cancelled:
                return
            batch = self._take_batch(job)
            try:
                self._ensure_loaded()
                ready = [j for j in batch if self._render(j)]
                rows = [row for j in ready for row in (j, *j.mates)]
                if rows:
                    self._generate(rows)
            except BaseException as exc:
                for j in batch:
                    if not j.done:
                        j.error = exc
            finally:
                for j in batch:
                    j.done = True

    def _take_batch(self, job: RowJob) -> list[RowJob]:
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

    def _render(self, job: RowJob) -> bool:
        """Apply the chat template (once for a job and its mates, which share the prompt); a prompt that does
        not fit the context becomes that job's error."""
        messages = [message.model_dump() for message in job.request.messages]
        text = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        job.prompt_ids = self._tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(job.prompt_ids) >= self._context_len:
            job.error = BackendError(
                f"prompt has {len(job.prompt_ids)} tokens; {self._name} handles at most {self._context_len}"
            )
            job.done = True
            return False
        for mate in job.mates:
            mate.prompt_ids = job.prompt_ids
        return True

    def _generate(self, jobs: list[RowJob]) -> None:
        """One `generate` over `jobs` (left-padded rows); a sampled batch is seeded once from its lead's seed."""
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
        stopper = RowStopper(self._tokenizer, width, jobs)
        self.generate_calls += 1
        self.generated_rows += len(jobs)
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
            generated = output[row, width:].tolist()
            finish_row(
                job,
                generated,
                stopper.ended_at[row],
                stopper.reason[row],
                tokenizer=self._tokenizer,
                stop_ids=self._stop_ids,
            )
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


def _with_adapter(model: Any, adapter: Path) -> Any:
    """`model` with the LoRA adapter in `adapter` merged into its weights (no PEFT wrapper left at generation)."""
    try:
        from peft import PeftModel
    except ImportError as error:
        raise BackendError(f"serving the adapter {adapter} needs peft: pip install 'flowsteer-mcp[local]'") from error
    try:
        wrapped = PeftModel.from_pretrained(model, adapter, is_trainable=False)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise BackendError(f"cannot apply the adapter {adapter} to the model: {error}") from error
    return wrapped.merge_and_unload()
