"""`flowsteer train --config configs/<preset>.yaml [--resume] [--set section.key=value ...]`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import anyio

from flowsteer_mcp.logs import configure_logging

USAGE_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowsteer train",
        description="CWRPO training of a Flow-Director policy: rollouts through the MCP canvas, generation on "
        "vLLM with the LoRA adapter handed over after every step. Presets: configs/paper.yaml (GPU), "
        "configs/cpu-smoke.yaml, configs/cpu-smollm2.yaml, configs/cpu-warmstart.yaml (after `train sft`).",
    )
    parser.add_argument("--config", required=True, help="training config (YAML), e.g. configs/cpu-smoke.yaml")
    parser.add_argument(
        "--resume", action="store_true", help="continue from the newest checkpoint in run.out_dir (same next batch)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value (repeatable), e.g. --set run.steps=5 --set vllm.url=http://127.0.0.1:8000",
    )
    parser.add_argument("--check", action="store_true", help="validate the config, print it and exit")
    parser.add_argument("--log-level", default=os.environ.get("FLOWSTEER_LOG_LEVEL", "INFO"))
    return parser


def train_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    from training.train.checkpoint import CheckpointError
    from training.train.config import TrainConfigError, load_train_config

    try:
        config = load_train_config(args.config, args.overrides)
    except TrainConfigError as error:
        print(f"flowsteer train: {error}", file=sys.stderr)
        return USAGE_ERROR
    if args.check:
        import yaml

        print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), end="")
        return 0

    from operators.models.catalog import UnknownModelError
    from operators.models.errors import ModelPrepareError
    from training.train.distributed import init_topology, leaving_together
    from training.train.loop import RolloutFailure, Trainer
    from training.vllm import LoraSyncError, VLLMServerError

    # Under torchrun (WORLD_SIZE > 1): one learner rank of a data-parallel run; otherwise the one process.
    topology = init_topology()
    try:
        with leaving_together(topology):
            summary = anyio.run(Trainer(config, resume=args.resume, topology=topology).run)
    except (CheckpointError, ValueError, ModelPrepareError, UnknownModelError) as error:
        print(f"flowsteer train: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except (VLLMServerError, LoraSyncError) as error:
        print(f"flowsteer train: vLLM failed: {error}", file=sys.stderr)
        return 1
    except RolloutFailure as error:
        print(f"flowsteer train: {error}", file=sys.stderr)
        return 1
    if not topology.is_main:
        return 0
    print(
        f"trained steps {summary.first_step}..{summary.last_step} in {summary.wall_s:.0f} s; "
        f"metrics: {summary.out_dir}/metrics.jsonl, plots: {summary.out_dir}/plots/, "
        f"checkpoints: {summary.out_dir}/checkpoints/"
    )
    return 0


def trend_main(argv: list[str]) -> int:
    """`flowsteer train trend RUN_DIR`: the first-vs-last-quarter test of a run's per-trajectory journal."""
    from training.train.trend import (
        DEFAULT_RESAMPLES,
        METRIC_KEYS,
        TrendError,
        journal_path,
        read_points,
        report_markdown,
        trend_report,
    )

    parser = argparse.ArgumentParser(
        prog="flowsteer train trend",
        description="Test whether a training run learned: per-trajectory values of the first vs the last quarter "
        "of steps (difference of means, bootstrap 95%% CI, one-sided permutation p, Welch's t) and how the "
        "workflow-family shares moved. Reads RUN_DIR/trajectories.jsonl.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run.out_dir of a `flowsteer train` run")
    parser.add_argument("--metric", choices=list(METRIC_KEYS), default="reward", help="value compared (default reward)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap and permutation draws")
    parser.add_argument("--seed", type=int, default=0, help="seed of the resampling (the report is reproducible)")
    args = parser.parse_args(argv)
    try:
        points = read_points(journal_path(Path(args.run_dir)), args.metric)
        report = trend_report(points, metric=args.metric, resamples=args.resamples, seed=args.seed)
    except TrendError as error:
        print(f"flowsteer train trend: {error}", file=sys.stderr)
        return USAGE_ERROR
    print(report.model_dump_json(indent=2) if args.json else report_markdown(report), end="\n" if args.json else "")
    return 0


def probe_main(argv: list[str]) -> int:
    """`flowsteer train probe --config C --adapter DIR ...`: the policies' decision probabilities on fixed turns."""
    parser = argparse.ArgumentParser(
        prog="flowsteer train probe",
        description="Score the config's policy model, then each adapter on it, on the same Flow-Director "
        "observations: the probability that the next turn opens with each decision (finish, add <operator>, add "
        "<structure>, modify ...), averaged per context (task type and the decisions taken before). Observations: "
        "the warm start's held-out turns (the config's sft: section), or every turn of --transcripts.",
    )
    parser.add_argument("--config", required=True, help="training config (YAML): policy.model is the base")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument(
        "--adapter",
        dest="adapters",
        action="append",
        default=[],
        metavar="[NAME=]DIR",
        help="a LoRA adapter or checkpoint folder (repeatable), e.g. runs/cwrpo/checkpoints/step-10",
    )
    parser.add_argument(
        "--transcripts", action="append", default=[], metavar="PATH", help="transcript files or folders (repeatable)"
    )
    parser.add_argument("--task", default=None, help="only observations of this task type (code, math, qa ...)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (1 beside a running training job)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of Markdown")
    parser.add_argument("--log-level", default=os.environ.get("FLOWSTEER_LOG_LEVEL", "WARNING"))
    args = parser.parse_args(argv)
    configure_logging(args.log_level)

    import torch
    from transformers import AutoTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)

    from training.sft.dataset import TranscriptError
    from training.train.config import TrainConfigError, load_train_config
    from training.train.loop import resolve_policy_model
    from training.train.probe import (
        ProbeError,
        adapter_folder,
        default_decisions,
        observations_from_examples,
        probe_examples,
        report_markdown,
        run_probe,
    )

    try:
        config = load_train_config(args.config, args.overrides)
        adapters = [adapter_folder(Path(raw)) for raw in args.adapters]
        model_dir = resolve_policy_model(config.policy.model)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        decisions = default_decisions()
        examples = probe_examples(config, tokenizer, args.transcripts)
        observations = observations_from_examples(examples, tokenizer, decisions, task_type=args.task)
        dtype = torch.float32 if args.dtype == "float32" else torch.bfloat16
        report = run_probe(model_dir, observations, decisions, tokenizer, adapters, dtype=dtype)
    except (TrainConfigError, ProbeError, TranscriptError) as error:
        print(f"flowsteer train probe: {error}", file=sys.stderr)
        return USAGE_ERROR
    print(report.model_dump_json(indent=2) if args.json else report_markdown(report))
    return 0
