"""Modules imported when first read from, so that the table of methods (`jcaps.attribution.methods`),
which a command's flags and `--help` are built from, is importable without loading JAX."""

from __future__ import annotations

import importlib
import types
from typing import Any


class DeferredModule(types.ModuleType):
    """Stands for the module `name` and imports it with the first attribute read."""

    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attribute)
