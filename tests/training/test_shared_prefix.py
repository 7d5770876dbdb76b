"""A problem's common prompt prefix runs once in the learner, and nothing it computes changes (tiny Qwen3)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.rollout.samples import TurnSample
from training.train.batching import collate
from training.train.config import LoraSettings, LossSettings, OptimSettings
from training.train.policy import PolicyModel
from training.train.shared_prefix import PrefixGroup, group_by_prefix
from training.train.update import policy_update


def turn(group: str, prompt: list[int], completion: list[int], mask: list[int] | None = None) -> TurnSample:
    flags = mask or [1] * len(completion)
    return TurnSample(
        episode_id=f"{group}#{len(prompt)}",
        group_id=group,
        turn_index=0,
        prompt_ids=prompt,
        completion_ids=completion,
        completion_mask=flags,
        behaviour_logprobs=[-2.5 if f else 0.0 for f in flags],
    )


def two_problems() -> list[tuple[TurnSample, float]]:
    """Two groups whose turns open with their problem's 40 tokens, then differ (the canvas so far); two turns
    of group a have the very same prompt, as the first turns of a group's rollouts do."""
    g = torch.Generator().manual_seed(3)

    def ids(n: int) -> list[int]:
        return torch.randint(5, 1000, (n,), generator=g).tolist()

    head_a, head_b = ids(40), ids(40)
    return [
        (turn("a", head_a + ids(3), ids(4)), 0.8),
        (turn("a", head_a + ids(3), ids(6), mask=[1, 1, 0, 0, 1, 1]), -0.4),
        (turn("a", head_a, ids(2)), 0.3),
        (turn("a", head_a, ids(5)), -0.7),
        (turn("b", head_b + ids(9), ids(3)), 0.5),
        (turn("b", head_b + ids(1), ids(7)), -0.5),
        (turn("c", ids(12), ids(3)), 1.0),  # alone in its group: nothing to share
    ]


def test_groups_share_their_common_prefix_and_leave_each_turn_a_prompt_token() -> None:
    sequences = two_problems()
    groups = {tuple(g.members): g.length for g in group_by_prefix(sequences, range(len(sequences)))}
    # group a: two prompts are exactly the 40-token head, so the shared part stops one token short of it
    assert groups == {(0, 1, 2, 3): 39, (4, 5): 40, (6,): 0}
    assert group_by_prefix(sequences, [4, 5], min_length=41) == [PrefixGroup(0, [4, 5])]  # too short to pay


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from operators.models import prepare

    return prepare("tiny-qwen3", home=tmp_path_factory.mktemp("models"))


@pytest.mark.slow  # loads transformers + peft
class TestOnTheTinyModel:
    def policy(self, model_dir: Path) -> PolicyModel:
        """A policy whose adapter is not the identity, so the KL term and the LoRA gradients are not zero."""
        torch.manual_seed(0)
        policy = PolicyModel.load(model_dir, LoraSettings(r=4, alpha=8, dropout=0.0), chunk_size=5)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, parameter in policy.model.named_parameters():
                if "lora_B" in name:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
        return policy

    def test_suffixes_on_the_shared_prefix_score_as_whole_sequences(self, model_dir: Path) -> None:
        policy = self.policy(model_dir)
        policy.eval()
        sequences = two_problems()[:4]  # group a, suffixes of 1 to 4 prompt tokens: padding between the parts
        whole = collate(sequences, policy.pad_id)
        with torch.no_grad():
            expected, _ = policy.logprobs(whole, with_entropy=False)
            expected_reference = policy.reference_logprobs(whole)
            prefix = policy.prefix(sequences[0][0].prompt_ids[:39])
            suffixes = prefix.batch(sequences, policy.pad_id)
            got, _ = policy.logprobs(suffixes, with_entropy=False, prefix=prefix)
            reference_prefix = policy.reference_prefix(sequences[0][0].prompt_ids[:39])
            got_reference = policy.reference_logprobs(suffixes, reference_prefix)
        assert suffixes.tail == whole.tail
        assert not torch.allclose(expected, expected_reference)  # the two weights differ, so both are checked
        for row, (sample, _) in enumerate(sequences):
            n = len(sample.completion_ids)
            torch.testing.assert_close(got[row, -n:], expected[row, -n:], rtol=0, atol=2e-5)
            torch.testing.assert_close(got_reference[row, -n:], expected_reference[row, -n:], rtol=0, atol=2e-5)

    def update(self, model_dir: Path, *, share: bool, micro_batch_size: int) -> tuple[dict[str, torch.Tensor], int]:
        """The adapter's change after one SGD update, and how many tokens the model's forwards were given."""
        policy = self.policy(model_dir)
        before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
        seen = [0]
        hook = policy.model.get_input_embeddings().register_forward_hook(
            lambda _module, args, _out: seen.__setitem__(0, seen[0] + args[0].numel())
        )
        policy_update(
            policy,
            torch.optim.SGD(policy.trainable_parameters(), lr=1.0),
            two_problems(),
            OptimSettings(micro_batch_size=micro_batch_size, grad_clip=1e9, share_prefixes=share),
            LossSettings(kl_beta=0.2, entropy_coef=0.0),
            torch.Generator().manual_seed(0),
        )
        hook.remove()
        return {n: p.detach() - before[n] for n, p in policy.model.named_parameters() if p.requires_grad}, seen[0]

    @pytest.mark.parametrize("micro_batch_size", [1, 3])
    def test_the_update_is_the_same_with_fewer_tokens_forwarded(self, model_dir: Path, micro_batch_size: int) -> None:
        unshared, unshared_tokens = self.update(model_dir, share=False, micro_batch_size=micro_batch_size)
        shared, shared_tokens = self.update(model_dir, share=True, micro_batch_size=micro_batch_size)
        assert any(float(d.abs().max()) > 0 for d in unshared.values())
        for name, delta in unshared.items():
            torch.testing.assert_close(shared[name], delta, rtol=1e-4, atol=1e-7, msg=name)
        assert shared_tokens < 0.6 * unshared_tokens
