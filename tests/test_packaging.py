"""Each documented extra installs into a fresh virtualenv and starts what it is for.

The development environment has every extra at once, so a module imported by one extra but declared only in
another (httpx: imported by the trainer, declared only for `dev`) goes unnoticed there. Here the project is built
once into a wheel from a copy of the source (no build output lands in the repository), then installed with one
extra per fresh virtualenv, and that virtualenv imports the extra's modules and runs its commands from outside the
repository. torch is held to the build the test environment already has (the project pins 2.13.0; pip finds the
CPU wheel locally), so no other torch is ever downloaded.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "flowsteer_mcp", "operators", "training")
INSTALL_TIMEOUT_S = 900

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Extra:
    name: str  # "" for the base install
    modules: tuple[str, ...]
    commands: tuple[tuple[str, ...], ...]

    @property
    def requirement_suffix(self) -> str:
        return f"[{self.name}]" if self.name else ""


BASE = Extra(
    "",
    modules=(
        "flowsteer_mcp.cli",
        "flowsteer_mcp.server.http",
        "flowsteer_mcp.server.oauth.verifier",
        "cryptography.hazmat.primitives.asymmetric.ec",  # pyjwt[crypto]: the verifier loads RSA, EC, OKP keys
        "operators.backends.openai_compat",
        "operators.backends.factory",
        "operators.sandbox",
        "operators.answers.math_equivalence",
        "math_verify",
        "training.cli",
    ),
    commands=(("flowsteer-mcp", "--help"), ("flowsteer", "--help")),
)
LOCAL = Extra(
    "local",
    modules=(*BASE.modules, "operators.backends.local", "operators.models.prepare", "operators.models.tiny"),
    commands=(*BASE.commands, ("flowsteer", "demo", "--help")),
)
POSTGRES = Extra(
    "postgres",
    modules=(*BASE.modules, "flowsteer_mcp.store.postgres", "psycopg_pool", "psycopg_binary"),
    commands=BASE.commands,
)
TRAIN = Extra(
    "train",
    modules=(
        *LOCAL.modules,
        "training.train.loop",
        "training.train.policy",
        "training.train.plots",
        "training.vllm",
        "training.scoring.builtin",
        "torch.utils.tensorboard",
    ),
    commands=(*LOCAL.commands, ("flowsteer", "train", "--help"), ("flowsteer", "eval", "--help")),
)


def _clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without anything that would let the repository or its venv leak in."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("FLOWSTEER_", "OPENAI_"))}
    return {**env, **extra}


def _run(args: Sequence[str | Path], cwd: Path, timeout_s: float = 120, **env: str) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=_clean_env(**env), capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return done.stdout


def _torch_constraint(workdir: Path) -> list[str]:
    """`-c FILE` holding torch to the test environment's build, so pip never picks another (e.g. a CUDA one)."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return []
    constraints = workdir / "constraints.txt"
    constraints.write_text(f"torch=={version}\n")
    return ["-c", str(constraints)]


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """One scratch folder for the module; the virtualenvs are large, so it is removed at the end."""
    path = Path(tempfile.mkdtemp(prefix="flowsteer-packaging-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def wheel(workdir: Path) -> Path:
    source = workdir / "source"
    for name in SOURCES:
        origin = REPO_ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, source / name)
    dist = workdir / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source], cwd=workdir, timeout_s=300)
    (built,) = dist.glob("flowsteer_mcp-*.whl")
    return built


def _install(extra: Extra, wheel: Path, workdir: Path) -> Path:
    """A fresh virtualenv with the wheel and exactly the dependencies `extra` declares; returns its bin folder."""
    venv = workdir / f"venv-{extra.name or 'base'}"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=workdir)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-input"]
    _run([*pip, *_torch_constraint(workdir), f"{wheel}{extra.requirement_suffix}"], workdir, INSTALL_TIMEOUT_S)
    return venv / "bin"


def _check_starts(extra: Extra, bin_dir: Path, cwd: Path) -> None:
    """Every module of the extra imports from the virtualenv (not the repository) and every command starts."""
    probe = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    module = importlib.import_module(name)\n"
        "    assert module.__file__.startswith(sys.prefix), (name, module.__file__)\n"
    )
    _run([bin_dir / "python", "-c", probe, *extra.modules], cwd)
    for command in extra.commands:
        _run([bin_dir / command[0], *command[1:]], cwd)


def _torch_version(bin_dir: Path, cwd: Path) -> str:
    return _run([bin_dir / "python", "-c", "import torch; print(torch.__version__)"], cwd).strip()


async def _serve_one_edit(bin_dir: Path, cwd: Path) -> list[str]:
    """Start `flowsteer-mcp` over stdio with an openai executor configured (never called) and make one edit."""
    env = _clean_env(
        FLOWSTEER_HOME=str(cwd / "flowsteer-home"),
        FLOWSTEER_EXECUTOR_BASE_URL="http://127.0.0.1:9/v1",
        FLOWSTEER_EXECUTOR_MODEL="never-called",
    )
    server = StdioServerParameters(command=str(bin_dir / "flowsteer-mcp"), args=["--log-level", "WARNING"], env=env)
    async with Client(server) as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        created = await client.call_tool(
            "create_workflow", {"task": "What is 6*7?", "task_type": "math", "options": {"execute_each_step": False}}
        )
        assert not created.is_error and created.structured_content is not None, created.content
        step = await client.call_tool(
            "act",
            {
                "workflow_id": created.structured_content["workflow_id"],
                "text": "<action>add</action><operator>Custom</operator><prompt>Answer.</prompt>",
            },
        )
        assert not step.is_error and step.structured_content is not None, step.content
        assert step.structured_content["ok"] is True, step.structured_content
    return tools


def test_base_install_starts_both_commands_and_serves(wheel: Path, workdir: Path) -> None:
    bin_dir = _install(BASE, wheel, workdir)
    _check_starts(BASE, bin_dir, workdir)
    tools = anyio.run(_serve_one_edit, bin_dir, workdir)
    assert {"create_workflow", "act"} <= set(tools)


def test_local_install_imports_the_embedded_model_backend(wheel: Path, workdir: Path) -> None:
    bin_dir = _install(LOCAL, wheel, workdir)
    _check_starts(LOCAL, bin_dir, workdir)
    assert _torch_version(bin_dir, workdir).split("+")[0] == "2.13.0"


def test_postgres_install_imports_the_postgresql_store(wheel: Path, workdir: Path) -> None:
    bin_dir = _install(POSTGRES, wheel, workdir)
    _check_starts(POSTGRES, bin_dir, workdir)


def test_train_install_imports_the_trainer(wheel: Path, workdir: Path) -> None:
    """Regression: `training.train.loop` imports httpx, which only the `dev` extra declared."""
    bin_dir = _install(TRAIN, wheel, workdir)
    _check_starts(TRAIN, bin_dir, workdir)
    assert _torch_version(bin_dir, workdir).split("+")[0] == "2.13.0"
