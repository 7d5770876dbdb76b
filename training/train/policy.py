"""The learner's copy of the policy: a transformers causal LM with a peft LoRA adapter.

The reference policy of the KL term is the same weights with the adapter disabled, so no second copy of the
model is held; a run that starts from a trained adapter (`policy.start_adapter`) keeps that adapter's few MB
instead and swaps them in for the reference forward, so the KL holds the policy near its start, not near the raw
base it could not play from. Log-probs are computed on token ids exactly as vLLM sampled them (never
re-tokenised), and only for the scored tail of each row (see `batching`).

Dropout (LoRA's included) is switched off for good when the policy is built, as TRL's `disable_dropout` does:
the forward that gives the importance ratio's log-probs is also the one the gradient flows through, and a
ratio computed under a random dropout mask is noise around the true pi/pi_old (it is not 1 on-policy and
clips good tokens). Setting every dropout's p to 0 rather than calling `eval()` keeps training mode, which
transformers' gradient checkpointing needs; and it holds when checkpointing recomputes the forward during
backward, which a dropout switched off only around the forward would not.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog
import torch
from torch import Tensor

from training.logprobs import token_entropy, token_logprobs
from training.rollout.samples import TurnSample
from training.train.batching import TokenBatch, collate
from training.train.config import LoraSettings, TrainConfig
from training.train.shared_prefix import SharedPrefix

log = structlog.get_logger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def disable_dropout(model: torch.nn.Module) -> int:
    """Set p = 0 on every dropout module (LoRA's, attention's ...); returns how many there were."""
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    for module in dropouts:
        module.p = 0.0
    return len(dropouts)


def _whole(parameter: Tensor) -> Tensor:
    """A DTensor's full value (an all-gather), or the tensor itself."""
    full = getattr(parameter, "full_tensor", None)
    return full() if callable(full) else parameter


