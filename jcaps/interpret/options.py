"""What `python -m jcaps.interpret` offers, importable without JAX: the models' own explanations,
the removals and the method settings (`Options`) with their defaults, so that the command's flags
(and their `--help`) are defined before JAX is loaded (the method names are
`jcaps.attribution.names`').

`jcaps.interpret.explain` checks the token removals of `jcaps.interpret.explanations` against
`REMOVALS` when imported: a removal added there and not here stops the import, naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

# The models' own explanations (`Explanation.native`), and what the report says each is.
NATIVE_NOTES = {
    "capsules": "capsules: the words covered by the K-grams of the capsules most coupled to the prediction.",
    "attention": "attention: the model's own attention over the positions.",
}
NATIVE_METHODS = tuple(NATIVE_NOTES)
# What `Options.removal` may name: how a removed token is replaced (the names of
# `jcaps.interpret.explanations.TOKEN_REMOVALS`; a series step becomes zeros).
REMOVALS = ("pad", "unk")
# The methods of `METHODS` that cost hundreds of forward passes an example: run only when named.
SAMPLING_METHODS = ("kernel_shap", "shapley_sampling", "lime")
# The `Options` fields that set a method's option: field -> (method, its option in `METHODS`).
METHOD_OPTIONS = {
    "ig_steps": ("integrated_gradients", "n_steps"),
    "smoothgrad_samples": ("smoothgrad", "n_samples"),
    "shap_samples": ("kernel_shap", "n_samples"),
    "shapley_permutations": ("shapley_sampling", "n_permutations"),
    "lime_samples": ("lime", "n_samples"),
}
# The `Options` fields that say how many copies of the rows one call of the model scores, and the
# methods whose `max_rows` they set (that many times the rows).
COPIES_PER_CALL = {
    "ig_chunk": ("integrated_gradients",),
    "occlusion_chunk": ("occlusion",),
    "sampling_chunk": SAMPLING_METHODS,
}
# Their values where neither the settings nor the model (`Explanation.copies_per_call`) give one:
# about the fastest on a CPU for the convolutional and averaging models. Integrated gradients one
# point at a time: larger stacks fall out of cache (iCapsNets Short, batch 32: 50 steps cost about
# 27 forward passes one at a time, about 110 ten at a time). Occlusion 4 positions (128 rows at
# batch 32; iCapsNets Short, 64 positions: 137 ms at 4, 160 ms at 8). 8 coalitions (256 rows;
# LIME on iCapsNets Short: 1.20 s at 8, 1.58 s at 64). On an accelerator, more.
DEFAULT_COPIES_PER_CALL = {"ig_chunk": 1, "occlusion_chunk": 4, "sampling_chunk": 8}


@dataclasses.dataclass(frozen=True)
class Options:
    """Settings of the attribution methods and of the faithfulness removal."""

    ig_steps: int = 50
    # The copies of the rows one call of the model scores (`COPIES_PER_CALL`; memory ~ copies *
    # rows): integrated gradients' points, occlusion's positions, the sampling methods'
    # coalitions. None: the model's own (`Explanation.copies_per_call`), else
    # `DEFAULT_COPIES_PER_CALL`.
    ig_chunk: int | None = None
    occlusion_chunk: int | None = None
    smoothgrad_samples: int = 25
    # The sampling methods' budgets, in forward rows an example: KernelSHAP and LIME score one
    # coalition a row, permutation sampling T + 1 an order.
    shap_samples: int = 256
    shapley_permutations: int = 8
    lime_samples: int = 256
    sampling_chunk: int | None = None
    removal: str = "pad"  # text: replace removed tokens with PAD or UNK (series: zeros)
    k1: int = 3  # capsules: capsules and positions of the local interpretation
    k2: int = 2

    def of_method(self, method: str, rows: int, model_copies: Mapping[str, int] | None = None) -> dict:
        """The keyword options of `METHODS[method]` that these settings give, on batches of
        `rows` rows of a model whose own copies a call are `model_copies` (a method that no
        setting names runs with its defaults)."""
        options = {option: getattr(self, field) for field, (name, option) in METHOD_OPTIONS.items() if name == method}
        for field, names in COPIES_PER_CALL.items():
            if method in names:
                copies = getattr(self, field) or (model_copies or {}).get(field) or DEFAULT_COPIES_PER_CALL[field]
                options["max_rows"] = copies * rows
        return options
