"""The executor backend registry: every `backend` a model entry may name, built-in or plugged in.

A plug-in backend is a `BackendSpec`, registered with `register_backend(spec)` or published under the
`flowsteer.backends` entry point group; config files then name it like a built-in one, their entries are
validated by its config model, and `build_backend` builds it with its builder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar, get_args, get_origin

from operators.backends.base import ChatBackend
from operators.backends.config import BackendModelConfig
from operators.backends.usage import UsageLog
from operators.plugins import PluginRegistry

__all__ = ["ENTRY_POINT_GROUP", "BackendSpec", "backend_registry", "register_backend"]

ENTRY_POINT_GROUP = "flowsteer.backends"

ConfigT = TypeVar("ConfigT", bound=BackendModelConfig)


@dataclass(frozen=True)
class BackendSpec(Generic[ConfigT]):
    """One backend: its name, the config model of its entries, and how to build it.

    `build(config, env, usage_log)` returns the ready backend; secrets are read from `env` (None: the process
    environment) and `usage_log` may be shared between backends or ignored. The builder imports the backend's
    module itself, so registering a backend costs nothing until it is built: an openai executor never imports
    torch. `model_id_field` is the key `FLOWSTEER_EXECUTOR_MODEL` sets when it names no entry (None: none).
    """

    name: str
    config: type[ConfigT]
    build: Callable[[ConfigT, Mapping[str, str] | None, UsageLog | None], ChatBackend]
    model_id_field: str | None = "model"

    def __post_init__(self) -> None:
        if not (isinstance(self.config, type) and issubclass(self.config, BackendModelConfig)):
            raise TypeError(f"backend {self.name!r}: its config must subclass BackendModelConfig")
        if self.config.model_config.get("extra") != "forbid":
            raise TypeError(f"backend {self.name!r}: its config must forbid unknown keys (extra='forbid')")
        tag = self.config.model_fields["backend"].annotation
        if get_origin(tag) is not Literal or get_args(tag) != (self.name,):
            raise TypeError(f"backend {self.name!r}: its config must declare backend: Literal[{self.name!r}]")
        if self.model_id_field is not None and self.model_id_field not in self.config.model_fields:
            raise TypeError(f"backend {self.name!r}: model_id_field {self.model_id_field!r} is not a config key")


@lru_cache(maxsize=1)
def backend_registry() -> PluginRegistry[BackendSpec[Any]]:
    """The built-in backends plus every installed plug-in (loaded once, on first use)."""
    from operators.backends.builtin import BUILTIN_BACKENDS

    registry: PluginRegistry[BackendSpec[Any]] = PluginRegistry(
        kind="executor backend",
        group=ENTRY_POINT_GROUP,
        spec_type=BackendSpec,
        name_of=lambda spec: spec.name,
        builtins=BUILTIN_BACKENDS,
    )
    registry.load_entry_points()
    return registry


def register_backend(spec: BackendSpec[ConfigT]) -> BackendSpec[ConfigT]:
    """Make `spec` available to config files and `build_backend` in this process."""
    backend_registry().register(spec)
    return spec
