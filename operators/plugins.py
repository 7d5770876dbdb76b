"""One registry shape for everything users plug in: executor backends, reward schedules, scorers.

Why one class: a plug-in author learns one rule for all of them, the rule operators already follow
(`operators/registry.py`): publish a spec under the kind's entry point group, or call its `register_*`
function. Built-ins are registered the same way, so nothing is special about them but their origin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Generic, TypeVar

import structlog

from operators.errors import OperatorsError

__all__ = ["PluginRegistry", "UnknownPluginError"]

SpecT = TypeVar("SpecT")

log = structlog.get_logger(__name__)


class UnknownPluginError(OperatorsError, ValueError, LookupError):
    """A name no spec is registered under; the message lists the registered ones.

    A `ValueError` so that pydantic reports it as a config error naming the key; a `LookupError` for callers
    that treat it as a failed lookup.
    """


class PluginRegistry(Generic[SpecT]):
    """Name -> spec, from built-ins, `register` calls and the entry point group `group`."""

    def __init__(
        self,
        *,
        kind: str,
        group: str,
        spec_type: type[SpecT],
        name_of: Callable[[SpecT], str],
        builtins: Iterable[SpecT] = (),
    ) -> None:
        self.kind = kind  # what a spec is, for messages ("executor backend", "reward schedule", ...)
        self.group = group
        self._spec_type = spec_type
        self._name_of = name_of
        self._specs: dict[str, SpecT] = {}
        for spec in builtins:
            self.register(spec)

    def register(self, spec: SpecT) -> SpecT:
        """Add `spec`; registering the same spec again is a no-op, another spec under a taken name an error."""
        if not isinstance(spec, self._spec_type):
            raise TypeError(f"a {self.kind} must be a {self._spec_type.__name__}, got {type(spec).__name__}")
        name = self._name_of(spec)
        known = self._specs.get(name)
        if known is not None and known is not spec:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._specs[name] = spec
        return spec

    def unregister(self, name: str) -> None:
        """Remove `name` (a test's clean-up, or a host replacing a built-in on purpose)."""
        self._specs.pop(name, None)

    def load_entry_points(self) -> list[str]:
        """Register every spec published under `group`; returns their names."""
        loaded = []
        for ep in entry_points(group=self.group):
            spec = ep.load()
            if not isinstance(spec, self._spec_type):
                raise TypeError(f"entry point {ep.name!r} in {self.group} is not a {self._spec_type.__name__}")
            self.register(spec)
            loaded.append(self._name_of(spec))
            log.info("plugin_loaded", kind=self.kind, name=self._name_of(spec), entry_point=ep.value)
        return loaded

    def get(self, name: str) -> SpecT:
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownPluginError(f"unknown {self.kind} {name!r}; registered: {', '.join(self.names())}")
        return spec

    def names(self) -> list[str]:
        """Registered names, in registration order (built-ins first)."""
        return list(self._specs)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._specs
