"""Keep transformers away from any model hub while we load local files."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

_OFFLINE_VARS = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Set the hub-offline variables for the duration of a load and restore them afterwards.

    Callers also pass `local_files_only=True`; the variables are a second guard for code paths inside
    transformers that might otherwise try the network.
    """
    saved = {key: os.environ.get(key) for key in _OFFLINE_VARS}
    os.environ.update(_OFFLINE_VARS)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
