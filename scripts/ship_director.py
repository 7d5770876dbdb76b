"""Make a trained adapter the package's Flow-Director (training/ship.py; docs/design/shipped-director.md).

    python scripts/ship_director.py --config configs/cpu-director.yaml --adapter runs/sft-director/adapter \
        --name flow-director-smollm2-v0 --steps 24 --trained-on "..." --command "..." \
        --results docs/runs/director-v0/results.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from flowsteer_mcp.director.card import SHIPPED_DIR, DirectorCardError
from training.ship import ship_director
from training.train.config import TrainConfigError, load_train_config


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, required=True, help="the training config the adapter was trained under")
    parser.add_argument("--adapter", type=Path, required=True, help="the PEFT adapter folder to ship")
    parser.add_argument("--name", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--trained-on", required=True, help="the data, e.g. 'mbpp+gsm8k train, 24 problems each'")
    parser.add_argument("--command", required=True, help="the command(s) that trained it")
    parser.add_argument("--results", type=Path, help="a Markdown file with the measured results")
    parser.add_argument(
        "--temperature", type=float, help="play at this sampling temperature instead of the rollouts' (0: greedy)"
    )
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR, help="default: the package's shipped/ folder")
    args = parser.parse_args(argv)
    try:
        config = load_train_config(args.config)
        results = args.results.read_text(encoding="utf-8") if args.results else ""
        shipped = ship_director(
            config,
            args.adapter,
            args.out,
            name=args.name,
            steps=args.steps,
            trained_on=args.trained_on,
            command=args.command,
            results=results,
            temperature=args.temperature,
        )
    except (TrainConfigError, DirectorCardError, ValueError, OSError) as error:
        print(f"ship_director: error: {error}", file=sys.stderr)
        return 2
    print(f"shipped {shipped.card.name} ({shipped.card.adapter_bytes} bytes of adapter) in {shipped.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
