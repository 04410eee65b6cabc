"""Every public op in bfloat16 tracks its float32 result, and the normalisations (softmaxes,
norms, squash, routing, losses) compute in float32 whatever their inputs' dtype.

The cases are those of `test_public_api`, built twice from the same random values: once with
every array (inputs and closed-over weights) in bfloat16, once with those same bfloat16 values
in float32. The difference is then the computation's alone, not the rounding of the inputs.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcaps.ops as ops
from tests.ops import test_public_api as public_api

# Ops whose float outputs are float32 whatever their inputs: the losses, the decoders' sequence
# log-probabilities, and a multi-hot made from booleans. Every other op keeps its inputs' dtype.
FLOAT32_OUTPUTS = {"margin_loss", "focal_loss", "cross_entropy", "sigmoid_binary_cross_entropy",
                   "sequence_cross_entropy", "greedy_decode", "beam_search", "emitted_to_multi_hot"}
# Relative L2 error of a bfloat16 output to the float32 one: bfloat16 keeps 8 significant bits
# (a rounding error of 2^-9 = 0.2 % per value); an op that normalised in bfloat16, or whose
# recurrence lost its state, misses this by an order of magnitude.
RELATIVE_TOLERANCE = 0.02


def _build(case, dtype, monkeypatch):
    def normal(rng, *shape):
        return rng.normal(size=shape).astype(jnp.bfloat16).astype(dtype)

    monkeypatch.setattr(public_api, "_normal", normal)
    return public_api.CASES[case](np.random.default_rng(0))


def _float_leaves(tree):
    return [leaf for leaf in jax.tree.leaves(tree) if jnp.issubdtype(leaf.dtype, jnp.floating)]


@pytest.mark.parametrize("case", sorted(public_api.CASES))
def test_bfloat16_op_tracks_float32(case, monkeypatch):
    low_op, low_examples, *_ = _build(case, jnp.bfloat16, monkeypatch)
    high_op, high_examples, *_ = _build(case, np.float32, monkeypatch)
    low = [jax.jit(low_op)(*example) for example in low_examples]
    high = [jax.jit(high_op)(*example) for example in high_examples]
    expected_dtype = jnp.float32 if case.split("[")[0] in FLOAT32_OUTPUTS else jnp.bfloat16
    for example, (got, want) in enumerate(zip(low, high)):
        # Integer outputs (decoded tokens, masks) are the same: bf16 changes no decision here.
        for got_leaf, want_leaf in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            if not jnp.issubdtype(want_leaf.dtype, jnp.floating):
                np.testing.assert_array_equal(got_leaf, want_leaf, err_msg=f"{case}, example {example}")
        for got_leaf, want_leaf in zip(_float_leaves(got), _float_leaves(want)):
            assert got_leaf.dtype == expected_dtype, f"{case}: output {got_leaf.dtype}, expected {expected_dtype}"
            got_leaf, want_leaf = np.asarray(got_leaf, np.float32), np.asarray(want_leaf, np.float32)
            scale = max(float(np.linalg.norm(want_leaf)), 1e-6)
            error = float(np.linalg.norm(got_leaf - want_leaf)) / scale
            assert error <= RELATIVE_TOLERANCE, f"{case}, example {example}: relative error {error:.4f}"


def test_masked_softmax_normalises_bfloat16_in_float32():
    # Softmax over 4,096 equal logits: each weight 2^-12, exactly representable; a bfloat16
    # running sum of 4,096 ones stalls at 256 (its spacing there is 2), so the bfloat16 sum
    # would give weights 16 times too large.
    logits = jnp.zeros(4096, jnp.bfloat16)
    weights = ops.masked_softmax(logits, mask=jnp.ones(4096, bool))
    assert weights.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(weights, np.float32), 2.0**-12, rtol=1e-3)
    assert float(jnp.sum(weights.astype(jnp.float32))) == pytest.approx(1.0, rel=1e-3)


def test_causal_pool_carries_float32_over_long_bfloat16_sequences():
    # The mean of x_j = 1 + j / T over every prefix of T = 2,048 equal-score steps: a bfloat16
    # running total Z stops growing at 256, which pools only the first few hundred steps.
    steps = 2048
    x = (1 + np.arange(steps) / steps).astype(np.float32)[:, None]
    pooled = ops.causal_softmax_pool(jnp.zeros((steps, 1), jnp.bfloat16), jnp.asarray(x, jnp.bfloat16))
    assert pooled.dtype == jnp.bfloat16
    expected = np.cumsum(np.asarray(jnp.asarray(x, jnp.bfloat16), np.float32)) / np.arange(1, steps + 1)
    np.testing.assert_allclose(np.asarray(pooled[:, 0], np.float32), expected, rtol=1e-2)


@pytest.mark.parametrize("loss", [ops.cross_entropy, ops.focal_loss, ops.margin_loss])
def test_losses_of_bfloat16_scores_are_float32(loss):
    scores = jnp.asarray([[0.3, 0.9, 0.1, 0.2]], jnp.bfloat16)
    value = loss(scores, jnp.asarray([1]))
    assert value.dtype == jnp.float32
    np.testing.assert_allclose(value, loss(scores.astype(jnp.float32), jnp.asarray([1])), rtol=1e-6)
