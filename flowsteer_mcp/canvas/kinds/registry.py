"""The stage-kind registry: the one list of kinds, in registration order, open to kinds added at run time.

Why one list: the pydantic stage types, the DSL and dialect parsers, the statistics, the director's prompt, the
viewer, the typed tools and the reward all read it when they run (never a copy taken at import), so a kind
registered later, by a plug-in or a test, is known everywhere at once. `version` grows on every change, so a
caller that derives a table from the registry can cache it per version.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeVar, overload

from flowsteer_mcp.canvas.kinds.base import AnyKind
from flowsteer_mcp.errors import FlowSteerError

KindT = TypeVar("KindT", bound=AnyKind)
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_REQUIRED = ("name", "stage_type", "blueprint_type", "summary", "is_structure", "dialect_help")


class KindRegistrationError(FlowSteerError, ValueError):
    """A kind that cannot be registered (or unregistered); the message says what to change."""


class UnknownKindError(FlowSteerError, KeyError):
    """A kind name nothing registered."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown stage kind"


def _kind_default(model: type) -> object:
    field = getattr(model, "model_fields", {}).get("kind")
    return None if field is None else field.default


class KindRegistry:
    """Kinds by name; the built-in ones cannot be removed."""

    def __init__(self) -> None:
        self._kinds: dict[str, AnyKind] = {}
        self._builtin: set[str] = set()
        self.version = 0

    def register(self, kind: KindT, *, builtin: bool = False) -> KindT:
        self._check(kind)
        self._kinds[kind.name] = kind
        if builtin:
            self._builtin.add(kind.name)
        self.version += 1
        return kind

    def unregister(self, name: str) -> None:
        if name in self._builtin:
            raise KindRegistrationError(f"{name!r} is a built-in stage kind and cannot be unregistered.")
        if self._kinds.pop(name, None) is None:
            raise UnknownKindError(f"No stage kind {name!r} is registered.")
        self.version += 1

    @contextmanager
    def registered(self, kind: KindT) -> Iterator[KindT]:
        """`kind` registered for the block only (tests, experiments)."""
        self.register(kind)
        try:
            yield kind
        finally:
            self.unregister(kind.name)

    def get(self, name: str) -> AnyKind:
        kind = self._kinds.get(name)
        if kind is None:
            raise UnknownKindError(f"Unknown stage kind {name!r}; registered: {', '.join(self._kinds)}.")
        return kind

    def kinds(self) -> tuple[AnyKind, ...]:
        return tuple(self._kinds.values())

    def structures(self) -> tuple[AnyKind, ...]:
        """The control structures, in registration order: the kinds whose contract says `is_structure`."""
        return tuple(kind for kind in self._kinds.values() if kind.is_structure)

    def _check(self, kind: AnyKind) -> None:
        missing = [attr for attr in _REQUIRED if not hasattr(kind, attr)]
        if missing:
            raise KindRegistrationError(f"{type(kind).__name__} does not set {', '.join(missing)}.")
        name = kind.name
        if not _NAME.fullmatch(name):
            raise KindRegistrationError(f"Kind name {name!r} must be lowercase letters, digits or _ (max 32).")
        if name in self._kinds:
            raise KindRegistrationError(f"A stage kind named {name!r} is already registered.")
        for model in (kind.stage_type, kind.blueprint_type):
            if _kind_default(model) != name:
                raise KindRegistrationError(
                    f"{model.__name__} must have a field `kind: Literal[{name!r}] = {name!r}` (the registry "
                    "dispatches on it)."
                )
        markers = {m: other.name for other in self._kinds.values() for m in (other.dsl_opener, other.dsl_infix) if m}
        for marker in (kind.dsl_opener, kind.dsl_infix):
            if marker and marker in markers:
                raise KindRegistrationError(f"DSL marker {marker!r} of {name!r} is already {markers[marker]!r}'s.")
        if kind.milestone_bonus is not None and kind.milestone_bonus < 0:
            raise KindRegistrationError(f"The milestone bonus of {name!r} must be >= 0.")


REGISTRY = KindRegistry()


def register_kind(kind: KindT) -> KindT:
    """Make `kind` known to every part of the canvas (give the engine its stage runner with
    `flowsteer_mcp.engine.kinds.register_stage_runner`)."""
    return REGISTRY.register(kind)


def unregister_kind(name: str) -> None:
    REGISTRY.unregister(name)


@contextmanager
def registered_kind(kind: KindT) -> Iterator[KindT]:
    """`kind` registered for the `with` block only (tests, experiments)."""
    with REGISTRY.registered(kind) as registered:
        yield registered


def get_kind(name: str) -> AnyKind:
    return REGISTRY.get(name)


def kinds() -> tuple[AnyKind, ...]:
    return REGISTRY.kinds()


def structure_kinds() -> tuple[AnyKind, ...]:
    return REGISTRY.structures()


def structures_in_words() -> str:
    """`parallel, conditional, loop or fallback`: the structure kinds as the prompt and the finish gate name them,
    so the rule a director reads is the rule the gate applies."""
    names = [kind.name for kind in structure_kinds()]
    return " or ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def registry_version() -> int:
    return REGISTRY.version


class _KindsView(Mapping[str, AnyKind]):
    """`KINDS`: a read-only, always current view of the registry by name."""

    def __getitem__(self, name: str) -> AnyKind:
        return REGISTRY.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter([kind.name for kind in REGISTRY.kinds()])

    def __len__(self) -> int:
        return len(REGISTRY.kinds())


class _StructuresView(Sequence[AnyKind]):
    """`STRUCTURES`: a read-only, always current view of the structure kinds in registration order."""

    @overload
    def __getitem__(self, index: int) -> AnyKind: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[AnyKind]: ...
    def __getitem__(self, index: int | slice) -> AnyKind | Sequence[AnyKind]:
        return REGISTRY.structures()[index]

    def __len__(self) -> int:
        return len(REGISTRY.structures())


KINDS: Mapping[str, AnyKind] = _KindsView()
STRUCTURES: Sequence[AnyKind] = _StructuresView()
