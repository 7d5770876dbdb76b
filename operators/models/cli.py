"""`flowsteer models prepare NAME` / `flowsteer models list`: the command-line face of `prepare`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from operators.models.cache import model_dir, models_home
from operators.models.catalog import CATALOG, UnknownModelError
from operators.models.errors import ModelPrepareError
from operators.models.manifest import ManifestProblem, verify_folder
from operators.models.prepare import prepare


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowsteer models prepare",
        description="Materialise a local model (no model hub) into the cache folder; `list` shows the catalog.",
    )
    parser.add_argument("name", help=f"model name ({', '.join(CATALOG)}) or `list`")
    parser.add_argument("--home", type=Path, default=None, help="cache folder (default: FLOWSTEER_HOME/XDG cache)")
    parser.add_argument("--force", action="store_true", help="rebuild even when a valid build exists")
    parser.add_argument("--verify", action="store_true", help="re-hash every file of an existing build")
    return parser


def _list(home: Path | None) -> int:
    print(f"models folder: {models_home(home)}")
    for recipe in CATALOG.values():
        folder = model_dir(recipe.name, home)
        try:
            manifest = verify_folder(folder, recipe_version=recipe.recipe_version)
            state = f"prepared ({sum(f.size for f in manifest.files) / 1e6:.0f} MB, {manifest.digest[:12]})"
        except ManifestProblem:
            state = "not prepared"
        heavy = " [heavy]" if recipe.heavy else ""
        print(f"  {recipe.name:<30} ~{recipe.approx_size_mb} MB{heavy}  {state}\n      {recipe.description}")
    return 0


def cli_prepare(argv: list[str]) -> int:
    """Entry point; returns a process exit code (0 ok, 1 preparation failed, 2 usage error)."""
    args = _parser().parse_args(argv)
    if args.name == "list":
        return _list(args.home)
    started = time.monotonic()
    try:
        folder = prepare(args.name, home=args.home, force=args.force, verify=args.verify)
        manifest = verify_folder(folder)
    except UnknownModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ModelPrepareError, ManifestProblem, OSError) as exc:
        print(f"error: preparing {args.name} failed: {exc}", file=sys.stderr)
        return 1
    total_mb = sum(f.size for f in manifest.files) / 1e6
    print(folder)
    print(
        f"{manifest.name}: {len(manifest.files)} files, {total_mb:.1f} MB, digest {manifest.digest[:16]}, "
        f"built {manifest.created_at} in {manifest.build_seconds:.1f}s; this call took {time.monotonic() - started:.1f}s",
        file=sys.stderr,
    )
    return 0
