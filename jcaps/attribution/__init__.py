"""Explain any JAX classifier: attribution methods, their faithfulness, sanity checks and the HTML
report, as pure functions of a model `f(x, *args) -> [B, C]` and arrays.

    from jcaps import attribution

    scores = attribution.integrated_gradients(f, x, target, mask=mask, args=(tokens,), n_steps=64)
    metrics = attribution.faithfulness(f, x, target, scores, mask=mask, args=(tokens,))

`jcaps.attribution.methods` states the contract every method keeps; `METHODS` is their table;
`attribute(f, x, target, method=...)` returns a method's scores as an `Explanation` (with their
targets, mask, options, key and completeness error; it saves, loads and renders itself);
`checks.sanity_checks` checks an explanation and `report.write_html` renders explanations.
This layer imports no training, model or data code of jcaps, nor Flax, Optax or orbax (an
import contract in pyproject.toml); `jcaps.interpret` explains a trained jcaps workdir on top of
it, and offers the same names (`from jcaps import interpret; interpret.integrated_gradients`).

The names below are imported with the first one used; the table of methods loads JAX only when a
method runs, so a command's flags and `--help` are made from it without loading JAX."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jcaps.attribution import checks, report
    from jcaps.attribution._faithfulness import faithfulness
    from jcaps.attribution.explanation import Explanation, attribute
    from jcaps.attribution.methods import (
        DEFAULT_MAX_ROWS,
        METHODS,
        Method,
        aggregate,
        at_layer,
        expected_gradients,
        gradient,
        gradient_x_input,
        groups_of_word_ids,
        integrated_gradients,
        kernel_shap,
        lime,
        noise_tunnel,
        occlusion,
        random,
        shapley_sampling,
        smoothgrad,
    )

__all__ = [
    "DEFAULT_MAX_ROWS",
    "METHODS",
    "Explanation",
    "Method",
    "aggregate",
    "at_layer",
    "attribute",
    "checks",
    "expected_gradients",
    "faithfulness",
    "gradient",
    "gradient_x_input",
    "groups_of_word_ids",
    "integrated_gradients",
    "kernel_shap",
    "lime",
    "noise_tunnel",
    "occlusion",
    "random",
    "report",
    "shapley_sampling",
    "smoothgrad",
]
_SUBMODULES = ("checks", "report")
# Where a name is defined when it is not in jcaps.attribution.methods.
_DEFINED_IN = {
    "faithfulness": "jcaps.attribution._faithfulness",
    "Explanation": "jcaps.attribution.explanation",
    "attribute": "jcaps.attribution.explanation",
}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"jcaps.attribution.{name}")
    if name in __all__:
        return getattr(importlib.import_module(_DEFINED_IN.get(name, "jcaps.attribution.methods")), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
