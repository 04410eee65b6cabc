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


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph {module: modules it imports}: its strongly connected
    components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges.get(module, ()):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_the_circle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_jcaps_imports_itself_through_others():
    """Imports inside functions count (grimp reads them all); those under TYPE_CHECKING do not run."""
    import grimp

    graph = grimp.build_graph("jcaps", exclude_type_checking_imports=True)
    edges = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    assert _cycles(edges) == []


def test_the_table_of_methods_loads_no_jax():
    """A command builds its flags and --help from `METHODS` without loading JAX; the first method
    called loads it."""
    script = ("import sys, json\n"
              "from jcaps.attribution.methods import METHODS\n"
              "before = 'jax' in sys.modules\n"
              "import jax.numpy as jnp\n"
              "scores = METHODS['occlusion'].function(lambda x: x.sum(axis=1), jnp.ones((1, 3, 2)), 0)\n"
              "print(json.dumps([before, scores.shape]))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == [False, [1, 3]]
