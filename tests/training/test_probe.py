"""The decision probe: exclusive decision openings, the written turn's decision, exact cached log-probs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import pytest
import torch

from training.sft.dataset import SftExample
from training.train.config import TrainConfig, parse_train_config
from training.train.probe import (
    Decision,
    ProbeError,
    ProbeObservation,
    ProbeReport,
    adapter_folder,
    decision_logprobs,
    decision_of,
    decision_token_ids,
    dialect_decisions,
    observations_from_examples,
    probe_examples,
    probe_policy,
    report_markdown,
)

OPERATORS = ["Custom", "Programmer", "ScEnsemble"]
STRUCTURES = ["parallel", "loop"]


class CharTokenizer:
    """A stand-in tokenizer: one id per character (never merges across a tag boundary), a visible chat template."""

    eos_token_id = 0

    def apply_chat_template(
        self, messages: list[dict[str, str]], *, tokenize: bool, add_generation_prompt: bool
    ) -> str:
        return "".join(f"[{m['role']}]{m['content']}" for m in messages) + "[assistant]"

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i != self.eos_token_id)


class MergingTokenizer(CharTokenizer):
    """Merges a word's last letter with a following `<`, as byte-pair vocabularies can."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        ids = [ord(c) for c in text.replace("m<", "\x01")]
        return {"input_ids": ids}


def test_decision_openings_are_mutually_exclusive_and_cover_every_verb() -> None:
    decisions = dialect_decisions(OPERATORS, STRUCTURES)
    names = [d.name for d in decisions]
    assert names[0] == "finish"
    assert {"add Custom", "add ScEnsemble", "add parallel", "modify", "delete", "set_prompt", "cancel"} <= set(names)
    openings = [d.opening for d in decisions]
    assert not any(a != b and b.startswith(a) for a in openings for b in openings)


def test_a_name_that_prefixes_another_is_refused() -> None:
    with pytest.raises(ProbeError, match="prefix"):
        dialect_decisions(["Review", "Reviewer"], [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<action>finish</action>", "finish"),
        (" <action>add</action><operator>Custom</operator><samples>4</samples>", "add Custom"),
        (
            "<action>add</action><structure>parallel</structure><operators>Custom, Programmer</operators>",
            "add parallel",
        ),
        ("<action>modify</action><target>1</target>", "modify"),
        ("<action>add</action><operator>CustomX</operator>", None),
        ("I will add an operator", None),
    ],
)
def test_the_decision_of_a_written_turn(text: str, expected: str | None) -> None:
    assert decision_of(text, dialect_decisions(OPERATORS, STRUCTURES)) == expected


def test_openings_the_tokenizer_merges_into_their_closing_tag_are_refused() -> None:
    decisions = [Decision("add Custom", "<action>add</action><operator>Custom")]
    assert decision_token_ids(CharTokenizer(), decisions) == [[ord(c) for c in decisions[0].opening]]
    with pytest.raises(ProbeError, match="merges"):
        decision_token_ids(MergingTokenizer(), decisions)


def example(
    episode: int, turn: int, completion: str, family: str = "code/greedy", kind: Literal["action", "prompt"] = "action"
) -> SftExample:
    tokenizer = CharTokenizer()
    return SftExample(
        prompt_ids=[episode + 1, turn + 1],
        completion_ids=tokenizer(completion)["input_ids"],
        family=family,
        episode=episode,
        turn=turn,
        kind=kind,
        messages=(),
    )


def test_observations_carry_the_task_type_and_the_decisions_taken_before() -> None:
    decisions = dialect_decisions(OPERATORS, STRUCTURES)
    examples = [
        example(0, 1, "<action>finish</action>"),
        example(0, 0, "<action>add</action><operator>Custom</operator>"),
        example(1, 0, "<action>add</action><operator>Programmer</operator>", family="math/pot"),
        example(1, 1, "Compute it in solve().", family="math/pot", kind="prompt"),
        example(1, 2, "<action>add</action><operator>ScEnsemble</operator>", family="math/pot"),
    ]
    observations = observations_from_examples(examples, CharTokenizer(), decisions)
    assert [o.context for o in observations] == [
        "code | (empty)",
        "code | add Custom",
        "math | (empty)",
        "math | add Programmer",
    ]
    only_code = observations_from_examples(examples, CharTokenizer(), decisions, task_type="code")
    assert [o.context for o in only_code] == ["code | (empty)", "code | add Custom"]


