"""No silent wrong answer (NaN for what cannot be explained, one line for what is wrong), and the
methods beside the table: Gauss-Legendre integrated gradients, expected gradients, the noise
tunnel."""

from __future__ import annotations

import functools
import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps import attribution

B, T, D, C = 4, 5, 3, 2
W = jax.random.normal(jax.random.key(0), (D, C))
X = jax.random.normal(jax.random.key(1), (B, T, D))
TARGET = jnp.array([0, 1, 1, 0])


def linear(x):
    return jnp.sum(x, axis=1) @ W


def smooth(x):
    return jnp.tanh(jnp.sum(x, axis=1) @ W) * 2.0


def call(name, f, x=X, target=TARGET, **kwargs):
    method = attribution.METHODS[name]
    key = jax.random.key(3) if method.needs_key else None
    return method.function(f, x, target, key=key, **kwargs)


def blows_up_for_large_inputs(x):
    """NaN for an example whose values sum past 100, else the linear model."""
    return jnp.where(jnp.sum(x, axis=(1, 2))[:, None] > 100.0, jnp.nan, linear(x))


def nan_at_zero(x):
    """NaN where an example is all zeros: the zero baseline (integrated gradients used to give
    finite scores for it)."""
    return jnp.where(jnp.all(x == 0, axis=(1, 2))[:, None], jnp.nan, linear(x))


@pytest.mark.parametrize("name", list(attribution.METHODS))
def test_an_example_whose_f_is_not_finite_gets_nan_scores_and_one_warning(name):
    x = X.at[2].add(50.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = np.asarray(call(name, blows_up_for_large_inputs, x))
    assert np.isnan(scores[2]).all() and np.isfinite(np.delete(scores, 2, axis=0)).all()
    assert [str(w.message) for w in caught] == [
        f"{name}: {'f(x)' if name in ('gradient', 'gradient_x_input', 'smoothgrad', 'random') else 'f(x) or f at the baseline'}"
        " is not finite for 1 of 4 examples: their scores are NaN"]


@pytest.mark.parametrize("name", ["integrated_gradients", "occlusion", "kernel_shap", "shapley_sampling", "lime"])
def test_a_model_not_finite_at_the_baseline_gets_nan_scores_not_plausible_ones(name):
    with pytest.warns(RuntimeWarning, match="f at the baseline is not finite for 4 of 4 examples"):
        scores = np.asarray(call(name, nan_at_zero))
    assert np.isnan(scores).all()


def test_under_jit_a_target_out_of_range_gives_nan_scores():
    for name in attribution.METHODS:
        method = attribution.METHODS[name]
        explain = jax.jit(functools.partial(method.function, linear, key=jax.random.key(0) if method.needs_key else None))
        scores = np.asarray(explain(X, jnp.array([0, C, -1, 1])))
        assert np.isnan(scores[1:3]).all() and np.isfinite(scores[[0, 3]]).all(), name


def test_one_unbatched_example_is_named_as_such():
    with pytest.raises(ValueError, match=r"^x: got one example \(float32 of shape \(5, 3\) with a mask of shape \(5,\)\)"
                                         r".* pass x\[None\] and mask\[None\]$"):
        attribution.integrated_gradients(lambda x: x.sum(1) @ W, X[0], 0, mask=jnp.ones(T, bool))


def test_gauss_legendre_is_exact_where_the_midpoint_rule_is_not():
    """Along the straight path a cubic model is a cubic in the path point: K = 2 Gauss-Legendre
    points integrate it exactly, the midpoint rule does not."""
    def cubic(x):
        s = jnp.sum(x, axis=1) @ W
        return s ** 3 + s

    errors = {}
    for rule in ("midpoint", "gausslegendre"):
        scores = attribution.integrated_gradients(cubic, X, TARGET, n_steps=2, rule=rule)
        change = np.asarray(cubic(X) - cubic(jnp.zeros_like(X)))[np.arange(B), TARGET]
        errors[rule] = np.max(np.abs(np.asarray(scores).sum(-1) - change) / np.abs(change))
    assert errors["gausslegendre"] < 1e-5 < 1e-2 < errors["midpoint"]
    with pytest.raises(ValueError, match="rule must be one of midpoint, gausslegendre, not 'simpson'"):
        attribution.integrated_gradients(cubic, X, TARGET, rule="simpson")


def test_the_midpoint_rule_is_the_formula():
    """The midpoint rule's scores, against the formula computed here by hand."""
    steps = 4
    alphas = (np.arange(steps) + 0.5) / steps
    grads = [jax.grad(lambda x: smooth(x)[np.arange(B), TARGET].sum())(a * X) for a in alphas]
    expected = np.asarray((X * sum(grads) / steps).sum(-1))
    np.testing.assert_allclose(attribution.integrated_gradients(smooth, X, TARGET, n_steps=steps), expected,
                               rtol=1e-5, atol=1e-6)


def test_expected_gradients_sum_to_the_mean_change_over_the_baselines():
    references = jax.random.normal(jax.random.key(5), (6, T, D))
    # A linear model: every sample's term sums to f(x) - f(x'_m) exactly, so with one baseline
    # the scores sum to f(x) - f(x') whatever the path points.
    one = attribution.expected_gradients(linear, X, TARGET, key=jax.random.key(0), baseline=references[:1],
                                         n_samples=5)
    change = np.asarray(linear(X) - linear(references[:1]))[np.arange(B), TARGET]
    np.testing.assert_allclose(np.asarray(one).sum(-1), change, rtol=1e-5, atol=1e-5)
    # A smooth model: the sum estimates f(x) - E[f(x')] within its sampling error.
    samples = 2048
    scores = np.asarray(attribution.expected_gradients(smooth, X, TARGET, key=jax.random.key(1), baseline=references,
                                                       n_samples=samples, max_rows=512))
    mean_change = np.asarray(smooth(X))[np.arange(B), TARGET] - np.asarray(smooth(references))[:, TARGET].mean(0)
    # The spread of one sample's term (x - x') . grad f(x' + a (x - x')), drawn here independently.
    draw = np.random.default_rng(0)
    picks, alphas = draw.integers(0, 6, 512), draw.uniform(size=512).astype(np.float32)
    grad = jax.grad(lambda x: smooth(x)[np.arange(B), TARGET].sum())
    terms = np.stack([np.asarray(((X - references[n][None]) * grad(references[n][None] + a * (X - references[n][None])))
                                 .sum((1, 2)))
                      for n, a in zip(picks, alphas)])
    error = np.abs(scores.sum(-1) - mean_change)
    assert np.all(error < 4 * terms.std(0) / np.sqrt(samples)), (error, terms.std(0))
    # max_rows changes how many samples a call, not what is drawn.
    again = attribution.expected_gradients(smooth, X, TARGET, key=jax.random.key(1), baseline=references,
                                           n_samples=samples, max_rows=4 * B)
    np.testing.assert_allclose(again, scores, rtol=1e-4, atol=1e-5)


def test_expected_gradients_needs_its_baselines_and_a_key():
    with pytest.raises(ValueError, match=r"^baseline: expected_gradients draws its baselines from a distribution"):
        attribution.expected_gradients(linear, X, TARGET, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"^baseline: expected the baselines to draw from, \[N, T, \.\.\.\] with "
                                         r"\[T, \.\.\.\] = \(5, 3\) \(x's\), got shape \(5, 3\)$"):
        attribution.expected_gradients(linear, X, TARGET, key=jax.random.key(0), baseline=X[0])
    with pytest.raises(ValueError, match="^key: expected_gradients draws random numbers"):
        attribution.expected_gradients(linear, X, TARGET, baseline=X)


@pytest.mark.parametrize("name", ["integrated_gradients", "occlusion"])
def test_the_noise_tunnel_wraps_a_method(name):
    options = {"n_steps": 8} if name == "integrated_gradients" else {}
    plain = np.asarray(call(name, smooth, **options))
    still = attribution.noise_tunnel(name, n_samples=3, stddev=0.0)(smooth, X, TARGET, key=jax.random.key(0),
                                                                    **options)
    np.testing.assert_allclose(still, plain, rtol=1e-5, atol=1e-6)  # no noise: the method itself
    for kind, combine in (("smoothgrad", lambda s: s.mean(0)), ("smoothgrad_sq", lambda s: (s ** 2).mean(0)),
                          ("vargrad", lambda s: s.var(0))):
        tunnel = attribution.noise_tunnel(name, kind=kind, n_samples=4, stddev=0.2)
        scores = np.asarray(tunnel(smooth, X, TARGET, key=jax.random.key(7), **options))
        # The same noisy copies by hand, each example's noise from its own key.
        example_keys = jax.random.split(jax.random.key(7), B)
        flat = np.asarray(X).reshape(B, -1)
        scale = (0.2 * (flat.max(1) - flat.min(1)))[:, None, None]
        copies = []
        for copy in range(4):
            keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, copy)))(example_keys)
            noise = jax.vmap(lambda k: jax.random.normal(k, (T, D)))(keys[:, 0])
            copies.append(np.asarray(call(name, smooth, x=X + scale * noise, **options)))
        np.testing.assert_allclose(scores, combine(np.stack(copies)), rtol=1e-4, atol=1e-5)
    jitted = jax.jit(functools.partial(attribution.noise_tunnel(name, n_samples=2), smooth, **options))
    assert jitted(X, TARGET, key=jax.random.key(0)).shape == (B, T)


