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


# Run in a fresh interpreter: every method of the table on a plain-JAX model, faithfulness, the
# sanity checks and the report, then the modules that were loaded.
EXPLAIN_WITH_THE_LAYER_ALONE = """
import json, os, sys, tempfile
import jax, jax.numpy as jnp
from jcaps import attribution

w = jax.random.normal(jax.random.key(0), (3, 2))
f = lambda x: jnp.mean(x, axis=1) @ w  # [B, T, 3] -> [B, 2]
x = jax.random.normal(jax.random.key(1), (2, 4, 3))
target = jnp.array([0, 1])
scores = {name: attribution.METHODS[name].function(f, x, target, key=jax.random.key(2))
          for name in attribution.METHODS}
metrics = attribution.faithfulness(f, x, target, scores["occlusion"])
checks = attribution.checks.sanity_checks(f, x, target, methods=("occlusion", "random"), samples=1,
                                          key=jax.random.key(3))
path = attribution.report.write_html(os.path.join(tempfile.mkdtemp(), "r.html"), [list("abcd")] * 2,
                                     scores, faithfulness={"occlusion": metrics}, checks=checks)
assert os.path.getsize(path) > 0 and all(s.shape == (2, 4) for s in scores.values())
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.slow
def test_the_explanation_layer_runs_every_method_without_the_training_models_or_data():
    modules = json.loads(subprocess.run([sys.executable, "-c", EXPLAIN_WITH_THE_LAYER_ALONE], capture_output=True,
                                        text=True, check=True).stdout)
    libraries = [m for m in modules if m.split(".")[0] in ("flax", "optax", "orbax", "tensorflow", "grain")]
    jcaps_beyond = [m for m in modules if m.split(".")[:2] in (["jcaps", "train"], ["jcaps", "models"],
                                                               ["jcaps", "data"], ["jcaps", "interpret"])]
    assert "jcaps.attribution.methods" in modules and "jcaps.attribution.report" in modules
    assert not libraries and not jcaps_beyond, (libraries, jcaps_beyond)
