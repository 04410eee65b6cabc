"""Capsule ops against plain NumPy loops, plus masking, gradient and batching invariants."""
import functools
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import capsules

dynamic = jax.jit(capsules.dynamic_routing, static_argnames="num_iterations")


def tempered_leaky_softmax(logits, axis, scale=3.0):
    """A coupling composed by the caller: an inverse temperature on the agreement and the leaky
    softmax's orphan class (an extra zero logit whose share is dropped)."""
    logits = jnp.moveaxis(scale * logits, axis, -1)
    extended = jnp.concatenate([logits, jnp.zeros(logits.shape[:-1] + (1,), logits.dtype)], -1)
    return jnp.moveaxis(jax.nn.softmax(extended, -1)[..., :-1], -1, axis)


dynamic_scaled_orphan = jax.jit(functools.partial(capsules.dynamic_routing, coupling=tempered_leaky_softmax),
                                static_argnames="num_iterations")
dynamic_cosine = jax.jit(functools.partial(capsules.dynamic_routing, similarity="cosine"),
                         static_argnames="num_iterations")
kmeans = jax.jit(capsules.kmeans_routing, static_argnames=("num_iterations", "similarity"))


# ---------------------------------------------------------------- NumPy references (one example)


def np_squash(s):
    norm = np.sqrt(np.sum(s * s))
    return norm**2 / (1.0 + norm**2) * s / norm


def np_softmax_rows(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def np_dynamic_routing(u_hat, r, valid, scale=1.0, orphan=False, similarity="dot"):
    n_in, n_out, _ = u_hat.shape
    b = np.zeros((n_in, n_out))
    for _ in range(r):
        # The orphan class: an extra zero logit in the softmax, its column dropped.
        c = np_softmax_rows(np.concatenate([b, np.zeros((n_in, 1))], axis=1))[:, :-1] if orphan else np_softmax_rows(b)
        v = np.zeros(u_hat.shape[1:])
        for j in range(n_out):
            for i in range(n_in):
                if valid[i]:
                    v[j] += c[i, j] * u_hat[i, j]
            v[j] = np_squash(v[j])
        for i in range(n_in):
            for j in range(n_out):
                if valid[i]:
                    agreement = np.dot(u_hat[i, j], v[j])
                    if similarity == "cosine":
                        agreement /= np.linalg.norm(u_hat[i, j]) * np.linalg.norm(v[j])
                    b[i, j] += scale * agreement
    c[~valid] = 0.0
    return v, c


def np_kmeans_routing(u_hat, r, valid, similarity):
    n_in, n_out, _ = u_hat.shape
    v = np.zeros(u_hat.shape[1:])
    for i in range(n_in):
        if valid[i]:
            v += u_hat[i] / n_out
    for _ in range(r):
        logits = np.zeros((n_in, n_out))
        for i in range(n_in):
            for j in range(n_out):
                dot = np.dot(u_hat[i, j], v[j]) / np.linalg.norm(v[j])
                if similarity == "cosine":
                    dot /= np.linalg.norm(u_hat[i, j])
                logits[i, j] = dot
        c = np_softmax_rows(logits)
        v = np.zeros(u_hat.shape[1:])
        for i in range(n_in):
            if valid[i]:
                v += c[i][:, None] * u_hat[i]
    c[~valid] = 0.0
    return np.stack([np_squash(x) for x in v]), c


def np_batched(ref, u_hat, mask, *args):
    """Applies a one-example reference over all leading axes."""
    batch = u_hat.shape[:-3]
    v = np.zeros(batch + u_hat.shape[-2:])
    c = np.zeros(u_hat.shape[:-1])
    for idx in np.ndindex(*batch):
        v[idx], c[idx] = ref(u_hat[idx], *args[:1], mask[idx].astype(bool), *args[1:])
    return v, c


ROUTINGS = {
    "dynamic": (
        lambda u, r, mask=None: dynamic(u, num_iterations=r, mask=mask),
        lambda u, r, mask: np_batched(np_dynamic_routing, u, mask, r),
    ),
    "dynamic_scaled_orphan": (
        lambda u, r, mask=None: dynamic_scaled_orphan(u, num_iterations=r, mask=mask),
        lambda u, r, mask: np_batched(np_dynamic_routing, u, mask, r, 3.0, True),
    ),
    "dynamic_cosine": (
        lambda u, r, mask=None: dynamic_cosine(u, num_iterations=r, mask=mask),
        lambda u, r, mask: np_batched(np_dynamic_routing, u, mask, r, 1.0, False, "cosine"),
    ),
    "kmeans_cosine": (
        lambda u, r, mask=None: kmeans(u, num_iterations=r, similarity="cosine", mask=mask),
        lambda u, r, mask: np_batched(np_kmeans_routing, u, mask, r, "cosine"),
    ),
    "kmeans_dot": (
        lambda u, r, mask=None: kmeans(u, num_iterations=r, similarity="dot", mask=mask),
        lambda u, r, mask: np_batched(np_kmeans_routing, u, mask, r, "dot"),
    ),
}


def random_mask(rng, shape):
    mask = rng.random(shape) < 0.7
    mask[..., 0] = True
    return mask.astype(np.float32)


# ---------------------------------------------------------------- squash


def test_squash_matches_formula_and_bounds_norms():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(5, 4, 8)) * np.array([1e-2, 0.3, 1.0, 5.0, 50.0])[:, None, None]
    out = np.asarray(jax.jit(capsules.squash)(jnp.asarray(s, jnp.float32)))
    expected = np.stack([[np_squash(x) for x in row] for row in s])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    norms = np.linalg.norm(out, axis=-1)
    assert np.all(norms >= 0.0) and np.all(norms < 1.0)
    cos = np.sum(out * s, -1) / (norms * np.linalg.norm(s, axis=-1))
    np.testing.assert_allclose(cos, 1.0, rtol=1e-5)
    squash_axis = jax.jit(capsules.squash, static_argnames="axis")
    np.testing.assert_allclose(squash_axis(jnp.asarray(s.T, jnp.float32), axis=0), out.T, rtol=1e-6)