def _fsdp_names(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The names peft knows: FSDP's wrapper inserts nothing in FSDP2, but older wrappers' prefix is dropped."""
    return {name.replace("_fsdp_wrapped_module.", ""): value for name, value in state.items()}


class PolicyModel:
    def __init__(self, model: Any, *, pad_id: int, chunk_size: int, device: torch.device | None = None) -> None:
        self.model = model
        self.device = device or torch.device("cpu")  # where the model lives; batches are moved there
        self.pad_id = pad_id
        self.chunk_size = chunk_size
        self.sharded = False  # FSDP over the ranks (`distributed.fully_shard_policy`)
        # a prefix's keys and values can be reused (`shared_prefix`); not under gradient checkpointing, which
        # turns the cache off in training mode
        self.can_share_prefixes = not getattr(model, "is_gradient_checkpointing", False)
        # the start adapter's weights (peft's saved names) when the KL reference is it rather than the base model
        self.reference_adapter: dict[str, Tensor] | None = None
        # a sharded policy's trainable weights, whole, as of the last `gather_trainable` (every rank calls it)
        self.gathered: dict[str, Tensor] | None = None
        disable_dropout(model)  # deterministic log-probs for the ratio: see the module docstring

    @classmethod
    def for_config(
        cls,
        model_dir: Path,
        config: TrainConfig,
        *,
        adapter_dir: Path | None = None,
        device: torch.device | None = None,
    ) -> PolicyModel:
        """The policy as a training config describes it (LoRA, dtype, checkpointing, log-prob chunks): what both
        CWRPO and the warm start train, so they load it alike."""
        start = config.policy.start_adapter
        return cls.load(
            model_dir,
            config.policy.lora,
            dtype=config.policy.dtype,
            adapter_dir=adapter_dir,
            start_adapter=Path(start) if start else None,
            gradient_checkpointing=config.policy.gradient_checkpointing,
            chunk_size=config.optim.logprob_chunk,
            device=device,
        )

    @classmethod
    def load(
        cls,
        model_dir: Path,
        lora: LoraSettings,
        *,
        dtype: str = "float32",
        adapter_dir: Path | None = None,
        start_adapter: Path | None = None,
        gradient_checkpointing: bool = False,
        chunk_size: int = 256,
        device: torch.device | None = None,
    ) -> PolicyModel:
        """Load the base model and attach a fresh LoRA (B = 0: the policy starts as the base model), the trained
        adapter in `adapter_dir` (a checkpoint's), or else `start_adapter`; with `start_adapter` the KL reference
        is that adapter whatever the weights are now (see the module docstring)."""
        from peft import LoraConfig, PeftModel, get_peft_model
        from peft.utils import load_peft_weights
        from transformers import AutoConfig, AutoModelForCausalLM

        device = device or torch.device("cpu")
        base = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=_DTYPES[dtype])
        base.to(device)  # type: ignore[arg-type]  # transformers' stub types `to`; before the adapter: peft creates the LoRA weights on the base layers' device
        if gradient_checkpointing:
            base.gradient_checkpointing_enable()
            base.enable_input_require_grads()
        trained = adapter_dir if adapter_dir is not None else start_adapter
        if trained is not None:
            model = PeftModel.from_pretrained(base, str(trained), is_trainable=True)
        else:
            config = LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(base, config)
        hf_config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        pad = hf_config.pad_token_id if hf_config.pad_token_id is not None else hf_config.eos_token_id
        pad_id = int(pad[0] if isinstance(pad, list) else pad or 0)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        log.info(
            "policy_loaded",
            model=str(model_dir),
            dtype=dtype,
            device=str(device),
            trainable_params=trainable,
            start_adapter=str(start_adapter) if start_adapter else None,
        )
        policy = cls(model, pad_id=pad_id, chunk_size=chunk_size, device=device)
        if start_adapter is not None:
            policy.reference_adapter = load_peft_weights(str(start_adapter), device=str(device))
        return policy

    def batch(self, samples: Sequence[tuple[TurnSample, float]], prefix: SharedPrefix | None = None) -> TokenBatch:
        """The samples left-padded into one batch on the model's device; with `prefix`, their suffixes after it."""
        batch = prefix.batch(samples, self.pad_id) if prefix is not None else collate(samples, self.pad_id)
        return batch.to(self.device)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _tail_logits(self, batch: TokenBatch, prefix: SharedPrefix | None) -> Tensor:
        out = self.model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            past_key_values=prefix.cache(batch.input_ids.shape[0]) if prefix is not None else None,
            logits_to_keep=batch.tail + 1,
            use_cache=prefix is not None,
        )
        return out.logits[:, :-1, :]  # row j scores target token j of the tail

    def logprobs(
        self, batch: TokenBatch, *, with_entropy: bool, prefix: SharedPrefix | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Current-policy log-probs [B, tail] of the tail tokens (with grad), and their entropies if asked; with
        `prefix` (from `prefix`), `batch` holds the suffixes that follow it (`SharedPrefix.batch`).

        Both the importance ratio and the gradient come from this one forward, so it runs without dropout
        (see the module docstring): two calls on the same batch give the same values, in training mode too."""
        logits = self._tail_logits(batch, prefix)
        logp = token_logprobs(logits, batch.target_ids, self.chunk_size)
        entropy = token_entropy(logits, self.chunk_size) if with_entropy else None
        return logp, entropy

    def prefix(self, prefix_ids: Sequence[int]) -> SharedPrefix:
        """The current policy's keys and values for `prefix_ids`, with grad: call its `backward` after the
        suffixes' backwards."""
        return SharedPrefix.run(self.model, prefix_ids, self.device)

    @torch.no_grad()
    def reference_logprobs(self, batch: TokenBatch, prefix: SharedPrefix | None = None) -> Tensor:
        """Log-probs under the reference policy, no grad: the base model (adapter disabled), or the start adapter;
        `prefix` must come from `reference_prefix`."""
        with self._reference_weights():
            logits = self._tail_logits(batch, prefix)
        return token_logprobs(logits, batch.target_ids, self.chunk_size)

    @torch.no_grad()
    def reference_prefix(self, prefix_ids: Sequence[int]) -> SharedPrefix:
        """The reference policy's keys and values for `prefix_ids`, for `reference_logprobs`."""
        with self._reference_weights():
            return SharedPrefix.run(self.model, prefix_ids, self.device)

    @contextmanager
    def _reference_weights(self) -> Iterator[None]:
        if self.reference_adapter is None:
            with self.model.disable_adapter():
                yield
        else:
            with self._start_adapter_swapped_in():
                yield

    @contextmanager
    def _start_adapter_swapped_in(self) -> Iterator[None]:
        """The start adapter's weights in the trainable tensors for the block, then the current ones back, in
        place (the optimizer keeps its parameters)."""
        from peft.utils import set_peft_model_state_dict

        assert self.reference_adapter is not None
        current = [(p, p.detach().clone()) for p in self.trainable_parameters()]
        with torch.no_grad():
            outcome: Any = set_peft_model_state_dict(self.model, self.reference_adapter)
            if outcome.unexpected_keys:
                raise RuntimeError(f"the start adapter does not fit the policy: {outcome.unexpected_keys[:3]}")
            try:
                yield
            finally:
                for parameter, value in current:
                    parameter.copy_(value)

    @torch.no_grad()
    def gather_trainable(self) -> None:
        """A sharded policy: gather each trainable weight whole (a collective: every rank calls it, in the same
        order), so rank 0 can write the adapter alone. Cheap for LoRA; the frozen base stays sharded."""
        if self.sharded:
            self.gathered = {
                name: _whole(p).detach().cpu().clone() for name, p in self.model.named_parameters() if p.requires_grad
            }

    def _trainable_state(self) -> dict[str, Tensor]:
        if not self.sharded:
            return {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        if self.gathered is None:
            raise RuntimeError("a sharded policy's adapter is written from gather_trainable(); call it on every rank")
        return self.gathered

    @torch.no_grad()
    def adapter_is_identity(self) -> bool:
        """True while every LoRA B matrix is zero (a fresh adapter: the policy equals the base model)."""
        return all(not bool(p.any()) for name, p in self._trainable_state().items() if "lora_B" in name)

    def save_adapter(self, folder: Path) -> Path:
        """Write the adapter as peft `save_pretrained` does (what vLLM loads); returns the folder. A sharded
        policy writes the weights its last `gather_trainable` collected.

        `save_embedding_layers=False`: the vocabulary is never resized here, and peft's default ("auto") asks
        the model hub for the base model's config to find out, a network lookup at every checkpoint."""
        folder.mkdir(parents=True, exist_ok=True)
        state = _fsdp_names(self._trainable_state()) if self.sharded else None
        self.model.save_pretrained(str(folder), state_dict=state, save_embedding_layers=False)
        return folder

    def train(self) -> None:
        self.model.train()

    def eval(self) -> None:
        self.model.eval()
