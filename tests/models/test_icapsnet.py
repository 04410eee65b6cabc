"""Tests for the iCapsNets Short and Long models at tiny sizes."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.models.icapsnet import ICapsNetLong, ICapsNetShort
from jcaps.ops.capsules import dynamic_routing, kmeans_routing, routing_contributions, shared_prediction_vectors

TINY = {
    "vocab_size": 13,
    "num_classes": 3,
    "embed_dim": 8,
    "region_dim": 8,
    "num_capsules": 4,
    "query_dim": 4,
    "primary_dim": 4,
    "class_dim": 4,
}
B, I, J, D_P, D_C = 3, 4, 3, 4, 4

# Short: [B, N]; the last example is fully padded.
SHORT_TOKENS = np.array([[3, 4, 5, 6, 7], [8, 2, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=np.int32)
# Long: [B, M, N]; example 0 has an empty sentence in the middle, example 2 is fully padded.
LONG_TOKENS = np.array(
    [
        [[3, 4, 5, 0], [0, 0, 0, 0], [6, 7, 8, 9]],
        [[10, 11, 0, 0], [12, 0, 0, 0], [0, 0, 0, 0]],
        [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
    ],
    dtype=np.int32,
)


def _key(seed):
    # XLA's RngBitGenerator compiles about ten times faster than threefry on CPU.
    return jax.random.key(seed, impl="rbg")


def _init_apply(model, tokens):
    """Initialises and runs the model, both under `jit` (which is also the compile check)."""
    params = jax.jit(model.init)(_key(0), tokens)
    return params, jax.jit(model.apply)(params, tokens)


@pytest.fixture(scope="module")
def short_run():
    # K = 5 makes padding leakage at the sequence end reach two positions deep.
    model = ICapsNetShort(**TINY, kernel_size=5)
    params, out = _init_apply(model, SHORT_TOKENS)
    return model, params, out


@pytest.fixture(scope="module")
def long_run():
    model = ICapsNetLong(sentence_dim=6, **TINY)
    params, out = _init_apply(model, LONG_TOKENS)
    return model, params, out


# --- NumPy reference -------------------------------------------------------------------------


def _np_squash(s, eps=1e-7):
    sq = np.sum(s**2, axis=-1, keepdims=True)
    return sq / (1 + sq) * s / np.sqrt(sq + eps)


def _np_region_embeddings(p, tokens):
    """tokens [N] -> [N, d_w]: masked embeddings, 1-D cross-correlation with zero padding."""
    emb = p["embed"]["embedding"][tokens] * (tokens != 0)[:, None]
    kernel, bias = p["region_conv"]["kernel"], p["region_conv"]["bias"]
    half = (kernel.shape[0] - 1) // 2
    padded = np.pad(emb, ((half, half), (0, 0)))
    return np.stack([sum(padded[n + k] @ kernel[k] for k in range(kernel.shape[0])) + bias for n in range(len(tokens))])


def _np_attend(query, x, key_kernel, value_kernel, mask):
    """One head: x [N, d_in] -> (pooled [d_v], weights [N]); zeros if nothing is valid."""
    weights = np.zeros(len(x))
    if mask.any():
        logits = np.array([query @ (xn @ key_kernel) for xn in x])
        e = np.exp(logits[mask] - logits[mask].max())
        weights[mask] = e / e.sum()
    pooled = sum(weights[n] * (x[n] @ value_kernel) for n in range(len(x)))
    return pooled, weights


def _np_short(params, tokens):
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    primary = np.zeros((len(tokens), I, D_P))
    alpha = np.zeros((len(tokens), I, tokens.shape[1]))
    for b, seq in enumerate(tokens):
        w = _np_region_embeddings(p, seq)
        for i in range(I):
            primary[b, i], alpha[b, i] = _np_attend(
                p["queries"][i],
                w,
                p["word_attention"]["key_kernel"][i],
                p["word_attention"]["value_kernel"][i],
                seq != 0,
            )
    return _np_squash(primary), alpha


def _np_long(params, tokens):
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    b_size, m_size, n_size = tokens.shape
    primary = np.zeros((b_size, I, D_P))
    alpha = np.zeros((b_size, I, m_size, n_size))
    rho = np.zeros((b_size, I, m_size))
    for b in range(b_size):
        for i in range(I):
            sentences = []
            for m in range(m_size):
                s, alpha[b, i, m] = _np_attend(
                    p["queries"][i],
                    _np_region_embeddings(p, tokens[b, m]),
                    p["word_attention"]["key_kernel"][i],
                    p["word_attention"]["value_kernel"][i],
                    tokens[b, m] != 0,
                )
                sentences.append(s)
            primary[b, i], rho[b, i] = _np_attend(
                p["queries"][i],
                np.stack(sentences),
                p["sentence_attention"]["key_kernel"][i],
                p["sentence_attention"]["value_kernel"][i],
                (tokens[b] != 0).any(-1),
            )
    return _np_squash(primary), alpha, rho


# --- forward pass ----------------------------------------------------------------------------


def _check_common(out):
    chex.assert_shape(out.scores, (B, J))
    chex.assert_shape(out.class_capsules, (B, J, D_C))
    chex.assert_shape(out.primary_capsules, (B, I, D_P))
    chex.assert_shape(out.coupling, (B, I, J))
    chex.assert_tree_all_finite(out)
    scores = np.asarray(out.scores)
    assert np.all(scores >= 0) and np.all(scores < 1)
    np.testing.assert_allclose(scores, np.linalg.norm(out.class_capsules, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(np.sum(out.coupling, axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(out.capsule_selection, out.coupling)  # capsule_selection="coupling"


def test_short_outputs(short_run):
    _, _, out = short_run
    _check_common(out)
    chex.assert_shape(out.word_attention, (B, I, 5))
    assert out.sentence_attention is None
    alpha = np.asarray(out.word_attention)
    valid = np.broadcast_to((SHORT_TOKENS != 0)[:, None, :], alpha.shape)
    assert np.all(alpha[~valid] == 0.0)
    np.testing.assert_allclose(alpha[:2].sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(out.primary_capsules[2], 0.0)


def test_long_outputs(long_run):
    _, _, out = long_run
    _check_common(out)
    chex.assert_shape(out.word_attention, (B, I, 3, 4))
    chex.assert_shape(out.sentence_attention, (B, I, 3))
    alpha, rho = np.asarray(out.word_attention), np.asarray(out.sentence_attention)
    word_valid = np.broadcast_to((LONG_TOKENS != 0)[:, None], alpha.shape)
    assert np.all(alpha[~word_valid] == 0.0)
    sentence_valid = np.broadcast_to((LONG_TOKENS != 0).any(-1)[:, None], rho.shape)
    assert np.all(rho[~sentence_valid] == 0.0)
    np.testing.assert_allclose(rho[:2].sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(out.primary_capsules[2], 0.0)


def test_short_matches_numpy_reference(short_run):
    _, params, out = short_run
    primary, alpha = _np_short(params, SHORT_TOKENS)
    np.testing.assert_allclose(out.word_attention, alpha, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.primary_capsules, primary, rtol=1e-4, atol=1e-6)


def test_long_matches_numpy_reference(long_run):
    _, params, out = long_run
    primary, alpha, rho = _np_long(params, LONG_TOKENS)
    np.testing.assert_allclose(out.word_attention, alpha, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.sentence_attention, rho, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.primary_capsules, primary, rtol=1e-4, atol=1e-6)


def test_long_shares_queries_between_levels(long_run):
    _, params, _ = long_run
    p = params["params"]
    assert set(p) >= {"queries", "word_attention", "sentence_attention"}
    assert "queries" not in p["word_attention"] and "queries" not in p["sentence_attention"]
    chex.assert_shape(p["word_attention"]["value_kernel"], (I, 8, 6))
    chex.assert_shape(p["sentence_attention"]["key_kernel"], (I, 6, 4))
    chex.assert_shape(p["sentence_attention"]["value_kernel"], (I, 6, D_P))


# --- padding invariance ----------------------------------------------------------------------


def _assert_same_prediction(out, padded):
    for field in ("scores", "class_capsules", "primary_capsules", "coupling"):
        np.testing.assert_allclose(getattr(padded, field), getattr(out, field), rtol=1e-5, atol=1e-6, err_msg=field)


def test_short_extra_pad_columns_change_nothing(short_run):
    model, params, out = short_run
    padded = jax.jit(model.apply)(params, np.pad(SHORT_TOKENS, ((0, 0), (0, 4))))
    _assert_same_prediction(out, padded)
    np.testing.assert_allclose(padded.word_attention[..., :5], out.word_attention, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(padded.word_attention[..., 5:], 0.0)


def test_long_extra_pad_words_and_empty_sentences_change_nothing(long_run):
    model, params, out = long_run
    padded = jax.jit(model.apply)(params, np.pad(LONG_TOKENS, ((0, 0), (0, 2), (0, 3))))
    _assert_same_prediction(out, padded)
    np.testing.assert_allclose(padded.word_attention[..., :3, :4], out.word_attention, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(padded.word_attention[..., 3:, :], 0.0)
    np.testing.assert_array_equal(padded.word_attention[..., 4:], 0.0)
    np.testing.assert_allclose(padded.sentence_attention[..., :3], out.sentence_attention, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(padded.sentence_attention[..., 3:], 0.0)


# --- gradients, jit, knobs -------------------------------------------------------------------


def test_gradients_finite_including_fully_padded_example(long_run):
    # Long's path contains all of Short's (embedding, conv, a head-attention level and the
    # capsule head), plus all-PAD sentences and a fully padded example.
    model, params, _ = long_run

    def total_score(p):
        return jnp.sum(model.apply(p, LONG_TOKENS).scores)

    grads = jax.jit(jax.grad(total_score))(params)
    chex.assert_tree_all_finite(grads)
    assert np.any(grads["params"]["queries"] != 0)
    assert np.any(grads["params"]["region_conv"]["kernel"] != 0)
    # PAD's embedding row never reaches the output.
    np.testing.assert_array_equal(grads["params"]["embed"]["embedding"][0], 0.0)


def test_short_knobs_keep_contract(short_run):
    _, params, _ = short_run
    knobs = {"routing": "kmeans", "conv_activation": "relu", "attention_scale": True, "squash_primary": False}
    apply = jax.jit(ICapsNetShort(**TINY, kernel_size=5, **knobs).apply)
    out = apply(params, SHORT_TOKENS)
    _check_common(out)
    _assert_same_prediction(out, apply(params, np.pad(SHORT_TOKENS, ((0, 0), (0, 3)))))


def test_shared_transform_has_one_kernel_per_class(short_run):
    _, params, _ = short_run
    chex.assert_shape(params["params"]["class_kernel"], (J, D_C, D_P))
    chex.assert_shape(params["params"]["class_bias"], (J, D_C))


@pytest.mark.parametrize("model_class", [ICapsNetShort, ICapsNetLong])
def test_unshared_transform_routes_one_prediction_per_capsule_and_class(model_class):
    """shared_transform=False: u_hat[i, j] = W_ij pc_i + b_ij (Eq. 7), then dynamic routing."""
    model = model_class(**TINY, shared_transform=False)
    tokens = SHORT_TOKENS if model_class is ICapsNetShort else LONG_TOKENS
    params, out = _init_apply(model, tokens)
    kernel, bias = params["params"]["class_kernel"], params["params"]["class_bias"]
    chex.assert_shape(kernel, (I, J, D_C, D_P))
    chex.assert_shape(bias, (I, J, D_C))
    _check_common(out)
    # Non-zero biases, different for every (capsule, class) pair, so that the pairing is checked.
    bias = jax.random.normal(_key(3), bias.shape)
    params = {"params": {**params["params"], "class_bias": bias}}
    out = jax.jit(model.apply)(params, tokens)
    primary = np.asarray(out.primary_capsules, np.float64)
    u_hat = np.einsum("bid,ijed->bije", primary, np.asarray(kernel, np.float64)) + np.asarray(bias)
    v, c = dynamic_routing(jnp.asarray(u_hat, jnp.float32), num_iterations=3)
    np.testing.assert_allclose(out.class_capsules, v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.coupling, c, rtol=1e-5, atol=1e-6)


def test_dropout_only_in_training(short_run):
    _, params, out = short_run
    apply = jax.jit(ICapsNetShort(**TINY, kernel_size=5, embedding_dropout=0.5).apply, static_argnames="train")
    chex.assert_trees_all_close(apply(params, SHORT_TOKENS), out, rtol=1e-6, atol=1e-7)
    trained = apply(params, SHORT_TOKENS, train=True, rngs={"dropout": _key(1)})
    chex.assert_tree_all_finite(trained)
    assert not np.allclose(trained.scores[:2], out.scores[:2])


def test_bfloat16_activations_track_float32(long_run):
    _, params, out = long_run
    low = jax.jit(ICapsNetLong(sentence_dim=6, dtype=jnp.bfloat16, **TINY).apply)(params, LONG_TOKENS)
    assert low.scores.dtype == jnp.bfloat16
    chex.assert_tree_all_finite(low)
    np.testing.assert_allclose(np.asarray(low.word_attention, np.float32), out.word_attention, rtol=0.05, atol=0.02)


@pytest.mark.parametrize("kernel_size", [2, 4, 0])
def test_even_kernel_size_is_rejected(kernel_size):
    with pytest.raises(ValueError, match="kernel_size must be a positive odd integer"):
        ICapsNetShort(**TINY, kernel_size=kernel_size)


def test_unknown_knob_values_are_rejected():
    with pytest.raises(ValueError, match="routing"):
        ICapsNetLong(**TINY, routing="em")
    with pytest.raises(ValueError, match="conv_activation"):
        ICapsNetShort(**TINY, conv_activation="gelu")


@pytest.mark.parametrize("routing, similarity, expected", [
    ("dynamic", "cosine", "cosine"), ("kmeans", "paper", "cosine"), ("kmeans", "dot", "dot")])
def test_routing_similarity_reaches_the_routing(routing, similarity, expected):
    """The agreement the model routes with is the op's `similarity` ("paper": each routing's own)."""
    model = ICapsNetShort(**TINY, routing=routing, routing_similarity=similarity)
    params, out = _init_apply(model, SHORT_TOKENS)
    u_hat = shared_prediction_vectors(out.primary_capsules, params["params"]["class_kernel"],
                                      bias=params["params"]["class_bias"])
    op = dynamic_routing if routing == "dynamic" else kmeans_routing
    _, coupling = op(u_hat, num_iterations=3, similarity=expected)
    np.testing.assert_allclose(out.coupling, coupling, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="routing_similarity"):
        ICapsNetShort(**TINY, routing_similarity="euclidean")


def test_contribution_selection_splits_each_class_capsule():
    """capsule_selection="contribution": the selection is `routing_contributions` of the model's
    own prediction vectors and coupling, summing over the capsules to |s_j| (|v_j| = squash)."""
    model = ICapsNetShort(**TINY, capsule_selection="contribution")
    params, out = _init_apply(model, SHORT_TOKENS)
    u_hat = shared_prediction_vectors(out.primary_capsules, params["params"]["class_kernel"],
                                      bias=params["params"]["class_bias"])
    np.testing.assert_allclose(out.capsule_selection, routing_contributions(u_hat, out.coupling), rtol=1e-5, atol=1e-7)
    length = np.asarray(out.scores)
    np.testing.assert_allclose(
        np.sum(out.capsule_selection, axis=1), np.sqrt(length / (1 - length)), rtol=1e-3, atol=1e-6
    )
    with pytest.raises(ValueError, match="capsule_selection"):
        ICapsNetShort(**TINY, capsule_selection="length")
