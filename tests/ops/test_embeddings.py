"""CWC and CC embeddings against NumPy references; the exact codeword count K."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import embeddings

V, M, K, D = 7, 3, 4, 5
IDS = np.array([[1, 2, 2, 0], [6, 3, 1, 1]], np.int32)  # repeated ids: gradients accumulate


@pytest.fixture(scope="module")
def tables():
    rng = np.random.default_rng(0)
    code_logits = rng.normal(size=(V, M, K)).astype(np.float32)
    codebooks = rng.normal(size=(M, K, D)).astype(np.float32)
    weights = rng.normal(size=IDS.shape + (D,)).astype(np.float32)  # a loss sum(w * emb)
    return code_logits, codebooks, weights


# --- K ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vocab_size,num_codebooks,expected",
    [
        (4**8, 8, 4),
        (4**8 + 1, 8, 5),
        (62_535, 8, 4),  # AG News in the paper
        (3**20, 20, 3),
        (3**20 + 1, 20, 4),
        (10**12, 2, 10**6),
        (10**12 + 1, 2, 10**6 + 1),
        (1, 8, 1),
        (2, 8, 2),
    ],
)
def test_num_codewords_exact_at_powers(vocab_size, num_codebooks, expected):
    assert embeddings.num_codewords(vocab_size, num_codebooks) == expected


def test_num_codewords_is_the_smallest_sufficient_count():
    for vocab_size in range(1, 300):
        for num_codebooks in range(1, 7):
            k = embeddings.num_codewords(vocab_size, num_codebooks)
            assert k**num_codebooks >= vocab_size
            assert k == 1 or (k - 1) ** num_codebooks < vocab_size


@pytest.mark.parametrize("vocab_size,num_codebooks", [(0, 8), (10, 0)])
def test_num_codewords_rejects_empty_sizes(vocab_size, num_codebooks):
    with pytest.raises(ValueError):
        embeddings.num_codewords(vocab_size, num_codebooks)


# --- NumPy references -----------------------------------------------------------------------------


def np_softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_cwc(ids, code_logits, codebooks):
    out = np.zeros(ids.shape + (D,))
    for index in np.ndindex(ids.shape):
        weights = np_softmax(np.asarray(code_logits[ids[index]], np.float64))
        out[index] = sum(weights[m, k] * codebooks[m, k] for m in range(M) for k in range(K))
    return out


def np_cc(codes, codebooks):
    """codes [..., M] ints -> sum_m codebooks[m, codes[m]]."""
    out = np.zeros(codes.shape[:-1] + (D,))
    for index in np.ndindex(codes.shape[:-1]):
        out[index] = sum(codebooks[m, codes[index + (m,)]] for m in range(M))
    return out


def np_straight_through_logit_gradient(ids, code_logits, codebooks, noise, weights):
    """d sum(w * emb) / d code_logits through the soft sample y = softmax(l + g) (tau = 1):
    dL/dl_j = y_j (a_j - sum_k y_k a_k), a_k = <codebook[m, k], w>, accumulated per word id."""
    grad = np.zeros((V, M, K))
    for index in np.ndindex(ids.shape):
        soft = np_softmax(np.asarray(code_logits[ids[index]] + noise[index], np.float64))
        for m in range(M):
            a = codebooks[m] @ weights[index]
            grad[ids[index], m] += soft[m] * (a - soft[m] @ a)
    return grad


# --- CWC ------------------------------------------------------------------------------------------


def test_cwc_matches_numpy(tables):
    code_logits, codebooks, _ = tables
    out = jax.jit(embeddings.cwc_embedding)(IDS, code_logits, codebooks)
    chex.assert_shape(out, IDS.shape + (D,))
    np.testing.assert_allclose(out, np_cwc(IDS, code_logits, codebooks), rtol=1e-5, atol=1e-5)


def test_cwc_gradient_reaches_only_used_words(tables):
    code_logits, codebooks, weights = tables
    grad = jax.jit(jax.grad(lambda c: jnp.sum(weights * embeddings.cwc_embedding(IDS, c, codebooks))))(code_logits)
    used = np.isin(np.arange(V), IDS)
    assert np.all(np.abs(grad[used]).sum((1, 2)) > 0)
    np.testing.assert_array_equal(grad[~used], 0.0)


# --- CC -------------------------------------------------------------------------------------------


def _key(seed):
    # XLA's RngBitGenerator compiles about ten times faster than threefry on CPU.
    return jax.random.key(seed, impl="rbg")


@functools.partial(jax.jit, static_argnames="sampling")
def _cc_loss_and_grads(code_logits, codebooks, weights, rng, sampling):
    def loss(c, b):
        out = embeddings.cc_embedding(IDS, c, b, rng=rng, sampling=sampling, num_samples=5)
        return jnp.sum(weights * out), out

    (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(code_logits, codebooks)
    return out, grads


def test_cc_evaluation_is_deterministic_argmax(tables):
    code_logits, codebooks, _ = tables
    evaluate = jax.jit(embeddings.cc_embedding)
    first, second = evaluate(IDS, code_logits, codebooks), evaluate(IDS, code_logits, codebooks)
    np.testing.assert_array_equal(first, second)
    codes = np.argmax(code_logits[IDS], axis=-1)
    np.testing.assert_allclose(first, np_cc(codes, codebooks), rtol=1e-5, atol=1e-5)


def test_cc_straight_through_forward_is_a_sample_and_gradient_is_the_soft_one(tables):
    code_logits, codebooks, weights = tables
    rng = _key(3)
    out, (logit_grad, _) = _cc_loss_and_grads(code_logits, codebooks, weights, rng, "straight_through")
    # The op draws its Gumbel noise for the gathered logits [..., M, K] from `rng`.
    noise = np.asarray(jax.random.gumbel(rng, IDS.shape + (M, K), jnp.float32))
    codes = np.argmax(code_logits[IDS] + noise, axis=-1)
    assert np.any(codes != np.argmax(code_logits[IDS], axis=-1)), "the noise should change some codes"
    np.testing.assert_allclose(out, np_cc(codes, codebooks), rtol=1e-5, atol=1e-5)
    expected = np_straight_through_logit_gradient(IDS, code_logits, codebooks, noise, weights)
    np.testing.assert_allclose(logit_grad, expected, rtol=1e-4, atol=1e-5)


def test_cc_repeated_argmax_sums_draws_and_leaves_logits_untrained(tables):
    code_logits, codebooks, weights = tables
    rng = _key(4)
    out, (logit_grad, codebook_grad) = _cc_loss_and_grads(code_logits, codebooks, weights, rng, "repeated_argmax")
    noise = np.asarray(jax.random.gumbel(rng, (5,) + IDS.shape + (M, K), jnp.float32))
    codes = np.argmax(np_softmax(code_logits[IDS][None] + noise).sum(0), axis=-1)
    np.testing.assert_allclose(out, np_cc(codes, codebooks), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(logit_grad, 0.0)
    assert np.any(codebook_grad != 0)


def test_cc_rejects_unknown_sampling(tables):
    code_logits, codebooks, _ = tables
    with pytest.raises(ValueError, match="sampling"):
        embeddings.cc_embedding(IDS, code_logits, codebooks, rng=_key(0), sampling="soft")
