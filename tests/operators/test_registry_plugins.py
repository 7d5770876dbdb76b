"""Registry: the built-in operators, and third-party operators through real `flowsteer.operators` entry points.

The plug-in tests install a distribution the way pip would leave it on disk: a `*.dist-info` folder with
METADATA and entry_points.txt next to the plug-in's module, in a folder put on sys.path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from operators.backends.scripted import ScriptedBackend
from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.library import BUILTIN_OPERATORS
from operators.registry import ENTRY_POINT_GROUP, OperatorRegistry, UnknownOperatorError
from operators.specs import BUILTIN_SPECS

PLUGIN_MODULE = """
from operators.base import Category, Operator, OperatorInput, OperatorOutput, OperatorRuntime, OperatorSpec, Role
from operators.backends.base import ChatMessage, ChatRequest


class Shout(Operator):
    spec = OperatorSpec(
        name="Shout",
        category=Category.FORMATTING,
        role=Role.SOLUTION,
        summary="Upper-cases the executor's answer.",
        when_to_use="Tests only.",
        signature="Shout(problem) -> {text}",
    )

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> OperatorOutput:
        reply = await runtime.llm.complete(
            ChatRequest(messages=[ChatMessage(role="user", content=inputs.problem)], operator="Shout")
        )
        return OperatorOutput(text=reply.text.upper())


def not_an_operator():
    return 42
"""


def _install_plugin(
    root: Path,
    module: str,
    entry_points: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    source: str = PLUGIN_MODULE,
) -> None:
    root.mkdir()
    (root / f"{module}.py").write_text(source)
    dist_info = root / f"{module}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}\n")
    monkeypatch.syspath_prepend(str(root))


def _builtin_registry() -> OperatorRegistry:
    registry = OperatorRegistry(BUILTIN_SPECS.values())
    for operator_cls in BUILTIN_OPERATORS:
        registry.register(operator_cls)
    return registry


def test_every_builtin_spec_has_an_implementation_with_a_typed_output() -> None:
    registry = _builtin_registry()
    assert {cls.spec.name for cls in BUILTIN_OPERATORS} == set(BUILTIN_SPECS)
    for name, spec in BUILTIN_SPECS.items():
        implementation = registry.implementation(name.lower())
        assert implementation.spec is spec
        assert issubclass(implementation.output_model, OperatorOutput)
        assert implementation.output_model is not OperatorOutput, f"{name} lacks its own output model"
    assert len(registry.names()) == 12
    assert registry.names(include_legacy=True)[12:] == ["CodeT"]  # + the CodeT peer, not advertised


async def test_entry_point_plugin_is_registered_and_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"fs_plugin_ok_{tmp_path.name.replace('-', '_')}"
    _install_plugin(tmp_path / "site", module, {"Shout": f"{module}:Shout"}, monkeypatch)
    registry = _builtin_registry()
    with pytest.raises(UnknownOperatorError):
        registry.spec("Shout")

    assert registry.load_entry_points() == ["Shout"]

    assert "shout" in registry
    operator_cls = registry.implementation("Shout")
    assert issubclass(operator_cls, Operator)
    backend = ScriptedBackend(["quiet words"], name="plugin")
    output = await operator_cls().run(OperatorInput(problem="say it"), OperatorRuntime(llm=backend))
    assert output.text == "QUIET WORDS"
    assert backend.prompts == ["say it"]


def test_entry_point_that_is_not_an_operator_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"fs_plugin_bad_{tmp_path.name.replace('-', '_')}"
    _install_plugin(tmp_path / "site", module, {"Bogus": f"{module}:not_an_operator"}, monkeypatch)
    registry = _builtin_registry()
    with pytest.raises(TypeError, match=r"'Bogus'.*not an Operator subclass"):
        registry.load_entry_points()
    assert "Bogus" not in registry
    assert len(registry.names(include_legacy=True)) == 13
