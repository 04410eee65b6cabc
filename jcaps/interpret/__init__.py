"""Explanations of a trained jcaps workdir (`python -m jcaps.interpret`), on top of the
explanation layer `jcaps.attribution`, which explains any JAX model.

The names of `jcaps.attribution` are offered here too (`from jcaps import interpret;
interpret.integrated_gradients(f, x, target, ...)`, `interpret.METHODS`,
`interpret.faithfulness`), and `interpret.checks.sanity_checks` and `interpret.report.write_html`
are those of `jcaps.attribution.checks` and `jcaps.attribution.report`.

The names below are imported with the first one used: importing the package (as
`python -m jcaps.interpret --help` does) does not load JAX, and explaining a model of one's own
does not load the workdir machinery (checkpoints, datasets) that `checks` and `report` reach."""

from __future__ import annotations

import importlib

from jcaps import attribution  # its names load with their first use: importing it loads no JAX

# `jcaps.attribution`'s names; `checks` and `report` are this package's own modules, which offer
# those of `jcaps.attribution.checks` and `jcaps.attribution.report` beside the workdir's.
__all__ = list(attribution.__all__)
_SUBMODULES = ("checks", "report")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"jcaps.interpret.{name}")
    if name in __all__:
        return getattr(attribution, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
