"""Turn a GGUF checkpoint into an ordinary transformers folder (bf16 safetensors + tokenizer + template).

transformers can load a GGUF but refuses to save it while it is marked as GGUF-quantized, so we ask it
to dequantise everything, rebuild a plain model from the same config minus `quantization_config`, move
the weights over, and save that.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import structlog

from operators.models.chat_template import CHATML_TEMPLATE
from operators.models.errors import ModelPrepareError
from operators.models.offline import hub_offline

log = structlog.get_logger(__name__)


def _stop_token_ids(tokenizer: Any) -> list[int]:
    """Every token that ends an assistant turn: the tokenizer's eos plus ChatML's turn and text ends."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    for token in ("<|im_end|>", "<|endoftext|>"):
        if token in vocab:
            ids.add(int(vocab[token]))
    return sorted(ids)


def convert_gguf(gguf_path: Path, out_dir: Path, *, dtype_name: str = "bfloat16") -> None:
    """Write a dequantised transformers model folder for `gguf_path` into `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils.quantization_config import GgufConfig

    dtype = getattr(torch, dtype_name)
    src_dir, filename = str(gguf_path.parent), gguf_path.name
    with hub_offline():
        try:
            tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=filename, local_files_only=True)
            packed = AutoModelForCausalLM.from_pretrained(
                src_dir,
                gguf_file=filename,
                dtype=dtype,
                quantization_config=GgufConfig(gguf_file=filename, dequantize=True),
                local_files_only=True,
            )
        except ImportError as exc:
            raise ModelPrepareError(f"GGUF loading needs the `gguf` and `accelerate` packages: {exc}") from exc
    state = {name: tensor.to(dtype) for name, tensor in packed.state_dict().items()}
    config = packed.config
    del packed
    gc.collect()

    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = dtype
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [name for name in missing if not name.endswith("lm_head.weight") or not config.tie_word_embeddings]
    if missing or unexpected:
        raise ModelPrepareError(f"GGUF weights do not fit the rebuilt model: missing={missing} unexpected={unexpected}")
    del state
    gc.collect()

    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    stop_ids = _stop_token_ids(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    generation = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stop_ids if len(stop_ids) > 1 else stop_ids[0],
        pad_token_id=pad_id,
    )
    model.generation_config = generation
    model.config.pad_token_id = pad_id

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    log.info("model_gguf_converted", source=filename, out=str(out_dir), params=model.num_parameters(), dtype=dtype_name)
    del model
    gc.collect()
