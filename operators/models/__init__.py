"""Local models without a model hub: a catalog of recipes, `prepare` into a cache folder, `resolve_model`.

Heavy libraries (torch, transformers) are imported only when a model is actually built or loaded.
"""

from operators.models.cache import model_dir, models_home
from operators.models.catalog import CATALOG, ModelRecipe, UnknownModelError, get_recipe
from operators.models.cli import cli_prepare
from operators.models.errors import ModelPrepareError
from operators.models.manifest import MANIFEST_NAME, Manifest, ManifestProblem, folder_fingerprint, verify_folder
from operators.models.prepare import is_prepared, prepare, resolve_model

__all__ = [
    "CATALOG",
    "MANIFEST_NAME",
    "Manifest",
    "ManifestProblem",
    "ModelPrepareError",
    "ModelRecipe",
    "UnknownModelError",
    "cli_prepare",
    "folder_fingerprint",
    "get_recipe",
    "is_prepared",
    "model_dir",
    "models_home",
    "prepare",
    "resolve_model",
    "verify_folder",
]
