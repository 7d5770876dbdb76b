"""CWRPO objective and chunked log-probs: hand-computed values, the canvas mask, step-0 identities,
clipping direction, gradient routing, and a tiny Qwen3 + LoRA step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from training.logprobs import causal_token_entropy, causal_token_logprobs, token_entropy, token_logprobs
from training.loss import LossMetrics, cwrpo_loss, masked_mean

F64 = torch.float64


def hand_batch() -> dict[str, torch.Tensor]:
    """Two sequences of three tokens; the last token of sequence 1 is not a policy token (mask 0)."""
    return {
        "logp_new": torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -9.0]], dtype=F64),
        "logp_behaviour": torch.tensor([[-1.0, -2.5, -0.2], [-0.3, -0.7, 0.0]], dtype=F64),
        "logp_ref": torch.tensor([[-1.1, -2.0, -0.4], [-0.3, -1.2, 0.0]], dtype=F64),
        "advantages": torch.tensor([1.0, -2.0], dtype=F64),
        "mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        "entropy": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]], dtype=F64),
    }


def run_loss(batch: dict[str, torch.Tensor], **kwargs: Any) -> tuple[torch.Tensor, LossMetrics]:
    return cwrpo_loss(
        batch["logp_new"],
        batch["logp_behaviour"],
        batch["logp_ref"],
        batch["advantages"],
        batch["mask"],
        entropy=batch.get("entropy"),
        **kwargs,
    )


# ---------------------------------------------------------------- values by hand


def test_token_mean_loss_matches_hand_computation() -> None:
    # Per masked token (eps 0.2):
    #   s0t0: log r 0    -> r 1           A +1: surr 1
    #   s0t1: log r 0.5  -> r 1.64872127  A +1: min(1.6487, 1.2) = 1.2            (clipped)
    #   s0t2: log r -0.3 -> r 0.74081822  A +1: min(0.7408, 0.8) = 0.74081822
    #   s1t0: log r 0    -> r 1           A -2: surr -2
    #   s1t1: log r -0.5 -> r 0.60653066  A -2: min(-1.2131, -1.6) = -1.6         (clipped)
    #   surrogate mean = (1 + 1.2 + 0.74081822 - 2 - 1.6) / 5 = -0.13183636
    # k3 with d = ref - new: s0t0 d=-0.1 -> e^-0.1 + 0.1 - 1 = 0.00483742; s0t2 d=0.1 -> e^0.1 - 1.1 = 0.00517092;
    #   others 0.  mean = 0.01000834 / 5 = 0.00200167
    # entropy mean = (1 + 2 + 3 + 4 + 5) / 5 = 3  (the 100 is masked out)
    # L = 0.13183636 + 0.005 * 0.00200167 - 0.005 * 3 = 0.11684636
    loss, metrics = run_loss(hand_batch())
    assert float(loss) == pytest.approx(0.11684636419976806, abs=1e-12)
    assert metrics.surrogate == pytest.approx(-0.13183635586365644, abs=1e-12)
    assert metrics.kl == pytest.approx(0.002001667222321446, abs=1e-12)
    assert metrics.entropy == 3.0
    assert metrics.clip_fraction == pytest.approx(0.4)
    assert metrics.ratio_mean == pytest.approx((1 + 1.6487212707 + 0.7408182207 + 1 + 0.6065306597) / 5)
    assert metrics.ratio_max == pytest.approx(1.6487212707)
    # approx KL to behaviour = mean of (r - 1) - log r
    drift = [0.0, 0.6487212707 - 0.5, -0.2591817793 + 0.3, 0.0, -0.3934693403 + 0.5]
    assert metrics.approx_kl_behaviour == pytest.approx(sum(drift) / 5)
    assert metrics.n_tokens == 5
    assert metrics.n_sequences == 2


def test_sequence_mean_loss_matches_hand_computation() -> None:
    # surrogate: seq0 (1 + 1.2 + 0.74081822) / 3 = 0.98027274, seq1 (-2 - 1.6) / 2 = -1.8 -> mean -0.40986363
    # KL: seq0 0.01000834 / 3 = 0.00333611, seq1 0 -> 0.00166806; entropy: seq0 2, seq1 4.5 -> 3.25
    # L = 0.40986363 + 0.005 * 0.00166806 - 0.005 * 3.25 = 0.39362197
    loss, metrics = run_loss(hand_batch(), normalisation="sequence")
    assert float(loss) == pytest.approx(0.3936219701664734, abs=1e-12)
    assert metrics.surrogate == pytest.approx(-0.40986362988638037, abs=1e-12)
    assert metrics.entropy == 3.25


def test_metrics_reconcile_with_the_loss() -> None:
    loss, metrics = run_loss(hand_batch(), kl_beta=0.1, entropy_coef=0.02)
    assert metrics.entropy is not None
    assert float(loss) == pytest.approx(-metrics.surrogate + 0.1 * metrics.kl - 0.02 * metrics.entropy)


def test_gradient_matches_hand_computation() -> None:
    batch = hand_batch()
    batch["logp_new"].requires_grad_(True)
    loss, _ = run_loss(batch)
    loss.backward()
    grad = batch["logp_new"].grad
    assert grad is not None
    # Clipped tokens (s0t1, s1t1) have ref == new there, so their whole gradient is 0.
    assert grad[0, 1] == 0.0
    assert grad[1, 1] == 0.0
    # s0t2, unclipped: d(-r A / 5)/d new = -0.74081822 / 5; KL part 0.005 * (1 - e^0.1) / 5.
    expected = -0.7408182206817179 / 5 + 0.005 * (1 - 1.1051709180756477) / 5
    assert float(grad[0, 2]) == pytest.approx(expected, abs=1e-12)
    # s1t0: r = 1, A = -2: -(1 * -2) / 5 = 0.4; KL gradient 0 (d = 0).
    assert float(grad[1, 0]) == pytest.approx(0.4, abs=1e-12)
    assert grad[1, 2] == 0.0  # not a policy token


# ---------------------------------------------------------------- the canvas mask


def test_mask_zero_positions_change_neither_loss_nor_gradient() -> None:
    first = hand_batch()
    second = hand_batch()
    # Garbage wherever mask == 0: huge, -inf, NaN.
    second["logp_new"][1, 2] = 50.0
    second["logp_behaviour"][1, 2] = float("-inf")
    second["logp_ref"][1, 2] = float("nan")
    second["entropy"][1, 2] = float("inf")
    grads = []
    losses = []
    for batch in (first, second):
        batch["logp_new"].requires_grad_(True)
        batch["entropy"].requires_grad_(True)
        loss, _ = run_loss(batch)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append((batch["logp_new"].grad.clone(), batch["entropy"].grad.clone()))  # type: ignore[union-attr]
    assert losses[0] == losses[1]
    assert torch.equal(grads[0][0], grads[1][0])
    assert torch.equal(grads[0][1], grads[1][1])
    assert grads[1][0][1, 2] == 0.0
    assert grads[1][1][1, 2] == 0.0


def test_empty_mask_gives_zero_loss_and_zero_gradient() -> None:
    batch = hand_batch()
    batch["mask"] = torch.zeros(2, 3, dtype=torch.bool)
    batch["logp_new"].requires_grad_(True)
    loss, metrics = run_loss(batch)
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert metrics.n_tokens == 0
    assert torch.equal(batch["logp_new"].grad, torch.zeros(2, 3, dtype=F64))  # type: ignore[arg-type]


# ---------------------------------------------------------------- step 0 and clipping


def test_step_zero_has_zero_kl_and_unit_ratio() -> None:
    logp = torch.tensor([[-0.7, -1.3, -2.2, -0.1]], dtype=torch.float32, requires_grad=True)
    mask = torch.tensor([[0, 1, 1, 1]])
    loss, metrics = cwrpo_loss(logp, logp.detach(), logp.detach().clone(), torch.tensor([0.5]), mask)
    assert metrics.kl == 0.0
    assert metrics.ratio_mean == 1.0
    assert metrics.ratio_max == 1.0
    assert metrics.clip_fraction == 0.0
    assert metrics.approx_kl_behaviour == 0.0
    assert float(loss.detach()) == -0.5  # -mean(1 * A), no entropy given
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5 / 3, -0.5 / 3, -0.5 / 3]]))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("advantage", "ratio", "expected_surrogate", "clipped"),
    [
        (1.0, 1.5, 1.2, True),  # positive A, ratio above 1 + eps: capped, no push further up
        (1.0, 0.5, 0.5, False),  # positive A, ratio below 1 - eps: still pushed up (pessimistic branch)
        (-1.0, 0.5, -0.8, True),  # negative A, ratio below 1 - eps: capped, no push further down
        (-1.0, 1.5, -1.5, False),  # negative A, ratio above 1 + eps: still pushed down
        (1.0, 1.1, 1.1, False),  # inside the trust region
    ],
)
def test_clipping_engages_beyond_eps_in_the_right_direction(
    advantage: float, ratio: float, expected_surrogate: float, clipped: bool
) -> None:
    behaviour = torch.tensor([[-1.0]], dtype=F64)
    new = (behaviour + torch.log(torch.tensor(ratio, dtype=F64))).requires_grad_(True)
    loss, metrics = cwrpo_loss(
        new, behaviour, None, torch.tensor([advantage], dtype=F64), torch.ones(1, 1), kl_beta=0.0
    )
    loss.backward()
    assert metrics.surrogate == pytest.approx(expected_surrogate)
    assert metrics.clip_fraction == (1.0 if clipped else 0.0)
    grad = float(new.grad)  # type: ignore[arg-type]
    if clipped:
        assert grad == 0.0
    else:
        assert grad == pytest.approx(-ratio * advantage)  # d(-r A)/d logp_new = -r A


def test_gradient_flows_only_through_logp_new_and_entropy() -> None:
    batch = {name: tensor.clone() for name, tensor in hand_batch().items()}
    for name in ("logp_new", "logp_behaviour", "logp_ref", "advantages", "entropy"):
        batch[name].requires_grad_(True)
    loss, _ = run_loss(batch)
    loss.backward()
    assert batch["logp_new"].grad is not None
    assert batch["entropy"].grad is not None  # the current policy's entropy is regularised
    assert batch["logp_behaviour"].grad is None
    assert batch["logp_ref"].grad is None
    assert batch["advantages"].grad is None


def test_per_token_advantages_are_accepted() -> None:
    batch = hand_batch()
    batch["advantages"] = batch["advantages"].unsqueeze(-1).expand(2, 3).clone()
    loss, _ = run_loss(batch)
    assert float(loss) == pytest.approx(0.11684636419976806, abs=1e-12)


def test_masked_mean_modes() -> None:
    values = torch.tensor([[1.0, 3.0, 0.0], [10.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    assert float(masked_mean(values, mask, "token")) == pytest.approx(14 / 3)
    assert float(masked_mean(values, mask, "sequence")) == pytest.approx((2 + 10) / 2)  # empty row ignored


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mask": torch.tensor([[1, 2, 1], [1, 1, 0]])}, "mask"),
        ({"logp_behaviour": torch.zeros(2, 2)}, "logp_behaviour"),
        ({"advantages": torch.zeros(3)}, "advantages"),
        ({"logp_ref": None}, "logp_ref is required"),
        ({"logp_behaviour": torch.tensor([[-1.0, float("nan"), -0.2], [-0.3, -0.7, 0.0]])}, "non-finite"),
    ],
)
def test_bad_inputs_are_rejected(change: dict, message: str) -> None:
    batch = {**hand_batch(), **change}
    with pytest.raises(ValueError, match=message):
        cwrpo_loss(batch["logp_new"], batch["logp_behaviour"], batch["logp_ref"], batch["advantages"], batch["mask"])


def test_bad_coefficients_are_rejected() -> None:
    batch = hand_batch()
    with pytest.raises(ValueError, match="clip_eps"):
        run_loss(batch, clip_eps=0.0)
    with pytest.raises(ValueError, match="kl_beta"):
        run_loss(batch, kl_beta=-1.0)
    with pytest.raises(ValueError, match="normalisation"):
        run_loss(batch, normalisation="batch")


# ---------------------------------------------------------------- chunked log-probs and entropy


def exact_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def exact_entropy_fp32(logits: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(logits.float(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def exact_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(logits.double(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_token_logprobs_and_entropy_equal_the_exact_values(dtype: torch.dtype, chunk_size: int) -> None:
    generator = torch.Generator().manual_seed(1)
    logits = (torch.randn(3, 37, 101, generator=generator) * 3).to(dtype)
    targets = torch.randint(0, 101, (3, 37), generator=generator)
    got = token_logprobs(logits, targets, chunk_size=chunk_size)
    assert got.dtype == torch.float32
    assert torch.allclose(got, exact_logprobs(logits, targets), atol=1e-5, rtol=0)
    entropy = token_entropy(logits, chunk_size=chunk_size)
    assert torch.allclose(entropy, exact_entropy(logits), atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("quantity", ["logprobs", "entropy"])
def test_chunked_gradients_equal_autograd_of_the_exact_formulas(dtype: torch.dtype, quantity: str) -> None:
    generator = torch.Generator().manual_seed(2)
    base = torch.randn(2, 9, 33, generator=generator).to(dtype)
    targets = torch.randint(0, 33, (2, 9), generator=generator)
    weights = torch.randn(2, 9, generator=generator)

    def chunked(x: torch.Tensor) -> torch.Tensor:
        return token_logprobs(x, targets, chunk_size=4) if quantity == "logprobs" else token_entropy(x, chunk_size=5)

    def exact(x: torch.Tensor) -> torch.Tensor:
        return exact_logprobs(x, targets) if quantity == "logprobs" else exact_entropy_fp32(x)

    grads = []
    for function in (chunked, exact):
        leaf = base.clone().requires_grad_(True)
        (function(leaf) * weights).sum().backward()
        assert leaf.grad is not None and leaf.grad.dtype == dtype
        grads.append(leaf.grad.float())
    if dtype == torch.float32:
        assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=0)
    else:  # both are fp32 gradients rounded once to bf16: equal to within one bf16 rounding step
        assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=2**-7)


def test_gradcheck_in_double_precision() -> None:
    logits = torch.randn(2, 5, 7, dtype=F64, requires_grad=True)
    targets = torch.randint(0, 7, (2, 5))
    assert torch.autograd.gradcheck(lambda x: token_logprobs(x, targets, chunk_size=2), (logits,))
    assert torch.autograd.gradcheck(lambda x: token_entropy(x, chunk_size=3), (logits,))


def test_no_full_precision_copy_of_the_logits_is_kept_for_backward() -> None:
    logits = torch.randn(2, 16, 50).to(torch.bfloat16).requires_grad_(True)
    targets = torch.randint(0, 50, (2, 16))
    saved: list[tuple[torch.dtype, int]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append((tensor.dtype, tensor.numel()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        token_logprobs(logits, targets, chunk_size=4).sum()
        token_entropy(logits, chunk_size=4).sum()
    full = logits.numel()
    assert (torch.bfloat16, full) in saved  # the hook did see what backward keeps
    assert (torch.float32, full) not in saved  # only the bf16 logits and per-token [B, T] statistics
    assert all(numel <= 2 * 16 for dtype, numel in saved if dtype == torch.float32)


def test_entropy_tolerates_banned_tokens() -> None:
    logits = torch.tensor([[0.0, float("-inf"), 1.0, float("-inf")]], requires_grad=True)
    entropy = token_entropy(logits)
    entropy.sum().backward()
    p = torch.softmax(torch.tensor([0.0, 1.0]), dim=-1)
    assert float(entropy.detach()[0]) == pytest.approx(float(-(p * p.log()).sum()))
    assert torch.isfinite(logits.grad).all()  # type: ignore[arg-type]


def test_causal_helpers_align_with_token_positions() -> None:
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 6, 11, generator=generator)
    ids = torch.randint(0, 11, (2, 6), generator=generator)
    aligned = causal_token_logprobs(logits, ids, chunk_size=4)
    assert aligned.shape == ids.shape
    assert torch.equal(aligned[:, 0], torch.zeros(2))
    # position t is scored by the logits at t - 1
    assert torch.allclose(aligned[:, 1:], exact_logprobs(logits[:, :-1], ids[:, 1:]), atol=1e-6)
    entropy = causal_token_entropy(logits)
    assert torch.allclose(entropy[:, 1:], exact_entropy(logits[:, :-1]), atol=1e-5)


def test_logprob_input_errors() -> None:
    logits = torch.randn(2, 3, 5)
    with pytest.raises(ValueError, match="shape"):
        token_logprobs(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        token_logprobs(logits, torch.full((2, 3), 5))
    with pytest.raises(ValueError, match="floating"):
        token_entropy(torch.zeros(2, 3, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_size"):
        token_entropy(logits, chunk_size=0)


# ---------------------------------------------------------------- tiny Qwen3 + LoRA


@pytest.mark.slow  # importing transformers + peft alone takes several seconds
def test_tiny_qwen3_lora_step_zero_kl_and_one_update(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
        initializer_range=0.2,
        tie_word_embeddings=False,
    )
    lora = LoraConfig(r=8, lora_alpha=8, lora_dropout=0.05, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = get_peft_model(Qwen3ForCausalLM(config), lora)
    prompt_length, completion_length = 7, 5
    ids = torch.randint(0, 64, (2, prompt_length + completion_length))
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, prompt_length:] = True  # only the sampled completion is a policy action

    def policy_logprobs(*, keep_graph: bool) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model(input_ids=ids).logits
        if keep_graph:
            logits.retain_grad()
        return causal_token_logprobs(logits, ids, chunk_size=4), logits

    model.train()
    logp_new, logits = policy_logprobs(keep_graph=True)
    with model.disable_adapter(), torch.no_grad():
        logp_ref = causal_token_logprobs(model(input_ids=ids).logits, ids)
    # LoRA B starts at zero: the adapter model is the base model at step 0 (dropout only hits the zero path).
    assert torch.equal(logp_new.detach(), logp_ref)

    logp_behaviour = logp_new.detach()
    loss, metrics = cwrpo_loss(logp_new, logp_behaviour, logp_ref, torch.tensor([1.0, 1.0]), mask)
    assert metrics.kl == 0.0
    assert metrics.ratio_mean == 1.0
    assert metrics.n_tokens == 2 * completion_length

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    loss.backward()
    # The loss never read the prompt tokens' log-probs: logits rows that score prompt tokens (and the row
    # after the last token) get exactly zero gradient; rows scoring completion tokens do not.
    assert logits.grad is not None
    scoring_rows = logits.grad.abs().sum(-1)  # row t scores token t + 1
    assert torch.equal(scoring_rows[:, : prompt_length - 1], torch.zeros(2, prompt_length - 1))
    assert torch.equal(scoring_rows[:, -1], torch.zeros(2))
    assert bool((scoring_rows[:, prompt_length - 1 : -1] > 0).all())
    optimizer.step()

    model.eval()
    with torch.no_grad():
        after = causal_token_logprobs(model(input_ids=ids).logits, ids)
    before = logp_ref
    assert float(after[mask].sum()) > float(before[mask].sum())
    with model.disable_adapter(), torch.no_grad():
        reference_after = causal_token_logprobs(model(input_ids=ids).logits, ids)
    assert torch.equal(reference_after, logp_ref)  # the base weights were not touched
