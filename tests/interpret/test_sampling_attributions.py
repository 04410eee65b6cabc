"""KernelSHAP, permutation sampling and LIME (`jcaps.attribution._kernels`) against exact Shapley
values enumerated over every coalition of 8 tokens, and against NumPy references."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.attribution import _kernels as attribution

B, T, D, C = 3, 8, 4, 3
LENGTHS = np.array([8, 5, 1])  # a full row, a padded row, a row of one token
MASK = np.arange(T)[None, :] < LENGTHS[:, None]

rng = np.random.default_rng(0)
EMBEDDINGS = rng.normal(size=(B, T, D)).astype(np.float32)
W1, W2 = rng.normal(size=(D, C)).astype(np.float32), rng.normal(size=(D, C)).astype(np.float32)
W_PAIR = rng.normal(size=(D, D, C)).astype(np.float32) * 0.3


def interacting(e):
    """[K, T, D] -> [K, C]: tanh of a sum, a product of sums and pairwise terms: strong
    interactions between tokens, so Shapley values differ from single-token effects."""
    first = jnp.einsum("ktd,dc->kc", e, W1)
    second = jnp.einsum("ktd,dc->kc", e, W2)
    total = jnp.sum(e, axis=1)
    return jnp.tanh(first) * second + jnp.einsum("kd,ke,dec->kc", total, total, W_PAIR)


def additive(e):
    return jnp.einsum("ktd,dc->kc", jnp.tanh(e), W1)


def exact_shapley(score_fn, embeddings, mask, target) -> np.ndarray:
    """Shapley values by enumeration: phi_i = sum over S without i of |S|! (M - |S| - 1)! / M!
    (v(S + i) - v(S)), v(S) the output with the tokens outside S at zero."""
    phi = np.zeros(mask.shape)
    for b in range(mask.shape[0]):
        players = np.flatnonzero(mask[b])
        m = len(players)
        subsets = [frozenset(s) for r in range(m + 1) for s in itertools.combinations(players, r)]
        inputs = np.stack([np.where(np.isin(np.arange(T), list(s))[:, None], embeddings[b], 0.0) for s in subsets])
        values = dict(zip(subsets, np.asarray(score_fn(jnp.asarray(inputs, jnp.float32)))[:, target[b]]))
        for i in players:
            for s in subsets:
                if i not in s:
                    weight = math.factorial(len(s)) * math.factorial(m - len(s) - 1) / math.factorial(m)
                    phi[b, i] += weight * (values[s | {i}] - values[s])
    return phi


TARGET = np.array([0, 2, 1])
ZEROS = np.zeros_like(EMBEDDINGS)
# The kernels' options every call here states: a zero baseline, f on the inputs, and as many
# coalitions a call as the tests' 8192 KernelSHAP samples.
OPTIONS = {"baseline": ZEROS, "max_rows": 8192 * B, "linear_map": None, "prefix_radius": None, "groups": None}


@pytest.fixture(scope="module")
def exact():
    return exact_shapley(interacting, EMBEDDINGS, MASK, TARGET)


def value_change(score_fn):
    full = np.asarray(score_fn(jnp.asarray(EMBEDDINGS * MASK[..., None])))[np.arange(B), TARGET]
    empty = np.asarray(score_fn(jnp.zeros_like(EMBEDDINGS)))[np.arange(B), TARGET]
    return full - empty


def test_the_enumerated_values_are_far_from_single_token_effects(exact):
    """The test model is a hard case: occlusion (leave one out) disagrees with Shapley."""
    occlusion = np.asarray(attribution.occlusion(interacting, EMBEDDINGS, TARGET, MASK, **OPTIONS))
    assert np.abs(occlusion[0] - exact[0]).max() > 0.1
    np.testing.assert_allclose(exact.sum(-1), value_change(interacting), rtol=1e-5, atol=1e-5)  # efficiency


@pytest.mark.parametrize(
    "n, max_rows, rows_a_call",
    [(258, 64 * B, 52), (64, 64 * B, 64), (10, 3 * B, 3), (7, 7 * B, 7), (10, 3 * B + 2, 3), (5, 1, 1)],
)
def test_coalitions_are_split_into_the_fewest_calls_as_equal_as_they_can_be(n, max_rows, rows_a_call):
    """max_rows counts rows: max(1, max_rows // B) coalitions of the B rows a call."""
    calls = []

    def recording(e):
        calls.append(e.shape[0] // B)
        return interacting(e)

    coalitions = np.random.default_rng(n).random((n, B, T)) < 0.5
    values = attribution.coalition_values(recording, jnp.asarray(EMBEDDINGS), jnp.zeros_like(EMBEDDINGS), TARGET,
                                          jnp.asarray(coalitions), max_rows=max_rows, linear_map=None,
                                          prefix_radius=None)
    assert calls == [rows_a_call]  # `lax.map` traces its body once
    one_by_one = [attribution.coalition_values(interacting, jnp.asarray(EMBEDDINGS), jnp.zeros_like(EMBEDDINGS),
                                               TARGET, jnp.asarray(z[None]), max_rows=B, linear_map=None,
                                               prefix_radius=None)[0] for z in coalitions[:5]]
    np.testing.assert_allclose(np.asarray(values)[:5], np.stack(one_by_one), rtol=1e-5, atol=1e-6)
    assert values.shape == (n, B)


def test_the_regression_over_every_coalition_with_kernel_weights_is_exact(exact):
    """All 2^8 - 2 coalitions weighted by (M - 1) / (C(M, s) s (M - s)): KernelSHAP's regression
    recovers the exact Shapley values, the padded rows included."""
    coalitions, weights = [], []
    for bits in itertools.product([False, True], repeat=T):
        z = np.array(bits)[None, :] & MASK  # [B, T]
        coalitions.append(z)
        size, m = z.sum(-1), MASK.sum(-1)
        inner = (size > 0) & (size < m)
        weights.append(np.where(inner, (m - 1) / np.maximum(
            [math.comb(int(mm), int(s)) * s * (mm - s) for mm, s in zip(m, size)], 1), 0.0))
    coalitions, weights = np.stack(coalitions), np.stack(weights)
    values = attribution.coalition_values(interacting, jnp.asarray(EMBEDDINGS), jnp.zeros_like(EMBEDDINGS), TARGET,
                                          jnp.asarray(coalitions), max_rows=37 * B, linear_map=None,
                                          prefix_radius=None)
    full = attribution.coalition_values(interacting, jnp.asarray(EMBEDDINGS), jnp.zeros_like(EMBEDDINGS), TARGET,
                                        jnp.asarray(np.stack([MASK, np.zeros_like(MASK)])), max_rows=2 * B,
                                        linear_map=None, prefix_radius=None)
    phi = attribution.constrained_shapley_regression(values, full[0], full[1], jnp.asarray(coalitions),
                                                     jnp.asarray(MASK), jnp.asarray(weights))
    np.testing.assert_allclose(np.asarray(phi), exact, atol=2e-4)


def test_kernel_shap_converges_to_the_shapley_values_and_is_efficient(exact):
    options = {**OPTIONS, "max_rows": 1024 * B}
    phi = np.asarray(jax.jit(lambda k: attribution.kernel_shap(interacting, EMBEDDINGS, TARGET, MASK, k,
                                                               n_samples=8192, **options))(jax.random.key(0)))
    np.testing.assert_allclose(phi.sum(-1), value_change(interacting), rtol=1e-4, atol=1e-4)
    assert np.all(phi[~MASK] == 0)
    scale = np.abs(exact).max()
    assert np.abs(phi - exact).max() < 0.05 * scale, (phi, exact)
    # Fewer samples, further away: the estimate is a sampling one.
    rough = np.asarray(attribution.kernel_shap(interacting, EMBEDDINGS, TARGET, MASK, jax.random.key(0), n_samples=32,
                                               **OPTIONS))
    assert np.abs(rough - exact).max() > np.abs(phi - exact).max()


def test_shapley_sampling_converges_and_each_order_is_efficient(exact):
    phi = np.asarray(attribution.shapley_sampling(interacting, EMBEDDINGS, TARGET, MASK, jax.random.key(1),
                                                  n_permutations=1024, **{**OPTIONS, "max_rows": 2048 * B}))
    assert np.abs(phi - exact).max() < 0.05 * np.abs(exact).max()
    two = np.asarray(attribution.shapley_sampling(interacting, EMBEDDINGS, TARGET, MASK, jax.random.key(2),
                                                  n_permutations=2, **OPTIONS))
    np.testing.assert_allclose(two.sum(-1), value_change(interacting), rtol=1e-5, atol=1e-5)
    assert np.all(two[~MASK] == 0)


def test_on_an_additive_model_every_estimate_is_exact():
    """v(S) = v(0) + sum_{t in S} a_t: the Shapley value of t is a_t, and so is a linear surrogate's
    coefficient (without shrinkage)."""
    exact = exact_shapley(additive, EMBEDDINGS, MASK, TARGET)
    key = jax.random.key(3)
    for phi in (attribution.shapley_sampling(additive, EMBEDDINGS, TARGET, MASK, key, n_permutations=2, **OPTIONS),
                attribution.kernel_shap(additive, EMBEDDINGS, TARGET, MASK, key, n_samples=64, **OPTIONS),
                attribution.lime(additive, EMBEDDINGS, TARGET, MASK, key, n_samples=64, kernel_width=0.25,
                                 alpha=1e-6, **OPTIONS)):
        np.testing.assert_allclose(np.asarray(phi), exact, atol=1e-3)


def test_kernel_shap_with_the_budget_of_every_coalition_is_exact(exact):
    """2^8 - 2 samples enumerate every coalition of the full row (and of the padded ones), with
    the Shapley kernel's weights: the exact values, whatever the key."""
    coalitions, weights = attribution.shapley_kernel_design(jax.random.key(6), jnp.asarray(MASK), n_samples=2**T - 2)
    z, w = np.asarray(coalitions)[:, 0], np.asarray(weights)[:, 0]
    assert len({tuple(row) for row in z}) == 2**T - 2 and not np.any(z.all(-1) | ~z.any(-1))
    sizes = z.sum(-1)
    kernel = (T - 1) / np.array([math.comb(T, int(s)) * s * (T - s) for s in sizes])
    np.testing.assert_allclose(w, kernel / kernel.sum(), rtol=1e-5)
    for key in (0, 1):
        phi = attribution.kernel_shap(interacting, EMBEDDINGS, TARGET, MASK, jax.random.key(key), n_samples=2**T - 2,
                                      **OPTIONS)
        np.testing.assert_allclose(np.asarray(phi), exact, atol=2e-4)


def test_kernel_design_enumerates_the_sizes_the_budget_covers_then_samples_pairs_by_stratum():
    """M = 10, 256 samples (SHAP's KernelExplainer's choice for the same budget): the 20
    coalitions of sizes 1 and 9 enumerated, then 118 complementary pairs whose sizes follow the
    kernel weight left to within one pair, their members uniform."""
    m, n = 10, 256
    mask = jnp.ones((1, m), bool)
    z, w = (np.asarray(a)[:, 0] for a in attribution.shapley_kernel_design(jax.random.key(4), mask, n_samples=n))
    sizes = z.sum(-1)
    assert sorted(map(tuple, z[:20])) == sorted(map(tuple, np.concatenate([np.eye(m, dtype=bool), ~np.eye(m, dtype=bool)])))
    np.testing.assert_array_equal(z[21::2], ~z[20::2])  # each sampled coalition, then its complement
    kernel = {s: (m - 1) / (s * (m - s)) for s in range(1, m)}
    total = sum(kernel.values())
    np.testing.assert_allclose(w[:20], kernel[1] / total / m, rtol=1e-5)
    left = sum(kernel[s] for s in range(2, m - 1)) / total
    np.testing.assert_allclose(w[20:], left / (n - 20), rtol=1e-5)
    pairs = np.minimum(sizes[20::2], m - sizes[20::2])  # the pair's smaller size
    share = {s: (kernel[s] + kernel[m - s] * (s != m - s)) / (left * total) for s in range(2, m // 2 + 1)}
    for s, fraction in share.items():
        assert abs(np.sum(pairs == s) - fraction * (n - 20) / 2) <= 1, (s, np.bincount(pairs))
    # Members: over many keys each token is in a sampled coalition of size s in s / m of them.
    designs = jax.jit(jax.vmap(lambda key: attribution.shapley_kernel_design(key, mask, n_samples=n)[0]))
    draws = np.asarray(designs(jax.random.split(jax.random.key(5), 40)))[:, 20:, 0].reshape(-1, m)
    three = draws[draws.sum(-1) == 3]
    np.testing.assert_allclose(three.mean(0), 3 / m, atol=0.04)


def test_lime_samples_and_weights_follow_lime_text():
    mask = jnp.asarray(MASK)
    z = np.asarray(attribution.lime_coalitions(jax.random.key(5), mask, n_samples=4000))
    np.testing.assert_array_equal(z[0], MASK)  # the input itself first
    assert not np.any(z[:, ~MASK])
    removed = MASK.sum(-1)[None] - z[1:].sum(-1)
    for b, m in enumerate(MASK.sum(-1)):
        counts = np.bincount(removed[:, b], minlength=m + 1)
        assert counts[0] == 0 and counts[1:].min() > 0.7 * counts[1:].mean()  # 1..M uniform
    weights = np.asarray(attribution.lime_weights(jnp.asarray(z), mask, kernel_width=0.25))
    kept = z.sum(-1)
    # LIME: distance = 100 * cosine distance to the all-ones vector, kernel sqrt(exp(-d^2 / 25^2)).
    distance = 100 * (1 - kept / np.sqrt(np.maximum(kept, 1e-30) * MASK.sum(-1)[None]))
    distance = np.where(kept == 0, 100.0, distance)
    np.testing.assert_allclose(weights, np.sqrt(np.exp(-distance**2 / 25**2)), rtol=1e-5, atol=1e-7)


def test_weighted_ridge_matches_numpy():
    n = 50
    z = rng.random((n, B, T)) < 0.5
    z &= MASK[None]
    values = rng.normal(size=(n, B)).astype(np.float32)
    weights = rng.random((n, B)).astype(np.float32)
    beta = np.asarray(attribution.weighted_ridge(jnp.asarray(values), jnp.asarray(z), jnp.asarray(weights),
                                                 jnp.asarray(MASK), alpha=0.7))
    for b in range(B):
        players = np.flatnonzero(MASK[b])
        # The intercept is not penalised: minimise over (c, beta) with an augmented design.
        design = np.column_stack([np.ones(n), z[:, b, players]]).astype(np.float64)
        sqrt_w = np.sqrt(weights[:, b])[:, None]
        penalty = np.diag([0.0] + [0.7] * len(players))
        solution = np.linalg.solve((design * sqrt_w).T @ (design * sqrt_w) + penalty,
                                   (design * sqrt_w).T @ (values[:, b] * sqrt_w[:, 0]))
        np.testing.assert_allclose(beta[b, players], solution[1:], rtol=1e-4, atol=1e-5)
        assert np.all(beta[b, ~MASK[b]] == 0)


@pytest.mark.parametrize("method", ["kernel_shap", "shapley_sampling", "lime"])
def test_sampling_methods_under_jit_and_vmap(method):
    fn = getattr(attribution, method)
    # Enough KernelSHAP coalitions that no two tokens are always drawn together (the regression
    # would then split their share by its ridge alone, as rounding happens to fall).
    count = {"kernel_shap": {"n_samples": 64}, "shapley_sampling": {"n_permutations": 2},
             "lime": {"n_samples": 16, "kernel_width": 0.25, "alpha": 1.0}}[method]

    def one(e, mask, target, key):  # unbatched: e [T, D]
        options = {**OPTIONS, "baseline": jnp.zeros_like(e[None])}
        return fn(interacting, e[None], target, mask[None], key, **count, **options)[0]

    keys = jax.random.split(jax.random.key(6), B)
    batched = jax.jit(jax.vmap(one))(jnp.asarray(EMBEDDINGS), jnp.asarray(MASK), jnp.asarray(TARGET), keys)
    assert batched.shape == (B, T) and np.all(np.isfinite(np.asarray(batched)))
    assert np.all(np.asarray(batched)[~MASK] == 0)
    single = fn(interacting, jnp.asarray(EMBEDDINGS[1:2]), TARGET[1], jnp.asarray(MASK[1:2]), keys[1], **count,
                **{**OPTIONS, "baseline": ZEROS[1:2]})
    np.testing.assert_allclose(np.asarray(batched[1]), np.asarray(single[0]), rtol=1e-3, atol=1e-4)
