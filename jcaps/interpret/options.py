"""What `python -m jcaps.interpret` offers, importable without JAX: the models' own explanations,
the removals, and the settings of a run (`Options`), whose method settings are the flags the table
of methods declares (`jcaps.attribution.METHODS`, `Method.flags`; the table loads no JAX), so that
the command's flags and their `--help` are defined before JAX is loaded.

`jcaps.interpret.explain` checks the token removals of `jcaps.interpret.hooks` against
`REMOVALS` when imported: a removal added there and not here stops the import, naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jcaps.attribution.methods import COPIES_PER_CALL, METHODS, Method

# The models' own explanations (`ModelHooks.native`), and what the report says each is.
NATIVE_NOTES = {
    "capsules": "capsules: the words covered by the K-grams of the capsules most coupled to the prediction.",
    "attention": "attention: the model's own attention over the positions.",
}
NATIVE_METHODS = tuple(NATIVE_NOTES)
# What `Options.removal` may name: how a removed token is replaced (the names of
# `jcaps.interpret.hooks.TOKEN_REMOVALS`; a series step becomes zeros).
REMOVALS = ("pad", "unk")


@dataclasses.dataclass(frozen=True)
class MethodFlag:
    """A flag of the table's methods, with the methods it sets."""

    methods: tuple[str, ...]
    option: str  # their keyword option, or `COPIES_PER_CALL`
    default: Any  # the option's default (that of the first method); None for copies a call
    help: str


def method_flags(methods: Mapping[str, Method] | None = None) -> dict[str, MethodFlag]:
    """Every flag the methods of `methods` (default: `METHODS` as it stands, entries added at run
    time included) declare, in table order; a flag declared by several methods must set the same
    option with the same help in each."""
    found: dict[str, MethodFlag] = {}
    for name, method in (METHODS if methods is None else methods).items():
        for flag, declared in method.flags.items():
            default = None if declared.option == COPIES_PER_CALL else method.options[declared.option]
            if flag not in found:
                found[flag] = MethodFlag((name,), declared.option, default, declared.help)
                continue
            earlier = found[flag]
            if (earlier.option, earlier.help, earlier.default) != (declared.option, declared.help, default):
                raise ValueError(
                    f"flag {flag!r}: {name} declares it otherwise than {', '.join(earlier.methods)} (one flag, one meaning)"
                )
            found[flag] = dataclasses.replace(earlier, methods=earlier.methods + (name,))
    return found


def check_names(what: str, names: tuple[str, ...], listed: tuple[str, ...], where: str) -> None:
    """Raises ImportError when `names` (those of the table `what`) are not those `listed` in the
    module `where`, in order."""
    if tuple(names) != listed:
        raise ImportError(
            f"{what} has {', '.join(names)} but {where} lists {', '.join(listed)}: "
            "list them there too (the command line reads them without importing JAX)"
        )


@dataclasses.dataclass(frozen=True, init=False)
class Options:
    """Settings of a run: the methods' settings, by the flags of the table's methods (`ig_steps`,
    `shap_samples`, `ig_chunk`, ...; `method_flags`), the faithfulness removal and iCapsNets'
    local interpretation.

        Options(ig_steps=64, shap_samples=128, removal="unk")

    A flag left out is its option's default (that of the method's function), and a copies-a-call
    flag left out (`COPIES_PER_CALL`, memory ~ copies x rows) the model's own
    (`ModelHooks.copies_per_call`), else the method's `Method.copies_per_call`. A flag read as an
    attribute gives its value (`options.ig_steps`)."""

    method_settings: tuple[tuple[str, Any], ...]  # (flag, value) of the flags given, sorted
    removal: str  # text: replace removed tokens with PAD or UNK (series: zeros)
    k1: int  # capsules: capsules and positions of the local interpretation
    k2: int

    def __init__(self, *, removal: str = "pad", k1: int = 3, k2: int = 2, **method_settings: Any):
        known = method_flags()
        unknown = sorted(set(method_settings) - set(known))
        if unknown:
            raise TypeError(f"Options: no method has a setting {unknown[0]!r}; theirs: {', '.join(known)}")
        given = tuple(sorted((flag, value) for flag, value in method_settings.items() if value is not None))
        object.__setattr__(self, "method_settings", given)
        object.__setattr__(self, "removal", removal)
        object.__setattr__(self, "k1", k1)
        object.__setattr__(self, "k2", k2)

    def __getattr__(self, name: str) -> Any:
        flags = method_flags()
        if name not in flags:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return dict(self.method_settings).get(name, flags[name].default)

    def settings(self) -> dict[str, Any]:
        """Every setting by name, defaults filled in (what a run's results depend on)."""
        given = dict(self.method_settings)
        values = {flag: given.get(flag, declared.default) for flag, declared in method_flags().items()}
        return {**values, "removal": self.removal, "k1": self.k1, "k2": self.k2}

    def of_method(self, method: str, rows: int, model_copies: Mapping[str, int] | None = None) -> dict:
        """The keyword options of `METHODS[method]` that these settings give, on batches of
        `rows` rows of a model whose own copies a call are `model_copies` ({method: copies})."""
        entry = METHODS[method]
        given = dict(self.method_settings)
        options = {}
        copies = (model_copies or {}).get(method) or entry.copies_per_call
        for flag, declared in entry.flags.items():
            if declared.option == COPIES_PER_CALL:
                copies = given.get(flag) or copies
            elif flag in given:
                options[declared.option] = given[flag]
        if copies is not None:
            options["max_rows"] = copies * rows
        return options
