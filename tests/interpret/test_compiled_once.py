"""Compiled once (`jcaps.attribution._compiled`): a second eager call of each method compiles
nothing and computes with the model's current parameters, for an NNX module, an Equinox module
and a `jax.tree_util.Partial` over linen's `apply`; a function whose arrays cannot be seen is
never served a stale program."""

import functools
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jcaps import attribution

B, T, D, C = 3, 6, 8, 3
X = jax.random.normal(jax.random.key(0), (B, T, D))
MASK = jnp.arange(T)[None] < jnp.array([[6], [4], [2]])
TARGET = jnp.array([0, 1, 2])
REFERENCES = jax.random.normal(jax.random.key(5), (4, T, D))

compiled: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, _seconds, **_: compiled.append(event) if event.endswith("backend_compile_duration") else None)


class NNXModel(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(D, 16, rngs=rngs)
        self.out = nnx.Linear(16, C, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.hidden(x)).max(axis=1))


def options_of(name):
    return {"key": jax.random.key(1)} if attribution.METHODS[name].needs_key else {}


def run(method, f):
    if method == "expected_gradients":
        return attribution.expected_gradients(f, X, TARGET, mask=MASK, key=jax.random.key(1), baseline=REFERENCES,
                                              n_samples=8)
    return attribution.METHODS[method].function(f, X, TARGET, mask=MASK, **options_of(method))


def jitted(method, f):
    """The method under the caller's own `jax.jit`: the reference a cached call must equal."""
    return jax.jit(lambda: run(method, f))()


@pytest.mark.parametrize("method", [*attribution.METHODS, "expected_gradients"])
def test_a_second_eager_call_compiles_nothing_and_reads_the_new_parameters(method):
    model = NNXModel(nnx.Rngs(0))
    first = run(method, model)
    before = len(compiled)
    second = run(method, model)
    assert compiled[before:] == [], method
    np.testing.assert_array_equal(second, first)
    model.out.bias[...] = model.out.bias[...] + jnp.arange(C, dtype=jnp.float32)
    model.hidden.kernel[...] = model.hidden.kernel[...] * 1.5
    before = len(compiled)
    updated = run(method, model)
    assert compiled[before:] == [], method
    np.testing.assert_allclose(updated, jitted(method, model), rtol=1e-5, atol=1e-6)
    if method != "random":  # random's scores do not read the model
        assert not np.allclose(updated, first)


def test_a_partial_over_linens_apply_and_an_equinox_module_are_cached_with_their_arrays_as_inputs():
    class Linen(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(C)(jnp.tanh(nn.Dense(16)(x)).mean(axis=1))

    module = Linen()
    params = module.init(jax.random.key(0), X)
    f = jax.tree_util.Partial(module.apply, params)
    first = attribution.integrated_gradients(f, X, TARGET, mask=MASK)
    doubled = jax.tree.map(lambda p: 2 * p, params)
    before = len(compiled)
    again = attribution.integrated_gradients(jax.tree_util.Partial(module.apply, doubled), X, TARGET, mask=MASK)
    assert compiled[before:] == []
    np.testing.assert_allclose(again, jitted("integrated_gradients", jax.tree_util.Partial(module.apply, doubled)),
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(again, first)

    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(D, C, width_size=16, depth=1, key=jax.random.key(2))

    class Pooled(eqx.Module):
        mlp: eqx.nn.MLP

        def __call__(self, x):  # [B, T, D] -> [B, C]
            return jax.vmap(self.mlp)(jnp.tanh(x).mean(axis=1))

    first = attribution.occlusion(Pooled(mlp), X, TARGET, mask=MASK)
    shifted = eqx.tree_at(lambda m: m.layers[-1].bias, mlp, mlp.layers[-1].bias + 1.0)
    before = len(compiled)
    again = attribution.occlusion(Pooled(shifted), X, TARGET, mask=MASK)
    assert compiled[before:] == []
    np.testing.assert_allclose(again, jitted("occlusion", Pooled(shifted)), rtol=1e-5, atol=1e-6)


def test_a_function_whose_arrays_cannot_be_seen_is_never_served_a_stale_program():
    """A closure over a dict of parameters and a global rebound between calls: every call reads
    the arrays of its moment. A plain value a closure holds keys the program: a new one compiles
    anew."""
    state = {"weights": jnp.ones((D, C))}

    def closure(x):
        return jnp.tanh(x.mean(axis=1)) @ state["weights"]

    first = attribution.integrated_gradients(closure, X, TARGET, mask=MASK)
    state["weights"] = 3 * state["weights"]
    np.testing.assert_allclose(attribution.integrated_gradients(closure, X, TARGET, mask=MASK), 3 * first,
                               rtol=1e-5, atol=1e-6)
    scale = 1.0

    def scaled(x):
        return jnp.tanh(x.mean(axis=1)) @ jnp.ones((D, C)) * scale

    once = attribution.occlusion(scaled, X, TARGET, mask=MASK)
    scale = 2.0
    np.testing.assert_allclose(attribution.occlusion(scaled, X, TARGET, mask=MASK), 2 * once, rtol=1e-5, atol=1e-6)


WEIGHTS = jnp.ones((D, C))


def reads_a_global(x):
    return jnp.tanh(x.mean(axis=1)) @ WEIGHTS


def test_a_global_array_rebound_between_calls_is_read_again():
    global WEIGHTS
    first = attribution.gradient_x_input(reads_a_global, X, TARGET, mask=MASK)
    WEIGHTS = 2 * WEIGHTS
    try:
        np.testing.assert_allclose(attribution.gradient_x_input(reads_a_global, X, TARGET, mask=MASK), 2 * first,
                                   rtol=1e-5, atol=1e-6)
    finally:
        WEIGHTS = jnp.ones((D, C))


def test_the_checks_of_values_and_the_warning_stay_those_of_an_eager_call():
    model = NNXModel(nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"target: expected class indices in \[0, 3\) .*got 3"):
        attribution.kernel_shap(model, X, jnp.array([0, 1, 3]), mask=MASK, key=jax.random.key(0))
    with pytest.raises(ValueError, match="groups: expected group ids in"):
        attribution.occlusion(model, X, TARGET, mask=MASK, groups=jnp.full((B, T), 9))
    with pytest.raises(ValueError, match=r"x: got one example"):
        attribution.occlusion(model, X[0], TARGET[0], mask=MASK[0])
    broken = X.at[1].set(jnp.nan)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = attribution.integrated_gradients(model, broken, TARGET, mask=MASK)
    assert [str(w.message) for w in caught] == [
        "integrated_gradients: f(x) or f at the baseline is not finite for 1 of 3 examples: their scores are NaN"]
    assert np.isnan(scores[1]).all() and np.isfinite(np.asarray(scores)[[0, 2]]).all()


def test_under_the_callers_own_transformations_the_method_is_traced_through():
    model = NNXModel(nnx.Rngs(0))
    explain = jax.jit(functools.partial(attribution.occlusion, model))
    np.testing.assert_allclose(explain(X, TARGET, mask=MASK), attribution.occlusion(model, X, TARGET, mask=MASK),
                               rtol=1e-6)
    per_key = jax.vmap(lambda key: attribution.random(model, X, TARGET, mask=MASK, key=key))(
        jax.random.split(jax.random.key(0), 2))
    assert per_key.shape == (2, B, T)
