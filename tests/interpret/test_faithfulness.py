"""Faithfulness metrics against hand-computed values on a 5-token example; the same numbers from
vectors with a side input, and one-line errors for bad arguments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.attribution._faithfulness import bootstrap_interval, faithfulness, ranks

# Token id -> its additive share of p(class 0); PAD (0) and UNK (1) add nothing / 0.07.
SHARE = np.zeros(20, np.float32)
SHARE[[1, 11, 12, 13, 14, 15, 16, 17]] = [0.07, 0.1, 0.3, 0.05, 0.2, 0.15, 0.4, 0.35]
TOKENS = jnp.asarray([[11, 12, 13, 14, 15, 0, 0], [16, 17, 0, 0, 0, 0, 0]], jnp.int32)
MASK = TOKENS > 0
# Ranking of example 0: 12 (0.3), 14 (0.2), 11 (0.1), 15 (0.15), 13 (0.05).
SCORES = jnp.asarray([[0.5, 0.9, 0.1, 0.7, 0.3, 5.0, 5.0], [0.2, 0.1, 9, 9, 9, 9, 9]], jnp.float32)


def additive(tokens):
    p = jnp.sum(jnp.asarray(SHARE)[tokens], axis=-1)
    return jnp.stack([p, 1 - p], axis=-1)


def test_hand_computed_aopc_and_curves_with_pad_removal():
    result = jax.jit(lambda s: faithfulness(additive, TOKENS, 0, s, mask=MASK, probabilities=None))(SCORES)
    # k = 1, 5, 10, 20 % of 5 tokens remove 1 token (12), 50 % removes 3 (12, 14, 11).
    # Comprehensiveness: (4 * (0.8 - 0.5) + (0.8 - 0.2)) / 5; sufficiency: (4 * (0.8 - 0.3) + (0.8 - 0.6)) / 5.
    np.testing.assert_allclose(result["comprehensiveness"][0], 0.36, atol=1e-6)
    np.testing.assert_allclose(result["sufficiency"][0], 0.44, atol=1e-6)
    # f = 0, .1, ..., 1 removes 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5 tokens:
    # deletion 0.8 .5 .5 .3 .3 .2 .2 .05 .05 0 0, insertion 0 .3 .3 .5 .5 .6 .6 .75 .75 .8 .8.
    np.testing.assert_allclose(result["deletion_auc"][0], (2.9 - 0.4) / 10, atol=1e-6)
    np.testing.assert_allclose(result["insertion_auc"][0], (5.9 - 0.4) / 10, atol=1e-6)
    np.testing.assert_allclose(result["probability"], [0.8, 0.75], atol=1e-6)
    # Example 1: 2 tokens; every k removes ceil(k * 2) = 1 token, the top one (16, 0.4).
    np.testing.assert_allclose(result["comprehensiveness"][1], 0.4, atol=1e-6)
    np.testing.assert_allclose(result["sufficiency"][1], 0.35, atol=1e-6)


def test_a_ranking_with_nan_at_a_real_position_has_nan_metrics():
    # Example 0's NaN is at a real position; example 1's in its padding, which is never ranked.
    scores = SCORES.at[0, 2].set(jnp.nan).at[1, 4].set(jnp.nan)
    result = faithfulness(additive, TOKENS, 0, scores, mask=MASK, probabilities=None)
    clean = faithfulness(additive, TOKENS, 0, SCORES, mask=MASK, probabilities=None)
    for name in ("comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc"):
        assert np.isnan(result[name][0]), name
        np.testing.assert_allclose(result[name][1], clean[name][1], atol=1e-7, err_msg=name)
    np.testing.assert_allclose(result["probability"], clean["probability"])


def test_unk_replacement_keeps_the_position():
    result = faithfulness(additive, TOKENS, 0, SCORES, mask=MASK, baseline=1, probabilities=None)
    # Each removed token becomes UNK (0.07): 4 * (0.3 - 0.07) + (0.6 - 3 * 0.07), over 5.
    np.testing.assert_allclose(result["comprehensiveness"][0], (4 * 0.23 + 0.39) / 5, atol=1e-6)


def test_padding_is_never_removed_or_kept_out():
    def counts_padding(tokens):
        p = jnp.mean(tokens == 0, axis=-1)
        return jnp.stack([p, 1 - p], axis=-1)

    result = faithfulness(counts_padding, TOKENS, 0, SCORES, mask=MASK, baseline=1, probabilities=None)
    for key in ("comprehensiveness", "sufficiency"):
        np.testing.assert_allclose(result[key], 0, atol=1e-6)
    for key in ("deletion_auc", "insertion_auc"):
        np.testing.assert_allclose(result[key], result["probability"], atol=1e-6)


def test_ranks_put_padding_last_and_break_ties_by_position():
    rank = ranks(jnp.asarray([[1.0, 3.0, 3.0, 7.0]]), jnp.asarray([[True, True, True, False]]))
    np.testing.assert_array_equal(rank, [[2, 0, 1, 3]])


def test_variant_batches_give_the_same_result():
    whole = faithfulness(additive, TOKENS, 0, SCORES, mask=MASK, probabilities=None)
    chunked = faithfulness(additive, TOKENS, 0, SCORES, mask=MASK, probabilities=None, max_rows=8)  # 4 copies a call
    for key in whole:
        np.testing.assert_allclose(chunked[key], whole[key], atol=1e-6)


def test_bootstrap_interval_holds_the_mean():
    values = np.random.default_rng(0).normal(loc=2.0, size=400)
    low, high = bootstrap_interval(values)
    assert low < values.mean() < high and high - low < 0.4
    assert bootstrap_interval(np.ones(5)) == pytest.approx([1.0, 1.0])


def test_a_model_that_reads_one_token_id_is_explained_by_that_token():
    """p(class 0) = sigmoid(10 (e_7 . w) - 5) over the positions holding token id 7: about 0.993
    with the token, 0.007 without. Every gradient method ranks it first, and removing it (every k
    removes at least one token) takes almost the whole probability away."""
    from jcaps.attribution import methods

    table = jnp.asarray(np.random.default_rng(1).normal(size=(20, 4)), jnp.float32)
    w = jnp.ones(4, jnp.float32)
    table = table.at[7].set(w / 4)  # e_7 . w = 1
    tokens = jnp.asarray([[3, 9, 7, 12, 5, 0], [7, 4, 11, 0, 0, 0]], jnp.int32)
    mask = tokens > 0

    def logits(e, ids):
        reads = (ids == 7)[..., None].astype(e.dtype) * e
        z = 10 * jnp.einsum("btd,d->b", reads, w) - 5
        return jnp.stack([z, -z], axis=-1) / 2  # softmax of (z/2, -z/2) = (sigmoid(z), 1 - sigmoid(z))

    def probabilities(ids):
        return jax.nn.softmax(logits(table[ids], ids), axis=-1)

    embeddings = table[tokens]
    for method in ("gradient", "gradient_x_input", "integrated_gradients", "occlusion"):
        options = {"n_steps": 50} if method == "integrated_gradients" else {}
        scores = getattr(methods, method)(logits, embeddings, 0, mask=mask, args=(tokens,), **options)
        np.testing.assert_array_equal(np.argmax(np.abs(scores), axis=1), [2, 0], err_msg=method)
        result = faithfulness(probabilities, tokens, 0, scores, mask=mask, probabilities=None)
        np.testing.assert_allclose(result["probability"], 0.9933, atol=1e-3)
        np.testing.assert_allclose(result["comprehensiveness"], result["probability"] - 0.0067, atol=1e-3)


def test_vectors_with_a_side_input_give_the_token_numbers():
    """The additive model read from vectors [B, T, 2] (a token's share and a constant), with the
    token ids as f's side input (never tiled: each erased copy is a batch of B), its logits turned
    into probabilities by the default softmax: the hand-computed numbers of the token test."""
    vectors = jnp.stack([jnp.asarray(SHARE)[TOKENS], jnp.ones(TOKENS.shape)], axis=-1)

    def logits(e, tokens):
        assert tokens.shape == TOKENS.shape
        p = jnp.sum(jnp.where(tokens > 0, e[..., 0], 0.0), axis=-1)
        return jnp.log(jnp.stack([p, 1 - p], axis=-1) + 1e-30)

    result = faithfulness(logits, vectors, 0, SCORES, mask=MASK, args=(TOKENS,))
    expected = faithfulness(additive, TOKENS, 0, SCORES, mask=MASK, probabilities=None)
    for key in expected:
        np.testing.assert_allclose(result[key], expected[key], atol=1e-6)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"f": "not a model"}, r"^f: expected the model"),
        ({"target": jnp.zeros((2, 1, 1), jnp.int32)}, r"^target: expected an int, or int \[B\] or \[B, K\] with B = 2"),
        ({"target": jnp.zeros((2, 1), jnp.int32)}, r"^scores: expected \[B, K, T\] = \[2, 1, 7\]"),
        ({"target": 0.5}, r"^target: expected an int"),
        ({"mask": MASK[..., None]}, r"^mask: expected bool \[B, T\] = \[2, 7\]"),
        ({"mask": MASK.astype(jnp.int32)}, r"^mask: expected bool"),
        ({"scores": SCORES[:, :3]}, r"^scores: expected \[B, T\] = \[2, 7\]"),
        ({"args": (TOKENS[:1],)}, r"^args\[0\]: expected a leading axis of B = 2"),
        ({"baseline": jnp.zeros(3)}, r"^baseline: expected a shape broadcastable"),
        ({"max_rows": 2.5}, r"^max_rows: expected an int >= 1"),
    ],
)
def test_bad_arguments_get_one_line_naming_them(change, message):
    call = {"f": additive, "x": TOKENS, "target": 0, "scores": SCORES, "mask": MASK, "probabilities": None} | change
    with pytest.raises((ValueError, TypeError), match=message) as raised:
        faithfulness(call.pop("f"), call.pop("x"), call.pop("target"), call.pop("scores"), **call)
    assert "\n" not in str(raised.value)
