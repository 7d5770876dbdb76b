"""`Stage` and `StageBlueprint`: pydantic types that accept any registered kind, dispatching on `kind`.

Why not a static discriminated union: it would be fixed when this module is imported, so a kind registered
later could never be stored, imported or sent to a tool. The validator looks the kind up when it runs; the JSON
schema is the discriminated union of the kinds registered when the schema is generated (the built-in ones, plus
any registered before a server builds its tool schemas).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, PydanticKnownError, core_schema

from flowsteer_mcp.canvas.kinds.base import KindBlueprint
from flowsteer_mcp.canvas.kinds.node import StageModel
from flowsteer_mcp.canvas.kinds.registry import REGISTRY

_Part = Literal["stage_type", "blueprint_type"]


class ByKind:
    """Annotation: validate as the model (`stage_type` or `blueprint_type`) of the kind the input names."""

    def __init__(self, part: _Part) -> None:
        self._part = part

    def _models(self) -> dict[str, type[BaseModel]]:
        return {kind.name: getattr(kind, self._part) for kind in REGISTRY.kinds()}

    def _validate(self, value: Any) -> BaseModel:
        models = self._models()
        name = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
        model = models.get(name) if isinstance(name, str) else None
        if model is None:  # the errors of a discriminated union, which this type replaces
            if not isinstance(name, str):
                raise PydanticKnownError("union_tag_not_found", {"discriminator": "'kind'"})
            expected = ", ".join(repr(known) for known in models)
            raise PydanticKnownError(
                "union_tag_invalid", {"discriminator": "'kind'", "tag": name, "expected_tags": expected}
            )
        if isinstance(value, model):
            return value
        if isinstance(value, BaseModel):
            raise PydanticCustomError(
                "stage_kind_model",
                "Expected a {model} for kind {kind!r}, got a {got}.",
                {"model": model.__name__, "kind": name, "got": type(value).__name__},
            )
        return model.model_validate(value)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        # Serialisation is inferred from each value, so every kind dumps all of its own fields.
        return core_schema.no_info_plain_validator_function(self._validate)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        choices = {name: model.__pydantic_core_schema__ for name, model in self._models().items()}
        return handler(core_schema.tagged_union_schema(choices, discriminator="kind"))


Stage = Annotated[StageModel, ByKind("stage_type")]
StageBlueprint = Annotated[KindBlueprint, ByKind("blueprint_type")]
