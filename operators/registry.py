"""The operator registry: one place that knows every operator, built-in or plugged in."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from importlib.metadata import entry_points
from typing import get_args

import structlog

from operators.base import Operator, OperatorSpec, TaskType
from operators.errors import OperatorsError
from operators.specs import BUILTIN_SPECS

ENTRY_POINT_GROUP = "flowsteer.operators"

log = structlog.get_logger(__name__)


class UnknownOperatorError(OperatorsError, KeyError):
    """Raised for a name the registry does not know; the message lists the valid names."""


class OperatorRegistry:
    """Maps operator names to specs and (when available) implementations."""

    def __init__(self, specs: Iterable[OperatorSpec] = ()) -> None:
        self._specs: dict[str, OperatorSpec] = {}
        self._impls: dict[str, type[Operator]] = {}
        self._canonical: dict[str, str] = {}
        for spec in specs:
            self.add_spec(spec)

    def add_spec(self, spec: OperatorSpec) -> None:
        key = spec.name.lower()
        if key in self._canonical and self._canonical[key] != spec.name:
            raise ValueError(
                f"operator {spec.name!r} clashes with {self._canonical[key]!r} (names are case-insensitive)"
            )
        self._specs[spec.name] = spec
        self._canonical[key] = spec.name

    def register(self, operator_cls: type[Operator]) -> type[Operator]:
        """Register an implementation (usable as a class decorator)."""
        self.add_spec(operator_cls.spec)
        self._impls[operator_cls.spec.name] = operator_cls
        return operator_cls

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Register third-party operators published under the `flowsteer.operators` entry point group."""
        loaded = []
        for ep in entry_points(group=group):
            operator_cls = ep.load()
            if not (isinstance(operator_cls, type) and issubclass(operator_cls, Operator)):
                raise TypeError(f"entry point {ep.name!r} in {group} is not an Operator subclass")
            self.register(operator_cls)
            loaded.append(operator_cls.spec.name)
            log.info("operator_plugin_loaded", name=operator_cls.spec.name, entry_point=ep.value)
        return loaded

    def canonical_name(self, name: str) -> str | None:
        """The registered spelling of `name` (case-insensitive), or None."""
        return self._canonical.get(name.strip().lower())

    def spec(self, name: str) -> OperatorSpec:
        canonical = self.canonical_name(name)
        if canonical is None:
            raise UnknownOperatorError(f"unknown operator {name!r}; valid operators: {', '.join(self.names())}")
        return self._specs[canonical]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.canonical_name(name) is not None

    def implementation(self, name: str) -> type[Operator]:
        spec = self.spec(name)
        if spec.name not in self._impls:
            raise UnknownOperatorError(f"operator {spec.name!r} has no implementation registered")
        return self._impls[spec.name]

    def specs(self, *, include_legacy: bool = False) -> list[OperatorSpec]:
        return [s for s in self._specs.values() if include_legacy or not s.legacy]

    def names(self, *, include_legacy: bool = False) -> list[str]:
        return [s.name for s in self.specs(include_legacy=include_legacy)]

    def matching(
        self, predicate: Callable[[OperatorSpec], bool], *, include_legacy: bool = False
    ) -> list[OperatorSpec]:
        """The specs a rule asks for (a role, a category, a capability), in registration order, so that rules
        name no operator and a plug-in that declares the same takes part."""
        return [s for s in self.specs(include_legacy=include_legacy) if predicate(s)]


def in_hint_order(specs: Iterable[OperatorSpec]) -> list[OperatorSpec]:
    """`specs` ordered by the first task type their hints are for (math, code, qa, general), unhinted ones last,
    registration order otherwise: the order in which rules list alternatives to the user."""
    rank = {task_type: index for index, task_type in enumerate(get_args(TaskType))}
    return sorted(specs, key=lambda spec: min((rank[t] for t in spec.hinted_for), default=len(rank)))


@lru_cache(maxsize=1)
def default_registry() -> OperatorRegistry:
    """Built-in operators plus every installed plug-in."""
    from operators.library import BUILTIN_OPERATORS

    registry = OperatorRegistry(BUILTIN_SPECS.values())
    for operator_cls in BUILTIN_OPERATORS:
        registry.register(operator_cls)
    registry.load_entry_points()
    return registry
