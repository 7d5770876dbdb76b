"""One exception root per package: every exception class a package defines subclasses it, and keeps its standard
base, so `except <Root>` catches the package's own failures and `except ValueError` (etc.) still works."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from flowsteer_mcp.errors import FlowSteerError
from operators.errors import OperatorsError
from training.errors import TrainingError

ROOTS: dict[str, type[Exception]] = {
    "operators": OperatorsError,
    "training": TrainingError,
    "flowsteer_mcp": FlowSteerError,
}


def exception_classes(package: str) -> list[type[BaseException]]:
    """The exception classes defined (not imported) in the package's modules."""
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # importing it would run the command
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                found.append(cls)
    return found


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_exception_class_of_a_package_subclasses_its_root(package: str) -> None:
    classes = exception_classes(package)
    assert len(classes) > 1  # the walk found the package's classes, not only the root
    strays = [f"{cls.__module__}.{cls.__qualname__}" for cls in classes if not issubclass(cls, ROOTS[package])]
    assert strays == []


@pytest.mark.parametrize(
    ("qualified", "standard_base"),
    [
        ("operators.backends.config.ConfigError", ValueError),
        ("operators.parsing.ReplyError", ValueError),
        ("operators.registry.UnknownOperatorError", KeyError),
        ("operators.sandbox.policy.SandboxRefusedError", RuntimeError),
        ("training.data.DatasetError", ValueError),
        ("training.train.checkpoint.CheckpointError", RuntimeError),
        ("flowsteer_mcp.canvas.errors.CanvasError", ValueError),
        ("flowsteer_mcp.director.link.CanvasCallError", RuntimeError),
    ],
)
def test_a_rooted_exception_keeps_its_standard_base(qualified: str, standard_base: type[Exception]) -> None:
    module, name = qualified.rsplit(".", 1)
    assert issubclass(getattr(importlib.import_module(module), name), standard_base)
