"""JSON that every parser reads: a non-finite float (NaN, infinity) is written as `null`.

Python's `json` writes NaN and infinity as the bare tokens `NaN` and `Infinity`, which are not
JSON: a standard parser rejects the whole line. Every JSON file and line jcaps writes goes
through `dumps` or `dump`, which write `null` in their place and refuse any other non-JSON
value. This module imports nothing of jcaps, so every layer may use it.
"""

from __future__ import annotations

import json
import math
from typing import Any, TextIO


def finite(value: Any) -> Any:
    """`value` with every non-finite float, in any dict, list or tuple, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, **kwargs) -> str:
    """`json.dumps` of `finite(value)`, never writing `NaN` or `Infinity`."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def dump(value: Any, file: TextIO, **kwargs) -> None:
    """`json.dump` of `finite(value)`, never writing `NaN` or `Infinity`."""
    json.dump(finite(value), file, allow_nan=False, **kwargs)