def test_the_noise_tunnel_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="kind must be one of smoothgrad, smoothgrad_sq, vargrad, not 'sg'"):
        attribution.noise_tunnel("occlusion", kind="sg")
    with pytest.raises(ValueError, match="^key: a noise tunnel draws random numbers"):
        attribution.noise_tunnel("occlusion")(linear, X, TARGET)
    with pytest.raises(ValueError, match="^stddev: expected a Python number >= 0"):
        attribution.noise_tunnel("occlusion", stddev=-1.0)


def test_every_option_of_the_table_is_documented_in_its_units():
    """The module docstring says what each option counts."""
    doc = attribution.methods.__doc__
    options = set(itertools.chain.from_iterable(m.options for m in attribution.METHODS.values()))
    for option in options - {"affine_prefix", "prefix_radius", "rule"}:
        assert f"`{option}`" in doc, option


def test_the_report_flags_a_method_that_ranks_nothing(tmp_path):
    tokens = [["a", "b", "c"], ["d", "e"]]
    scores = {"flat": np.array([[0.5, 0.5, 0.5], [2.0, 2.0, 0.0]]), "ranked": np.array([[0.1, 0.5, 0.2], [1.0, 2.0, 9.0]])}
    page = open(attribution.report.write_html(tmp_path / "r.html", tokens, scores), encoding="utf-8").read()
    assert "flat is degenerate: it gives every token of an example the same score in 100% of the explained" in page
    assert "flat (degenerate)</label>" in page and "ranked is degenerate" not in page
    assert attribution.checks.degenerate_shares({"m": [[1.0, 1.0], [1.0, 2.0], [3.0]]}) == {"m": 0.5}