def config_with_sft(transcripts: Path | None) -> TrainConfig:
    data = {
        "run": {"steps": 1, "seed": 0},
        "policy": {"model": "x"},
        "executor": {"backend": "scripted", "replies": ["x"]},
        "data": {"paths": ["x.jsonl"]},
        "rollout": {"problems_per_step": 1, "rollouts_per_problem": 2},
    }
    if transcripts is not None:
        data["sft"] = {"data": [str(transcripts)], "held_out_fraction": 0.5}
    return parse_train_config(data)


def test_probe_turns_are_the_warm_starts_held_out_split_or_every_given_transcript_turn(tmp_path: Path) -> None:
    lines = []
    for episode in range(4):
        turns = [
            {"messages": [{"role": "user", "content": f"problem {episode}"}], "completion": "<action>add</action>"},
            {"messages": [{"role": "user", "content": f"problem {episode}, one op"}], "completion": "<action>finish"},
        ]
        lines.append(json.dumps({"episode": {"family": "code/a"}, "turns": turns}))
    transcripts = tmp_path / "t.jsonl"
    transcripts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    held_out = probe_examples(config_with_sft(transcripts), CharTokenizer())
    assert len(held_out) == 4 and len({ex.episode for ex in held_out}) == 2
    every = probe_examples(config_with_sft(None), CharTokenizer(), [transcripts])
    assert len(every) == 8
    with pytest.raises(ProbeError, match="--transcripts"):
        probe_examples(config_with_sft(None), CharTokenizer())


def test_adapter_folders_by_checkpoint_or_name(tmp_path: Path) -> None:
    adapter = tmp_path / "checkpoints" / "step-7" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}", encoding="utf-8")
    assert adapter_folder(tmp_path / "checkpoints" / "step-7") == ("step-7", adapter)
    assert adapter_folder(Path(f"late={adapter}")) == ("late", adapter)
    with pytest.raises(ProbeError, match="no LoRA adapter"):
        adapter_folder(tmp_path)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoModelForCausalLM

    from operators.models.prepare import prepare

    folder = prepare("tiny-qwen3", home=tmp_path_factory.mktemp("models"))
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()


def full_sequence_logprob(model, prompt: list[int], opening: list[int]) -> float:
    ids = torch.tensor([prompt + opening])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    return float(sum(logp[len(prompt) - 1 + i, token] for i, token in enumerate(opening)))


@pytest.mark.usefixtures("one_torch_thread")
def test_cached_opening_logprobs_equal_full_sequence_teacher_forcing_in_any_order(tiny_model) -> None:
    prompt = [5, 17, 42, 99, 7, 3]
    openings = [[11, 12, 13], [11, 12, 14, 15], [20], [11, 30]]
    cached = decision_logprobs(tiny_model, prompt, openings)
    expected = [full_sequence_logprob(tiny_model, prompt, o) for o in openings]
    assert cached == pytest.approx(expected, abs=1e-4)
    reversed_order = decision_logprobs(tiny_model, prompt, openings[::-1])
    assert reversed_order[::-1] == pytest.approx(cached, abs=1e-4)


@pytest.mark.usefixtures("one_torch_thread")
def test_a_policy_report_averages_per_context_and_keeps_the_rest_as_other(tiny_model) -> None:
    decisions = [Decision("a", "a"), Decision("b", "b")]
    openings = [[11], [12, 13]]
    observations = [ProbeObservation("code | (empty)", [5, 6]), ProbeObservation("code | (empty)", [7, 8])]
    policy = probe_policy("base", tiny_model, observations, decisions, openings)
    (context,) = policy.contexts
    assert context.observations == 2
    singles = [[math.exp(lp) for lp in decision_logprobs(tiny_model, o.prompt_ids, openings)] for o in observations]
    assert context.probabilities["a"] == pytest.approx((singles[0][0] + singles[1][0]) / 2)
    assert sum(context.probabilities.values()) == pytest.approx(1.0)
    table = report_markdown(ProbeReport(decisions=["a", "b"], policies=[policy]), min_probability=0.0)
    assert "**code | (empty)** (2 observations)" in table
    assert "| base |" in table
