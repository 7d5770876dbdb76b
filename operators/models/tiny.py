"""A tiny random-weight Qwen3 with its own small BPE tokenizer, built offline in about a second.

Nothing is downloaded: the tokenizer is trained on a synthetic corpus generated here from a fixed seed,
and the weights come from a seeded initialisation, so two builds with the same library versions are
byte-identical. The model talks nonsense; it exists so tests can exercise the real transformers path
(chat template, generation, LoRA) quickly.
"""

from __future__ import annotations

import random
from pathlib import Path

import structlog

from operators.models.chat_template import CHATML_SPECIAL_TOKENS, CHATML_TEMPLATE

log = structlog.get_logger(__name__)

SEED = 20240611
VOCAB_SIZE = 1024

_WORD_TEXT = (
    "the a an of to in is was for on that with as by at from it this be are or not have has which you we they "
    "he she their there what when where why how all any each few more most other some such no only own same so "
    "than too very can will just should now answer question problem solution step plan check test code value "
    "number list string function return result input output error true false first second last next sum total "
    "count add subtract multiply divide equal greater less small large even odd prime square root half double "
    "time day year price cost apple book car city river mountain water light sound word sentence letter digit"
)
_WORDS = tuple(_WORD_TEXT.split())

_CODE_LINES = (
    "def {f}({a}, {b}):", "    return {a} + {b}", "    return {a} * {b}", "for {a} in range({n}):",
    "    if {a} % 2 == 0:", "        {b}.append({a})", "while {a} < {n}:", "    {a} += 1",
    "print({f}({n}, {m}))", "assert {f}({n}) == {m}", "import math", "x = [{n}, {m}, {k}]",
    "class {F}:", "    def __init__(self):", "        self.{a} = {n}", "{a} = {{'{b}': {n}}}",
)  # fmt: skip

_NAMES = ("x", "y", "n", "i", "j", "k", "total", "items", "values", "result", "count", "text", "data")
_FUNCS = ("solve", "add", "compute", "check", "merge", "count_words", "is_prime", "fib", "gcd", "helper")


def _corpus_lines(rng: random.Random, count: int = 3000) -> list[str]:
    lines: list[str] = []
    for i in range(count):
        kind = i % 4
        if kind in (0, 1):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
            sentence = " ".join(words).capitalize() + rng.choice((".", "?", "!", ","))
            lines.append(sentence)
        elif kind == 2:
            line = rng.choice(_CODE_LINES).format(
                f=rng.choice(_FUNCS), F=rng.choice(_FUNCS).title().replace("_", ""), a=rng.choice(_NAMES),
                b=rng.choice(_NAMES), n=rng.randint(0, 999), m=rng.randint(0, 99), k=rng.randint(0, 9),
            )  # fmt: skip
            lines.append(line)
        else:
            a, b = rng.randint(0, 9999), rng.randint(1, 99)
            lines.append(f"{a} + {b} = {a + b}; {a} * {b} = {a * b}. The answer is {a - b}.")
    return lines


def build_tokenizer(out_dir: Path) -> None:
    """Train a byte-level BPE (every byte encodable, ChatML special tokens) and save it for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(CHATML_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_corpus_lines(random.Random(SEED)), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        chat_template=CHATML_TEMPLATE,
        model_max_length=8192,
    )
    tokenizer.save_pretrained(out_dir)


def build_tiny_qwen3(out_dir: Path) -> None:
    """Write tokenizer, config, generation config and float32 weights of the tiny model into `out_dir`."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out_dir.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(out_dir, local_files_only=True)
    vocab = tokenizer.get_vocab()
    im_end, text_end = vocab["<|im_end|>"], vocab["<|endoftext|>"]
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=8192,  # the Flow-Director system prompt alone is ~2.7k of these tokens
        tie_word_embeddings=True,
        # Larger than the usual 0.02 so greedy output varies with the prompt instead of repeating one token.
        initializer_range=0.1,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=text_end,
    )
    # Seed only our own generator state for the duration of the build, leaving the caller's RNG alone.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = Qwen3ForCausalLM(config).float()
    model.generation_config = GenerationConfig(eos_token_id=[im_end, text_end], pad_token_id=text_end)
    model.save_pretrained(out_dir)
    log.info("model_tiny_built", out=str(out_dir), params=model.num_parameters(), vocab=len(tokenizer))
