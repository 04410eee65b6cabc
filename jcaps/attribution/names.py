"""The names of the explanation methods, importable without JAX (a command defines its flags and
`--help` before loading it). `jcaps.attribution.methods` checks its table `METHODS` against
`METHOD_NAMES` when imported: a method added there and not here stops the import, naming it."""

from __future__ import annotations

# The keys of `jcaps.attribution.METHODS`, in its order (the order of the report and of --help).
METHOD_NAMES = (
    "gradient",
    "gradient_x_input",
    "integrated_gradients",
    "smoothgrad",
    "occlusion",
    "kernel_shap",
    "shapley_sampling",
    "lime",
    "random",
)


def check_names(what: str, names: tuple[str, ...], listed: tuple[str, ...], where: str) -> None:
    """Raises ImportError when `names` (those of the table `what`) are not those `listed` in the
    module `where`, in order."""
    if tuple(names) != listed:
        raise ImportError(
            f"{what} has {', '.join(names)} but {where} lists {', '.join(listed)}: "
            "list them there too (the command line reads them without importing JAX)"
        )