def test_squash_value_and_gradient_at_zero():
    value, jac = jax.jit(lambda s: (capsules.squash(s), jax.jacrev(capsules.squash)(s)))(
        jnp.zeros(4)
    )
    np.testing.assert_array_equal(value, 0.0)
    np.testing.assert_array_equal(jac, 0.0)


# ---------------------------------------------------------------- prediction vectors


def np_prediction_vectors(u, w, b):
    """Loop reference; `w` is [J, d_out, d_in] (shared) or [I, J, d_out, d_in] (unshared)."""
    shared = w.ndim == 3
    n_in, d_in = u.shape[-2:]
    n_out, d_out = w.shape[-3:-1]
    out = np.zeros(u.shape[:-2] + (n_in, n_out, d_out))
    for idx in np.ndindex(*u.shape[:-2]):
        for i, j, e in itertools.product(range(n_in), range(n_out), range(d_out)):
            w_ij = w[j] if shared else w[i, j]
            acc = sum(w_ij[e, d] * u[idx + (i, d)] for d in range(d_in))
            if b is not None:
                acc += b[j, e] if shared else b[i, j, e]
            out[idx + (i, j, e)] = acc
    return out


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_prediction_vectors_match_loop(shared, batch):
    rng = np.random.default_rng(2)
    n_in, n_out, d_in, d_out = 5, 3, 4, 6
    transform = (n_out,) if shared else (n_in, n_out)
    fn = jax.jit(
        capsules.shared_prediction_vectors if shared else capsules.unshared_prediction_vectors
    )
    u = rng.normal(size=batch + (n_in, d_in)).astype(np.float32)
    w = rng.normal(size=transform + (d_out, d_in)).astype(np.float32)
    b = rng.normal(size=transform + (d_out,)).astype(np.float32)
    for bias in (None, b):
        u_hat = fn(u, w, bias=bias)
        chex.assert_shape(u_hat, batch + (n_in, n_out, d_out))
        np.testing.assert_allclose(u_hat, np_prediction_vectors(u, w, bias), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- routing


# (batch, in_caps, out_caps, dim, iterations, padded): every r in 1..5, 0 to 2 batch axes.
CASES = [
    ((), 4, 3, 5, 1, False),
    ((), 6, 2, 4, 2, True),
    ((3,), 5, 4, 3, 3, True),
    ((2, 3), 3, 2, 4, 4, True),
    ((2,), 7, 5, 2, 5, False),
]
# The two k-means similarities share the loop, so they split the cases between them (each
# compile costs about a second of CPU).
REFERENCE_CASES = [("dynamic",) + case for case in CASES] + [("dynamic_cosine",) + case for case in CASES[-2:]] + [
    ("kmeans_dot" if case[4] % 2 == 0 else "kmeans_cosine",) + case for case in CASES
]


@pytest.mark.parametrize("routing,batch,n_in,n_out,dim,r,padded", REFERENCE_CASES)
def test_routing_matches_numpy_reference(routing, batch, n_in, n_out, dim, r, padded):
    fn, ref = ROUTINGS[routing]
    rng = np.random.default_rng(r + 10 * n_in)
    u_hat = rng.normal(size=batch + (n_in, n_out, dim)).astype(np.float32)
    mask = random_mask(rng, batch + (n_in,)) if padded else np.ones(batch + (n_in,), np.float32)
    v, c = fn(u_hat, r, mask if padded else None)
    chex.assert_shape(v, batch + (n_out, dim))
    chex.assert_shape(c, batch + (n_in, n_out))
    v_ref, c_ref = ref(u_hat.astype(np.float64), r, mask)
    np.testing.assert_allclose(v, v_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c, c_ref, rtol=1e-4, atol=1e-6)
    # Invariants: rows of valid inputs sum to 1, padded rows are 0, output norms in [0, 1).
    np.testing.assert_allclose(np.sum(c, -1), mask, atol=1e-5)
    assert np.all(np.linalg.norm(v, axis=-1) < 1.0)


def interleave_padding(rng, u_hat, n_pad):
    """Scatters the real capsules of each example among `n_pad` garbage ones (huge, inf, nan)."""
    n_batch, n_in = u_hat.shape[:2]
    garbage = rng.normal(size=(n_batch, n_pad) + u_hat.shape[2:]).astype(np.float32) * 1e4
    garbage[0, 0, 0, 0] = np.inf
    garbage[-1, -1, -1, -1] = np.nan
    padded = np.zeros((n_batch, n_in + n_pad) + u_hat.shape[2:], np.float32)
    mask = np.zeros((n_batch, n_in + n_pad), np.float32)
    for b in range(n_batch):
        real = np.sort(rng.permutation(n_in + n_pad)[:n_in])
        pad = np.setdiff1d(np.arange(n_in + n_pad), real)
        padded[b, real], padded[b, pad], mask[b, real] = u_hat[b], garbage[b], 1.0
    return padded, mask


@pytest.mark.parametrize("routing", ROUTINGS)
def test_padding_changes_nothing_and_vmap_matches_batch(routing):
    fn, ref = ROUTINGS[routing]
    rng = np.random.default_rng(4)
    u_hat = rng.normal(size=(3, 5, 3, 4)).astype(np.float32)
    v, c = ref(u_hat.astype(np.float64), 3, np.ones((3, 5)))
    padded, mask = interleave_padding(rng, u_hat, 4)
    v_pad, c_pad = fn(padded, 3, mask)

    np.testing.assert_allclose(v_pad, v, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c_pad[mask == 1], c.reshape(-1, 3), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(c_pad[mask == 0], 0.0)

    v_map, c_map = jax.vmap(lambda u, m: fn(u, 3, m))(padded, mask)
    np.testing.assert_allclose(v_map, v_pad, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(c_map, c_pad, rtol=1e-6, atol=1e-7)

    # All-zero inputs, one example fully padded: exact zeros out, couplings still finite.
    v_zero, c_zero = fn(np.zeros_like(padded), 3, mask * (np.arange(3) > 0)[:, None])
    np.testing.assert_array_equal(v_zero, 0.0)
    np.testing.assert_array_equal(c_zero[0], 0.0)
    # Each valid row sums to 1, or to J / (J + 1) with the orphan class at zero agreement.
    row_sum = 3 / 4 if routing == "dynamic_scaled_orphan" else 1.0
    np.testing.assert_allclose(np.sum(c_zero[1:], -1), row_sum * mask[1:], atol=1e-6)


@pytest.mark.parametrize("routing", ROUTINGS)
def test_routing_gradients(routing):
    """Reverse-mode gradients through every iteration: equal to central finite differences,
    zero for padded capsules, finite at all-zero inputs (also when a whole example is padded)."""
    fn, _ = ROUTINGS[routing]
    rng = np.random.default_rng(5)
    shape, r = (2, 4, 3, 3), 3
    with jax.enable_x64(True):
        mask = jnp.asarray([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0]])
        proj_v = jnp.asarray(rng.normal(size=(2, 3, 3)))
        proj_c = jnp.asarray(rng.normal(size=(2, 4, 3)))

        def objective(u, mask):
            v, c = fn(u, r, mask)
            return jnp.sum(v * proj_v) + jnp.sum(c * proj_c)

        value_and_grad = jax.jit(jax.value_and_grad(objective))
        u_hat = jnp.asarray(rng.normal(size=shape))
        _, grad = value_and_grad(u_hat, mask)
        np.testing.assert_array_equal(grad[mask == 0], 0.0)
        h = 1e-5
        for _ in range(3):
            t = jnp.asarray(rng.normal(size=shape))
            fd = value_and_grad(u_hat + h * t, mask)[0] - value_and_grad(u_hat - h * t, mask)[0]
            np.testing.assert_allclose(jnp.sum(grad * t), fd / (2 * h), rtol=1e-6, atol=1e-9)

        zero_grad = value_and_grad(jnp.zeros(shape), mask * jnp.asarray([[0.0], [1.0]]))[1]
        assert np.all(np.isfinite(zero_grad))


def test_learned_logit_scale_gets_its_finite_difference_gradient():
    """A learned inverse temperature, closed over by the coupling function: gradients reach it."""
    rng = np.random.default_rng(6)
    with jax.enable_x64(True):
        u_hat = jnp.asarray(rng.normal(size=(5, 3, 4)))
        projection = jnp.asarray(rng.normal(size=(5, 3)))

        def objective(scale):
            coupling = functools.partial(tempered_leaky_softmax, scale=scale)
            return jnp.sum(capsules.dynamic_routing(u_hat, num_iterations=3, coupling=coupling)[1] * projection)

        grad = jax.grad(objective)(jnp.asarray(2.0))
        h = 1e-6
        np.testing.assert_allclose(grad, (objective(2.0 + h) - objective(2.0 - h)) / (2 * h), rtol=1e-6)
        assert abs(float(grad)) > 1e-4  # the scale changes the coupling


@pytest.mark.parametrize("bad", [0, -1])
def test_routing_rejects_fewer_than_one_iteration(bad):
    u_hat = jnp.ones((2, 2, 2))
    with pytest.raises(ValueError):
        capsules.dynamic_routing(u_hat, num_iterations=bad)
    with pytest.raises(ValueError):
        capsules.kmeans_routing(u_hat, num_iterations=bad)


def test_kmeans_rejects_unknown_similarity():
    with pytest.raises(ValueError, match="similarity"):
        capsules.kmeans_routing(jnp.ones((2, 2, 2)), num_iterations=3, similarity="euclidean")


def test_capsule_length_is_exact_with_a_finite_gradient_at_zero():
    v = jnp.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(capsules.capsule_length(v), [5.0, 0.0])
    grad = jax.grad(lambda x: jnp.sum(capsules.capsule_length(x)))(v)
    np.testing.assert_allclose(grad, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)


def np_routing_contributions(u_hat, coupling):
    """One example: c[i, j] <u_hat[i, j], s_j / |s_j|> with s_j = sum_i c[i, j] u_hat[i, j]."""
    n_in, n_out, _ = u_hat.shape
    out = np.zeros((n_in, n_out))
    for j in range(n_out):
        s = sum(coupling[i, j] * u_hat[i, j] for i in range(n_in) if coupling[i, j] != 0)
        for i in range(n_in):
            if coupling[i, j] != 0:
                out[i, j] = coupling[i, j] * np.dot(u_hat[i, j], s) / np.linalg.norm(s)
    return out


@pytest.mark.parametrize("routing", ["dynamic", "kmeans_cosine"])
def test_routing_contributions_split_the_routed_length(routing):
    """Against the NumPy loop; each output capsule's contributions sum to |s_j| (s_j recovered
    from v_j = squash(s_j)); padded capsules, even holding inf/nan, give 0 rows and change
    nothing; batched equals vmapped; gradients are finite."""
    fn, _ = ROUTINGS[routing]
    rng = np.random.default_rng(7)
    u_hat = rng.normal(size=(3, 5, 4, 6)).astype(np.float32)
    padded, mask = interleave_padding(rng, u_hat, 3)
    v, c = fn(padded, 3, mask)
    contributions = jax.jit(capsules.routing_contributions)(padded, c)
    chex.assert_shape(contributions, (3, 8, 4))
    np.testing.assert_array_equal(contributions[mask == 0], 0.0)
    for b in range(3):
        real = mask[b] == 1
        np.testing.assert_allclose(contributions[b][real],
                                   np_routing_contributions(u_hat[b].astype(np.float64), np.asarray(c[b][real], np.float64)),
                                   rtol=1e-4, atol=1e-5)
    length = np.linalg.norm(v, axis=-1)
    routed = np.sqrt(length / (1 - length))  # |v| = |s|^2 / (1 + |s|^2) inverted
    np.testing.assert_allclose(np.sum(contributions, axis=-2), routed, rtol=1e-3)
    mapped = jax.vmap(capsules.routing_contributions)(padded, c)
    np.testing.assert_allclose(mapped, contributions, rtol=1e-6, atol=1e-7)
    grad = jax.grad(lambda u: jnp.sum(capsules.routing_contributions(u, c) ** 2))(jnp.asarray(padded))
    assert np.all(np.isfinite(grad)) and np.all(grad[mask == 0] == 0)
