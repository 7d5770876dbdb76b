"""The manifest written into every prepared model folder, and how a folder is checked against it.

A folder counts as prepared only when its manifest parses, its self-digest matches, and every listed file
has the recorded size (quick check) or the recorded sha256 (full check). The manifest is written last, so
a half-built folder never passes.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from operators.errors import OperatorsError

MANIFEST_NAME = "flowsteer-manifest.json"
MANIFEST_FORMAT = 1
_CHUNK = 1 << 20


class FileEntry(BaseModel):
    path: str  # relative, POSIX
    size: int
    sha256: str


class SourceEntry(BaseModel):
    package: str
    version: str
    wheel_file: str
    wheel_sha256: str
    member: str
    member_sha256: str


class GgufEntry(BaseModel):
    filename: str
    size: int
    sha256: str


class Manifest(BaseModel):
    format: int = MANIFEST_FORMAT
    name: str
    recipe_version: int
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    build_seconds: float = 0.0
    builder: dict[str, str] = Field(default_factory=dict)  # library versions used to build
    sources: list[SourceEntry] = Field(default_factory=list)
    gguf: GgufEntry | None = None
    files: list[FileEntry]
    digest: str = ""  # sha256 over the identity fields below; doubles as the model's content id

    def compute_digest(self) -> str:
        identity = {
            "name": self.name,
            "recipe_version": self.recipe_version,
            "files": [entry.model_dump() for entry in sorted(self.files, key=lambda e: e.path)],
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


class ManifestProblem(OperatorsError):
    """Why a folder does not match its manifest (missing, corrupt, stale or tampered)."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def describe_files(folder: Path) -> list[FileEntry]:
    """Hash every file under `folder` (except the manifest itself) into manifest entries."""
    entries = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel == MANIFEST_NAME:
            continue
        entries.append(FileEntry(path=rel, size=path.stat().st_size, sha256=sha256_file(path)))
    return entries


def write_manifest(folder: Path, manifest: Manifest) -> Manifest:
    sealed = manifest.model_copy(update={"digest": manifest.compute_digest()})
    (folder / MANIFEST_NAME).write_text(sealed.model_dump_json(indent=2) + "\n")
    return sealed


def read_manifest(folder: Path) -> Manifest:
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise ManifestProblem(f"no {MANIFEST_NAME} in {folder}")
    try:
        manifest = Manifest.model_validate_json(path.read_text())
    except (ValidationError, ValueError, OSError) as exc:
        raise ManifestProblem(f"unreadable manifest in {folder}: {exc}") from exc
    if manifest.format != MANIFEST_FORMAT:
        raise ManifestProblem(f"manifest format {manifest.format} is not {MANIFEST_FORMAT}")
    if manifest.digest != manifest.compute_digest():
        raise ManifestProblem(f"manifest digest mismatch in {folder} (edited or truncated)")
    return manifest


def verify_folder(folder: Path, *, full: bool = False, recipe_version: int | None = None) -> Manifest:
    """Check `folder` against its manifest; sizes only unless `full`. Raises ManifestProblem."""
    manifest = read_manifest(folder)
    if recipe_version is not None and manifest.recipe_version != recipe_version:
        raise ManifestProblem(
            f"{folder} was built by recipe version {manifest.recipe_version}, current is {recipe_version}"
        )
    for entry in manifest.files:
        path = folder / entry.path
        if not path.is_file():
            raise ManifestProblem(f"missing file {entry.path} in {folder}")
        size = path.stat().st_size
        if size != entry.size:
            raise ManifestProblem(f"{entry.path} has {size} bytes, manifest says {entry.size}")
        if full and sha256_file(path) != entry.sha256:
            raise ManifestProblem(f"{entry.path} does not match its recorded sha256")
    return manifest


def folder_fingerprint(folder: Path) -> str:
    """A content id for any model folder: the manifest digest when valid, else names+sizes+mtimes."""
    try:
        return read_manifest(folder).digest
    except ManifestProblem:
        pass
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()
