"""Training configs: the shipped presets validate, mistakes are refused with their dotted path."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from training.data import Problem
from training.train.config import TrainConfigError, load_train_config, parse_train_config
from training.train.optim import lr_factor
from training.train.stream import ProblemStream, StreamCursor

REPO = Path(__file__).resolve().parents[2]
PRESETS = ["paper", "paper-multigpu", "cpu-smoke", "cpu-smollm2", "cpu-warmstart", "cpu-cluster"]


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # preset paths (templates, data) are relative to the repository root


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_validate(preset: str) -> None:
    config = load_train_config(REPO / "configs" / f"{preset}.yaml")
    assert config.rollout.rollouts_per_problem >= 2
    assert config.run.steps >= 1


def test_paper_preset_carries_the_paper_hyperparameters() -> None:
    config = load_train_config(REPO / "configs" / "paper.yaml")
    lora = config.policy.lora
    assert (lora.r, lora.alpha, lora.dropout) == (64, 64, 0.05)
    assert set(lora.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert (config.optim.lr, config.run.steps) == (1e-5, 300)
    assert (config.loss.clip_eps, config.loss.kl_beta, config.loss.entropy_coef) == (0.2, 0.005, 0.005)
    sampling = config.rollout.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.6, 0.95, 20)
    assert config.rollout.canvas.max_rounds == 20
    assert config.optim.grad_clip == 1.0


def minimal() -> dict[str, object]:
    return {
        "run": {"steps": 3},
        "policy": {"model": "tiny-qwen3"},
        "executor": {"backend": "policy-server"},
        "data": {"paths": ["x.jsonl"]},
        "rollout": {"problems_per_step": 1, "rollouts_per_problem": 2},
    }


def test_unknown_key_is_an_error_naming_its_path() -> None:
    data = minimal()
    data["optim"] = {"learning_rate": 1e-4}
    with pytest.raises(TrainConfigError, match=r"optim\.learning_rate: Extra inputs are not permitted"):
        parse_train_config(data, source="c.yaml")


def test_group_of_one_is_refused() -> None:
    data = minimal()
    data["rollout"] = {"problems_per_step": 1, "rollouts_per_problem": 1}
    with pytest.raises(TrainConfigError, match=r"rollout\.rollouts_per_problem"):
        parse_train_config(data)


def test_executor_is_never_left_unspecified() -> None:
    data = minimal()
    del data["executor"]
    with pytest.raises(TrainConfigError, match="executor"):
        parse_train_config(data)


def test_missing_template_file_is_refused(tmp_path: Path) -> None:
    data = minimal()
    data["rollout"] = {"problems_per_step": 1, "rollouts_per_problem": 2, "system_template": str(tmp_path / "no.txt")}
    with pytest.raises(TrainConfigError, match="system_template"):
        parse_train_config(data)


def test_overrides_apply_and_bad_ones_are_explained(tmp_path: Path) -> None:
    config = load_train_config(REPO / "configs" / "cpu-smoke.yaml", ["run.steps=7", "vllm.url=http://127.0.0.1:9"])
    assert config.run.steps == 7 and config.vllm.url == "http://127.0.0.1:9"
    with pytest.raises(TrainConfigError, match=r"section\.key=value"):
        load_train_config(REPO / "configs" / "cpu-smoke.yaml", ["run.steps"])
    with pytest.raises(TrainConfigError, match="no training config"):
        load_train_config(tmp_path / "missing.yaml")


def test_fingerprint_ignores_steps_logging_and_micro_batches_but_not_the_learning_rate() -> None:
    base = parse_train_config(minimal())
    longer = parse_train_config({**minimal(), "run": {"steps": 9}, "logging": {"plots": False}})
    smaller_micro = parse_train_config({**minimal(), "optim": {"micro_batch_size": 1}})  # same gradient, less memory
    unshared = parse_train_config({**minimal(), "optim": {"share_prefixes": False}})  # same gradient, more compute
    other_lr = parse_train_config({**minimal(), "optim": {"lr": 3e-4}})
    assert base.fingerprint() == longer.fingerprint() == smaller_micro.fingerprint() == unshared.fingerprint()
    assert base.fingerprint() != other_lr.fingerprint()


def test_lr_schedule_warms_up_linearly_then_decays_by_cosine_to_the_floor() -> None:
    factors = [lr_factor(s, total_steps=10, warmup_steps=2, min_ratio=0.1) for s in range(11)]
    assert factors[:2] == [0.5, 1.0]
    assert factors[2] == pytest.approx(1.0)
    assert factors[6] == pytest.approx(0.1 + 0.9 * 0.5)  # half-way through the 8 decay steps
    assert factors[10] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(factors[1:]))


def problems(n: int) -> list[Problem]:
    return [
        Problem(id=f"p{i}", source="s", problem_type="math", problem=f"q{i}", ground_truth=str(i)) for i in range(n)
    ]


def test_stream_cursor_restores_the_exact_next_batch() -> None:
    straight = ProblemStream(problems(5), seed=3)
    drawn = [[p.id for p in straight.next_batch(2)] for _ in range(4)]

    resumed = ProblemStream(problems(5), seed=3)
    resumed.next_batch(2)
    resumed.next_batch(2)
    saved = StreamCursor.model_validate(resumed.cursor.model_dump())
    fresh = ProblemStream(problems(5), seed=3)
    fresh.cursor = saved
    assert [p.id for p in fresh.next_batch(2)] == drawn[2]
    assert [p.id for p in fresh.next_batch(2)] == drawn[3]


def test_stream_batches_stay_distinct_across_passes_and_cover_every_problem() -> None:
    stream = ProblemStream(problems(5), seed=0)
    batches = [[p.id for p in stream.next_batch(3)] for _ in range(6)]
    assert all(len(set(b)) == 3 for b in batches)
    assert set(batches[0]) | set(batches[1]) == {f"p{i}" for i in range(5)}
    assert stream.cursor.epoch >= 3
    with pytest.raises(ValueError, match="batch size"):
        stream.next_batch(6)


def test_engine_section_shapes_the_run_but_its_default_keeps_older_fingerprints() -> None:
    base = parse_train_config(minimal())
    explicit_default = parse_train_config({**minimal(), "engine": {"reasks": 2}})
    lean = parse_train_config({**minimal(), "engine": {"sampled_reasks": 0, "call_timeout_s": 900}})
    assert lean.engine.sampled_reasks == 0 and lean.engine.call_timeout_s == 900
    assert base.fingerprint() == explicit_default.fingerprint()
    assert base.fingerprint() != lean.fingerprint()
    with pytest.raises(TrainConfigError, match=r"engine\.sampled_reasks"):
        parse_train_config({**minimal(), "engine": {"sampled_reasks": 99}})


def test_advantage_scale_is_std_unless_set_and_refuses_other_values() -> None:
    assert parse_train_config(minimal()).rollout.advantage_scale == "std"
    data = minimal()
    data["rollout"] = {"problems_per_step": 1, "rollouts_per_problem": 2, "advantage_scale": "none"}
    assert parse_train_config(data).rollout.advantage_scale == "none"
    data["rollout"] = {"problems_per_step": 1, "rollouts_per_problem": 2, "advantage_scale": "mad"}
    with pytest.raises(TrainConfigError, match=r"rollout\.advantage_scale"):
        parse_train_config(data)


# The fingerprint of `minimal()` before `reward.operator_cost`, `reward.free_operators` and
# `rollout.advantage_scale` existed: runs checkpointed then must still resume.
MINIMAL_FINGERPRINT_BEFORE_LATER_SETTINGS = "ac37cfa5bcc2f9a1"


def test_settings_added_later_keep_older_fingerprints_at_their_defaults() -> None:
    assert parse_train_config(minimal()).fingerprint() == MINIMAL_FINGERPRINT_BEFORE_LATER_SETTINGS
    explicit_defaults = minimal()
    explicit_defaults["reward"] = {"operator_cost": 0.0, "free_operators": 2, "executor_token_cost": 0.0}
    explicit_defaults["rollout"] = {"problems_per_step": 1, "rollouts_per_problem": 2, "advantage_scale": "std"}
    assert parse_train_config(explicit_defaults).fingerprint() == MINIMAL_FINGERPRINT_BEFORE_LATER_SETTINGS


@pytest.mark.parametrize(
    ("section", "settings"),
    [
        ("reward", {"operator_cost": 0.05}),
        ("reward", {"operator_cost": 0.05, "free_operators": 3}),
        ("rollout", {"problems_per_step": 1, "rollouts_per_problem": 2, "advantage_scale": "none"}),
        ("reward", {"executor_token_cost": 0.02, "unfinished_penalty": 0.2}),
    ],
)
def test_settings_added_later_shape_the_fingerprint_when_set(section: str, settings: dict[str, object]) -> None:
    data = minimal()
    data[section] = settings
    assert parse_train_config(data).fingerprint() != MINIMAL_FINGERPRINT_BEFORE_LATER_SETTINGS


def test_a_group_of_later_settings_is_hashed_whole_once_one_of_it_is_set() -> None:
    # run 4b of docs/runs/cpu-warmstart was hashed with all three settings, free_operators at its default
    costed = {**minimal(), "reward": {"operator_cost": 0.05}}
    costed_explicit = {**minimal(), "reward": {"operator_cost": 0.05, "free_operators": 2}}
    costed_more_free = {**minimal(), "reward": {"operator_cost": 0.05, "free_operators": 3}}
    fingerprints = [parse_train_config(data).fingerprint() for data in (costed, costed_explicit, costed_more_free)]
    assert fingerprints[0] == fingerprints[1] != fingerprints[2]


def test_refused_turns_need_markovian_sequences_and_change_the_fingerprint_only_when_set() -> None:
    rollout = {"problems_per_step": 1, "rollouts_per_problem": 2}
    never = parse_train_config({**minimal(), "rollout": {**rollout, "refused_turns": "never_reinforce"}})
    shared = parse_train_config({**minimal(), "rollout": {**rollout, "refused_turns": "share"}})
    assert shared.fingerprint() == parse_train_config(minimal()).fingerprint() != never.fingerprint()
    with pytest.raises(TrainConfigError, match="refused_turns 'never_reinforce' needs mode 'markovian'"):
        parse_train_config({**minimal(), "rollout": {**rollout, "refused_turns": "never_reinforce", "mode": "history"}})
