"""The one check of an enumerated setting: a value among those a `Literal[...]` type allows.

Each layer declares its choices as `Literal` type aliases next to the code that acts on them
(`jcaps.ops.convolution.Activation`, `jcaps.models.choices`, `jcaps.data.choices`) and checks
a value with `check_choice`, so that every refusal reads the same. This module imports nothing
of jcaps and nothing heavy: the ops, the models, the data layer and the configs all use it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, get_args


def allowed_values(choice_type: Any) -> tuple:
    """The values of a `Literal[...]` type, in their declared order; a collection of names (a
    registry's keys) as a tuple."""
    return get_args(choice_type) or tuple(choice_type)


def check_choice(
    name: str, value: Any, choice_type: Any | Collection[str], error: type[Exception] = ValueError
) -> None:
    """Raises `error` ("{name} must be one of a, b, not 'c'") unless `value` is one of those
    `choice_type` allows: a `Literal[...]` type, or a collection of names."""
    allowed = allowed_values(choice_type)
    if not isinstance(value, str) or value not in allowed:
        raise error(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
