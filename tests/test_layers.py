"""The layers import one way: the ops stand alone (the layer contract itself is checked by
`lint-imports`, see pyproject.toml)."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_capsule_ops_import_no_flax_optax_or_other_jcaps_package():
    # A fresh interpreter: this one has imported everything the other tests use.
    script = "import sys, json, jcaps.ops.capsules; print(json.dumps(sorted(sys.modules)))"
    modules = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                        check=True).stdout)
    libraries = [m for m in modules if m.split(".")[0] in ("flax", "optax", "orbax", "tensorflow", "grain")]
    # jcaps.choices, the one check of an enumerated option, imports nothing of jcaps or beyond typing.
    other_jcaps = [m for m in modules if m.startswith("jcaps.") and not m.startswith("jcaps.ops") and m != "jcaps.choices"]
    assert not libraries and not other_jcaps, (libraries, other_jcaps)
