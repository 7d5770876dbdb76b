"""The training configuration (docs/design/training.md, "Runs"): one validated YAML file per run.

Every section rejects unknown keys, so a misspelt option fails at load time with its dotted path instead of
being silently ignored hours into a run. Presets live in `configs/` (`paper`, `cpu-smoke`, `cpu-smollm2`,
`cpu-warmstart`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializeAsAny,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from flowsteer_mcp.api import WorkflowOptionsInput
from operators.backends.config import BackendModelConfig, EngineConfig, ModelConfig, SamplingConfig
from training.advantages import AdvantageScale, RefusedTurns
from training.errors import TrainingError
from training.loss import Normalisation
from training.reward import RewardConfig
from training.rollout.modes import ObservationMode
from training.rollout.worker import Grouping


class TrainConfigError(TrainingError, ValueError):
    """The training configuration is invalid; the message names the file and the offending key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunSettings(_Strict):
    name: str = Field(default="cwrpo", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # adapters are served as <name>@<step>
    out_dir: str = "runs/cwrpo"
    seed: int = 0
    steps: int = Field(ge=1)
    checkpoint_every: int = Field(default=1, ge=1)
    keep_checkpoints: int = Field(default=2, ge=1)  # older checkpoints are deleted once a newer one is complete


class LoraSettings(_Strict):
    r: int = Field(default=8, ge=1)
    alpha: int = Field(default=16, ge=1)
    # Written into the adapter's config; the learner's forwards run without dropout (see train/policy.py).
    dropout: float = Field(default=0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1)


class PolicySettings(_Strict):
    model: str = Field(min_length=1)  # a catalog name (`flowsteer models list`) or a transformers model folder
    dtype: Literal["float32", "bfloat16"] = "float32"
    lora: LoraSettings = Field(default_factory=LoraSettings)
    gradient_checkpointing: bool = False
    # Where the learner runs: "auto" is the rank's GPU (torchrun's LOCAL_RANK; the first GPU in one process) when
    # CUDA is available, else the CPU; "cuda" refuses to start without a GPU instead of training on the CPU.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # "fsdp": the base model's weights are sharded over the learner ranks (FSDP2), for a policy that does not fit
    # one device; needs torchrun with 2 or more ranks. The update is the same, so it is not in the fingerprint.
    shard: Literal["none", "fsdp"] = "none"
    # A trained LoRA adapter folder (e.g. a warm start's `adapter/`) on `model`: the policy at step 0 and the KL
    # reference. Why not a merged model: the adapter stays a LoRA on the raw base, so one vLLM server can serve
    # it beside the executor when `model` is the executor's own (docs/design/training.md, "Starting adapter").
    start_adapter: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _start_adapter_fits(self) -> PolicySettings:
        if self.start_adapter is None:
            return self
        config_file = Path(self.start_adapter) / "adapter_config.json"
        if not config_file.is_file():
            raise ValueError(
                f"policy.start_adapter {self.start_adapter!r} holds no adapter_config.json (a peft adapter)"
            )
        saved = json.loads(config_file.read_text(encoding="utf-8"))
        ours = {"r": self.lora.r, "lora_alpha": self.lora.alpha, "target_modules": sorted(self.lora.target_modules)}
        theirs = {
            "r": saved.get("r"),
            "lora_alpha": saved.get("lora_alpha"),
            "target_modules": sorted(saved.get("target_modules") or []),
        }
        if ours != theirs:
            raise ValueError(f"policy.lora {ours} must match the start adapter's {theirs} (its adapter_config.json)")
        if self.shard == "fsdp":
            raise ValueError("policy.start_adapter cannot be combined with policy.shard: fsdp yet; use shard: none")
        return self


class VLLMSettings(_Strict):
    """Where generation happens: vLLM servers this run starts (`replicas`, default one) or attaches to (`url`,
    `urls`); at most one of the three. Several replicas share the rollouts (docs/design/training.md, "Replicas");
    one server started with `--data-parallel-size` is one `url`."""

    url: str | None = Field(default=None, pattern=r"^https?://\S+$")  # attach: http://host:port (no /v1)
    urls: list[Annotated[str, Field(pattern=r"^https?://\S+$")]] | None = Field(default=None, min_length=1)
    # Start this many servers, each on its own free port. On CPU they share the cores: give each its own with
    # env/extra_args only if they are pinned apart (VLLM_CPU_OMP_THREADS_BIND), or they slow each other down.
    replicas: int | None = Field(default=None, ge=1)
    served_name: str = "policy"  # the base model's served name (also the executor's, with backend policy-server)
    python: str | None = None  # interpreter with vLLM; default $FLOWSTEER_VLLM_PYTHON, else .venv-vllm, else ours
    max_loras: int = Field(default=2, ge=1)
    max_model_len: int | None = Field(default=None, ge=64)
    dtype: str = "auto"
    enforce_eager: bool = False
    env: dict[str, str] = Field(default_factory=dict)  # e.g. VLLM_CPU_KVCACHE_SPACE, OMP_NUM_THREADS
    # With `replicas: N`, N mappings added to `env` of each started server in turn: where each one runs, e.g.
    # {CUDA_VISIBLE_DEVICES: "2"} on a GPU machine, {VLLM_CPU_OMP_THREADS_BIND: "1"} to pin CPU cores apart.
    replica_env: list[dict[str, str]] = Field(default_factory=list)
    extra_args: list[str] = Field(default_factory=list)
    ready_timeout_s: float = Field(default=600.0, gt=0)
    # After each published step, compare a probe prompt's log-probs under the base model and the new adapter:
    # identical answers after an update mean vLLM is not applying the adapter, which is fatal.
    verify_sync: bool = True
    # A replica this run started that died is started again on its port after the next update and served that
    # step's adapter before it rejoins (attached servers are someone else's to restart).
    restart_dead: bool = True

    @model_validator(mode="after")
    def _one_source(self) -> VLLMSettings:
        given = [name for name in ("url", "urls", "replicas") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(
                f"set at most one of vllm.url, vllm.urls and vllm.replicas (got {', '.join('vllm.' + g for g in given)})"
            )
        if self.replica_env and len(self.replica_env) != self.n_started:
            raise ValueError(
                f"vllm.replica_env has {len(self.replica_env)} entries but the run starts {self.n_started} "
                "server(s): give one mapping per started replica (or none)"
            )
        if self.urls is not None:
            cleaned = [url.rstrip("/") for url in self.urls]
            repeated = sorted({url for url in cleaned if cleaned.count(url) > 1})
            if repeated:
                raise ValueError(f"vllm.urls must be distinct, repeated: {repeated}")
        return self

    @property
    def attached_urls(self) -> list[str]:
        """The servers this run attaches to (none: it starts `replicas` of its own)."""
        if self.url is not None:
            return [self.url]
        return list(self.urls or [])

    @property
    def n_started(self) -> int:
        """How many servers this run starts itself."""
        return 0 if self.attached_urls else (self.replicas or 1)


class PolicyServerExecutor(_Strict):
    """The executor is the policy server's base model under its own served name (never the adapter)."""

    backend: Literal["policy-server"]
    max_concurrency: int = Field(default=8, ge=1)
    timeout_s: float = Field(default=120.0, gt=0)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    # false on vllm-cpu 0.32.0: a seeded request whose prompt is prefilled in chunks kills its engine
    # (configs/eval-vllm-qwen.toml); sampled draws are then distinct but not reproducible
    send_seed: bool = True


_MODEL_ENTRY: TypeAdapter[BackendModelConfig] = TypeAdapter(ModelConfig)


def _executor_settings(value: object) -> PolicyServerExecutor | BackendModelConfig:
    """`policy-server`, else a model entry of any registered backend (a plug-in's included)."""
    if isinstance(value, PolicyServerExecutor | BackendModelConfig):
        return value
    if isinstance(value, Mapping) and value.get("backend") == "policy-server":
        return PolicyServerExecutor.model_validate(value)
    return _MODEL_ENTRY.validate_python(value)


ExecutorSettings = Annotated[
    PolicyServerExecutor | SerializeAsAny[BackendModelConfig], PlainValidator(_executor_settings)
]


class DataSettings(_Strict):
    paths: list[str] = Field(min_length=1)  # JSONL files or folders (docs/design/evaluation.md, "Datasets")
    sources: list[str] | None = None
    skip_per_source: int = Field(default=0, ge=0)  # leave out each source's first N (e.g. the items you evaluate on)
    limit_per_source: int | None = Field(default=None, ge=1)  # then keep at most N per source
    # Then keep only the problems on which these transcripts' workflows scored differently (training/traces/contested.py)
    contested_in: list[str] | None = Field(default=None, min_length=1)
    shuffle: bool = True


class SamplingSettings(_Strict):
    temperature: float = Field(default=0.6, ge=0.0)
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    top_k: int | None = 20
    max_action_tokens: int = Field(default=512, ge=1)
    max_prompt_tokens: int = Field(default=256, ge=1)
    enable_thinking: bool | None = None
    # A per-trajectory seed makes generation repeatable. vllm-cpu 0.32.0 crashes its engine on seeded requests
    # whose prompt is prefilled in chunks ("CPU Generator does not use offset"), so the CPU presets turn it off.
    seeded: bool = True
    action_prefix: str | None = None  # e.g. "<action>": primes small models to start a tag (see PolicySampling)
    stop: list[str] | None = None
    reask: bool = True  # one re-ask when an action turn has no action (the trained sequence is the second one)
    reask_max_tokens: int = Field(default=128, ge=1)  # the re-ask's generation budget: one action tag


class RolloutSettings(_Strict):
    problems_per_step: int = Field(ge=1)
    rollouts_per_problem: int = Field(ge=2)  # G: a group of one has no baseline
    concurrency: int = Field(default=8, ge=1)
    timeout_s: float | None = Field(default=None, gt=0)
    mode: ObservationMode = "markovian"
    grouping: Grouping = "problem"
    drop_zero_variance: bool = False
    # "std": A = (R - mean) / std, GRPO's z-score. "none": A = R - mean, on the reward's own scale, so that a small
    # shaping term (reward.operator_cost) stays small in a group whose outcomes are all equal instead of being
    # rescaled to |A| ~ 1 (docs/design/training.md, "Groups").
    advantage_scale: AdvantageScale = "std"
    # "share": every turn trains with its trajectory's advantage (GRPO). "never_reinforce": a turn the canvas
    # refused trains with min(A, 0), since a refused action changed nothing; markovian mode only, where each turn
    # is its own sequence (docs/design/training.md, "Groups").
    refused_turns: RefusedTurns = "share"
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    canvas: WorkflowOptionsInput = Field(default_factory=WorkflowOptionsInput)  # create_workflow's options
    system_template: str | None = None  # observation template file for the in-process server (default: built-in)
    mcp_urls: list[str] = Field(default_factory=list)  # remote FlowSteer MCP servers; empty: one in-process server
    mcp_token_env: str | None = None

    @model_validator(mode="after")
    def _template_needs_local_server(self) -> RolloutSettings:
        if self.system_template and self.mcp_urls:
            raise ValueError(
                "system_template applies to the in-process server; give remote servers theirs with "
                "`flowsteer-mcp --director-template FILE`"
            )
        if self.system_template and not Path(self.system_template).is_file():
            raise ValueError(f"system_template {self.system_template!r} is not a file (paths are relative to the cwd)")
        if self.refused_turns != "share" and self.mode != "markovian":
            raise ValueError(
                f"refused_turns {self.refused_turns!r} needs mode 'markovian': in {self.mode!r} mode one sequence "
                "holds every turn of an episode, so a refused turn cannot train with its own advantage"
            )
        return self


class OptimSettings(_Strict):
    lr: float = Field(default=1e-5, gt=0.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = Field(default=1e-8, gt=0.0)
    warmup_steps: int = Field(default=0, ge=0)  # in training steps; linear from 0
    min_lr_ratio: float = Field(default=0.0, ge=0.0, le=1.0)  # cosine floor as a share of lr
    grad_clip: float = Field(default=1.0, gt=0.0)
    ppo_epochs: int = Field(default=1, ge=1)
    minibatches: int = Field(default=1, ge=1)  # optimizer updates per epoch
    micro_batch_size: int = Field(default=4, ge=1)  # sequences per forward/backward (gradient accumulation)
    logprob_chunk: int = Field(default=256, ge=1)
    # a problem's sequences run their common prompt prefix once (training/train/shared_prefix.py): the same
    # gradient, less compute; off only to measure it (benchmarks/shared_prefix.py)
    share_prefixes: bool = True


class LossSettings(_Strict):
    clip_eps: float = Field(default=0.2, gt=0.0, lt=1.0)
    kl_beta: float = Field(default=0.005, ge=0.0)
    entropy_coef: float = Field(default=0.005, ge=0.0)
    normalisation: Normalisation = "token"


class LoggingSettings(_Strict):
    tensorboard: bool = True
    plots: bool = True
    progress: bool = True
    sequences: bool = False  # write each step's training sequences (train/sequence_journal.py) to replay updates


class SftSettings(_Strict):
    """The supervised warm start (`flowsteer train sft`, docs/design/training.md, "Warm start"): LoRA fine-tuning
    of `policy` on Flow-Director transcripts, loss on the action tokens only."""

    data: list[str] = Field(min_length=1)  # transcript JSONL files or folders of them (`flowsteer traces collect`)
    # "balanced": every workflow family contributes equally many episodes; "natural": as collected; a mapping
    # {family: weight} weights families explicitly and leaves unlisted ones out.
    mix: Literal["balanced", "natural"] | dict[str, Annotated[float, Field(ge=0.0)]] = "balanced"
    out_dir: str = "runs/sft"
    steps: int | None = Field(default=None, ge=1)  # optimizer steps; unset: `epochs` passes over the train split
    epochs: float = Field(default=1.0, gt=0.0)
    batch_size: int = Field(default=8, ge=1)  # turns per optimizer step
    micro_batch_size: int = Field(default=4, ge=1)  # turns per forward/backward (gradient accumulation)
    lr: float = Field(default=2.0e-4, gt=0.0)
    warmup_steps: int = Field(default=0, ge=0)
    min_lr_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    grad_clip: float = Field(default=1.0, gt=0.0)
    max_seq_len: int = Field(default=2048, ge=16)  # longer turns are left out: a cut observation misleads
    held_out_fraction: float = Field(default=0.1, ge=0.0, lt=1.0)  # of each family's episodes
    valid_share_limit: int | None = Field(default=200, ge=1)  # held-out turns generated for the valid share
    checkpoint_every: int = Field(default=50, ge=1)
    keep_checkpoints: int = Field(default=2, ge=1)
    export_merged: bool = False  # also write the adapter merged into the base model (a CWRPO policy.model)


class TrainConfig(_Strict):
    run: RunSettings
    policy: PolicySettings
    vllm: VLLMSettings = Field(default_factory=VLLMSettings)
    executor: ExecutorSettings
    data: DataSettings
    rollout: RolloutSettings
    reward: RewardConfig = Field(default_factory=RewardConfig)
    optim: OptimSettings = Field(default_factory=OptimSettings)
    loss: LossSettings = Field(default_factory=LossSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    # The engine that runs each trajectory's workflow on the executor (timeouts, re-asks): the `[engine]` table of
    # an executor config, so a run's episodes behave as the evaluation's do under the same settings.
    engine: EngineConfig = Field(default_factory=EngineConfig)
    sft: SftSettings | None = None  # the warm start run by `flowsteer train sft`

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.optim.warmup_steps >= self.run.steps and self.optim.warmup_steps > 0:
            raise ValueError(
                f"optim.warmup_steps ({self.optim.warmup_steps}) must be below run.steps ({self.run.steps})"
            )
        return self

    def fingerprint(self) -> str:
        """A hash of everything that shapes the trajectory of a run (all but the step count and logging).

        `--resume` refuses a checkpoint whose fingerprint differs: continuing with another learning rate or
        dataset would not be the same run. Extending `run.steps` is allowed, and so is another
        `optim.micro_batch_size`: the update's gradient does not depend on it (`training/train/update.py`), only
        its peak memory does, so a run the kernel killed for memory can resume with smaller micro-batches. The
        same holds for `optim.share_prefixes`, which changes only how the gradient is computed.
        """
        # `sft` is its own run (`flowsteer train sft`): a CWRPO run starts from its output through `policy.model`.
        data = self.model_dump(
            mode="json",
            exclude={
                "run": {"steps"},
                "logging": True,
                "policy": {"device", "shard"},  # where the learner computes: a run resumes on other hardware
                "vllm": {"url", "urls", "replicas", "replica_env", "python", "restart_dead"},
                "sft": True,
            },
        )
        # Hashed as the default rather than left out, so runs checkpointed before this rule keep their fingerprint.
        data["optim"]["micro_batch_size"] = OptimSettings.model_fields["micro_batch_size"].default
        del data["optim"]["share_prefixes"]
        if self.engine == EngineConfig():
            del data["engine"]  # runs from before the section existed had the default engine: same fingerprint
        if isinstance(self.executor, PolicyServerExecutor) and self.executor.send_seed:
            del data["executor"]["send_seed"]  # added later; runs from before it sent seeds: same fingerprint
        for settings in _ADDED_LATER:
            # Runs from before a group existed had its defaults: left out then, their fingerprint is unchanged.
            if all(data[section][name] == default for section, name, default in settings):
                for section, name, _ in settings:
                    del data[section][name]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# Settings that appeared after runs had been checkpointed, in the groups that appeared together, each with its
# default as `model_dump(mode="json")` writes it. `fingerprint` leaves a group out while all of it holds the
# defaults, so older runs still resume, and so do runs hashed with the whole group (one of it set).
_ADDED_LATER: tuple[tuple[tuple[str, str, Any], ...], ...] = (
    (("policy", "start_adapter", None),),
    (
        ("reward", "operator_cost", RewardConfig.model_fields["operator_cost"].default),
        ("reward", "free_operators", RewardConfig.model_fields["free_operators"].default),
        ("rollout", "advantage_scale", RolloutSettings.model_fields["advantage_scale"].default),
    ),
    (("reward", "executor_token_cost", RewardConfig.model_fields["executor_token_cost"].default),),
    (("rollout", "refused_turns", RolloutSettings.model_fields["refused_turns"].default),),
)


def _describe(error: ValidationError, source: str) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"  {where}: {item['msg']}")
    return f"{source}: invalid training config:\n" + "\n".join(lines)


def parse_train_config(data: Any, *, source: str = "<config>") -> TrainConfig:
    if not isinstance(data, dict):
        raise TrainConfigError(f"{source}: the top level must be a mapping of sections (run, policy, ...)")
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as error:
        raise TrainConfigError(_describe(error, source)) from None


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config and apply `section.key=value` overrides (values parsed as YAML scalars)."""
    file = Path(path)
    if not file.is_file():
        raise TrainConfigError(f"no training config at {file}; presets are in configs/ (e.g. configs/cpu-smoke.yaml)")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise TrainConfigError(f"{file}: not valid YAML: {error}") from None
    for override in overrides or []:
        _apply_override(data, override, str(file))
    return parse_train_config(data, source=str(file))


def _apply_override(data: Any, override: str, source: str) -> None:
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise TrainConfigError(f"override {override!r} must look like section.key=value (e.g. run.steps=5)")
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node, dict):
            raise TrainConfigError(f"{source}: cannot apply {override!r}: {part!r} is not a section")
        node = node.setdefault(part, {})
    if not isinstance(node, dict):
        raise TrainConfigError(f"{source}: cannot apply {override!r}: {parts[-2]!r} is not a section")
    node[parts[-1]] = yaml.safe_load(raw)
