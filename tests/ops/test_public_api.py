"""Every op of `jcaps.ops.__all__` runs on one example (no batch axis), on a batch and under
`jax.vmap` over that batch, with the same result per example each way.

Each case builds an op with its parameters closed over and the arguments of a few examples,
one example's arrays without a batch axis (sequences [T, ...], masks [T]); where the op's call
on a batch is another function (the decoders) or has no per-example equivalent, the case
gives it as a third element, or None. A new public op needs a case here:
`test_every_public_op_has_a_case` fails until it has one.
"""

import inspect
import subprocess
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcaps.ops as ops

BATCH = 3
T, F, H = 6, 4, 5
# Public functions that do not compute on arrays: nothing to batch.
NOT_ARRAY_OPS = {"num_codewords", "receptive_field"}


def _normal(rng, *shape):
    return rng.normal(size=shape).astype(np.float32)


def _scaled(scale, x):
    """scale * x in x's dtype: NumPy may promote a bfloat16 array times a Python float to float32
    (tests/ops/test_mixed_precision.py builds these cases in bfloat16)."""
    return (scale * x).astype(x.dtype)


def _masks(rng, steps=T):
    """BATCH masks [T]: a full one, a shorter one and one of random length >= 1."""
    lengths = [steps, steps // 2, int(rng.integers(1, steps + 1))]
    return [np.arange(steps) < length for length in lengths]


def _per_example(rng, make_example):
    """BATCH argument tuples, example i from `make_example(rng, mask_i)`."""
    return [make_example(rng, mask) for mask in _masks(rng)]


# --- cases: name -> rng -> (op, [one example's arguments] * BATCH) ----------------------------


def _masked_softmax(rng):
    return (
        lambda logits, mask: ops.masked_softmax(logits, mask=mask),
        _per_example(rng, lambda rng, mask: (_normal(rng, T), mask)),
    )


def _head_query_attention(rng):
    heads, d_q, d_v = 3, 2, 4
    params = ops.HeadQueryAttentionParams(
        _normal(rng, heads, d_q), _normal(rng, heads, F, d_q), _normal(rng, heads, F, d_v)
    )

    def op(inputs, mask):
        return ops.head_query_attention(inputs, params, mask=mask)

    return op, _per_example(rng, lambda rng, mask: (_normal(rng, T, F), mask))


def _head_query_attention_per_head(rng):
    """The hierarchical form: head i reads its own row of inputs [I, M, d_in]."""
    heads, d_q, d_v = 3, 2, 4
    params = ops.HeadQueryAttentionParams(
        _normal(rng, heads, d_q), _normal(rng, heads, F, d_q), _normal(rng, heads, F, d_v)
    )

    def op(inputs, mask):
        return ops.head_query_attention(inputs, params, mask=mask)

    return op, _per_example(rng, lambda rng, mask: (_normal(rng, heads, T, F), mask))


def _causal_pool(pool):
    def case(rng):
        return (
            lambda scores, inputs, mask: pool(scores, inputs, mask=mask),
            _per_example(rng, lambda rng, mask: (_normal(rng, T, 2), _normal(rng, T, F), mask)),
        )

    return case


def _structured_self_attention(rng):
    w1, w2 = _normal(rng, F, 3), _normal(rng, 3, 2)
    return (
        lambda hidden, mask: ops.structured_self_attention(hidden, w1, w2, mask=mask),
        _per_example(rng, lambda rng, mask: (_normal(rng, T, F), mask)),
    )


def _simplified_attention(rng):
    kernel, bias = _normal(rng, 2, F // 2, F // 2), _normal(rng, 2, F // 2)
    return (
        lambda x, mask: ops.simplified_attention(x, kernel, bias=bias, mask=mask, groups=2, axis="time"),
        _per_example(rng, lambda rng, mask: (_normal(rng, T, F), mask)),
    )


def _local_attention(rng):
    kernel, bias = _normal(rng, 2, 3, F // 2, F // 2), _normal(rng, 2, F // 2)
    return (
        lambda x, mask: ops.local_attention(x, kernel, bias=bias, mask=mask, groups=2),
        _per_example(rng, lambda rng, mask: (_normal(rng, T, F), mask)),
    )


def _dot_product_attention(rng):
    params = ops.DotProductAttentionParams(*[_normal(rng, F, 4) for _ in range(3)], output_kernel=_normal(rng, 4, 3))
    return (
        lambda x, mask: ops.dot_product_attention(x, params, mask=mask, num_heads=2),
        _per_example(rng, lambda rng, mask: (_normal(rng, T, F), mask)),
    )


def _additive_attention(rng):
    params = ops.AdditiveAttentionParams(query_kernel=_normal(rng, 3, 2), score_vector=_normal(rng, 2))

    def example(rng, mask):
        return _normal(rng, 3), _normal(rng, T, F), _normal(rng, T, 2), mask

    def op(query, keys, projected_keys, mask):
        return ops.additive_attention(query, keys, projected_keys, params, mask=mask)

    return op, _per_example(rng, example)


def _capsule_vectors(op):
    def case(rng):
        return op, [(_normal(rng, 5, 4),) for _ in range(BATCH)]

    return case


def _prediction_vectors(op, weight_shape):
    def case(rng):
        weight, bias = _normal(rng, *weight_shape), _normal(rng, *weight_shape[:-1])
        return lambda u: op(u, weight, bias=bias), [(_normal(rng, 5, 4),) for _ in range(BATCH)]

    return case


def _routing(route):
    def case(rng):
        def example(rng, mask):
            return _normal(rng, T, 3, 4), mask

        return lambda u_hat, mask: route(u_hat, num_iterations=3, mask=mask), _per_example(rng, example)

    return case


def _routing_contributions(rng):
    def example(rng, mask):
        u_hat = _normal(rng, T, 3, 4)
        return u_hat, ops.dynamic_routing(u_hat, num_iterations=3, mask=mask)[1]

    return ops.routing_contributions, _per_example(rng, example)


def _causal_conv1d(rng):
    kernel, bias = _normal(rng, 3, F, 2), _normal(rng, 2)
    return lambda x: ops.causal_conv1d(x, kernel, bias=bias, dilation=2), [(_normal(rng, T, F),) for _ in range(BATCH)]


def _pointwise_conv(rng):
    kernel, bias = _normal(rng, F, 2), _normal(rng, 2)
    return lambda x: ops.pointwise_conv(x, kernel, bias=bias), [(_normal(rng, T, F),) for _ in range(BATCH)]


def _residual_layer_arrays(rng):
    return {
        "conv_kernel": _normal(rng, 2, F, 2 * F),
        "conv_bias": _normal(rng, 2 * F),
        "projection_kernel": _normal(rng, F, F),
        "projection_bias": _normal(rng, F),
    }


def _residual_layer(rng):
    layer = _residual_layer_arrays(rng)
    return (
        lambda x: ops.residual_layer(x, **layer, dilation=2, activation="gated"),
        [(_normal(rng, T, F),) for _ in range(BATCH)],
    )


def _dilated_residual_stack(rng):
    layers = [_residual_layer_arrays(rng) for _ in range(2)]
    return (
        lambda x: ops.dilated_residual_stack(x, layers, dilations=[1, 2], activation="gated"),
        [(_normal(rng, T, F),) for _ in range(BATCH)],
    )


def _embedding(embed, **kwargs):
    def case(rng):
        code_logits, codebooks = _normal(rng, 10, 2, 3), _normal(rng, 2, 3, 4)
        return (
            lambda ids: embed(ids, code_logits, codebooks, **kwargs),
            [(rng.integers(0, 10, size=T),) for _ in range(BATCH)],
        )

    return case


def _cc_embedding_training(rng):
    """The Gumbel noise of one key has the shape of the ids: each example draws the same noise
    unbatched and under vmap, and the batched call other noise, so it has no batched check."""
    return *_embedding(ops.cc_embedding, rng=jax.random.key(0))(rng), None


def _dropout(rng):
    """Each example with its own key (as raw key data, which stacks): under vmap each example
    draws the mask its unbatched call draws. One key for a batch draws one mask of the batch's
    shape, so there is no batched check."""

    def op(x, key_data):
        return ops.dropout(x, rate=0.5, key=jax.random.wrap_key_data(key_data))

    keys = [np.asarray(jax.random.key_data(jax.random.key(i))) for i in range(BATCH)]
    return op, [(_normal(rng, T, F), key) for key in keys], None


def _class_loss(loss):
    def case(rng):
        return loss, [(_normal(rng, 4), np.int32(rng.integers(0, 4))) for _ in range(BATCH)]

    return case


def _sigmoid_binary_cross_entropy(rng):
    return ops.sigmoid_binary_cross_entropy, [(_normal(rng, 4), rng.integers(0, 2, size=4)) for _ in range(BATCH)]


def _sequence_cross_entropy(rng):
    def example(rng, mask):
        return _normal(rng, T, 7), np.where(mask, rng.integers(1, 7, size=T), 0)

    return ops.sequence_cross_entropy, _per_example(rng, example)


def _recurrent(scan, num_gates):
    """A one-direction scan over precomputed input gates [T, G H]."""

    def case(rng):
        weights_rng = np.random.default_rng(1)
        kernel, bias = _scaled(0.5, _normal(weights_rng, H, num_gates * H)), _scaled(0.5, _normal(weights_rng, num_gates * H))
        examples = _per_example(rng, lambda rng, mask: (_normal(rng, T, num_gates * H), mask))
        return (lambda gates, mask: scan(gates, kernel, bias, mask=mask)), examples

    return case


def _bidirectional(layer, num_gates):
    """A two-direction layer over inputs [T, F]."""
    shapes = [(2, F, num_gates * H), (2, num_gates * H), (2, H, num_gates * H), (2, num_gates * H)]

    def case(rng):
        weights_rng = np.random.default_rng(1)
        weights = [_scaled(0.5, _normal(weights_rng, *shape)) for shape in shapes]
        examples = _per_example(rng, lambda rng, mask: (_normal(rng, T, F), mask))
        return (lambda x, mask: layer(x, *weights, mask=mask)), examples

    return case


def _lstm_cell(rng):
    kernel, bias = _normal(rng, H, 4 * H), _normal(rng, 4 * H)
    examples = [(_normal(rng, 4 * H), _normal(rng, H), _normal(rng, H)) for _ in range(BATCH)]
    return (lambda gates, h, c: ops.lstm_cell(gates, h, c, kernel, bias)), examples


def _over_time(op, *state_shape):
    def case(rng):
        return (
            lambda states, mask: op(states, mask=mask),
            _per_example(rng, lambda rng, mask: (_normal(rng, T, *state_shape), mask)),
        )

    return case


def _label_mask_logits(rng):
    def op(logits, emitted):
        return ops.label_mask_logits(logits, emitted, eos_id=3, num_special=4)

    return op, [(_normal(rng, 9), rng.random(9) < 0.5) for _ in range(BATCH)]


def _emitted_to_multi_hot(rng):
    examples = [(rng.random(9) < 0.5,) for _ in range(BATCH)]
    return (lambda emitted: ops.emitted_to_multi_hot(emitted, num_special=4)), examples


def _mark_emitted(rng):
    def op(emitted, token):
        return ops.mark_emitted(emitted, token, num_special=4)

    return op, [(rng.random(9) < 0.5, rng.integers(0, 9)) for _ in range(BATCH)]


def _decoder(decode, **options):
    """Decoding from a state [D] per example. The decoders take rows (their step function reads
    a batch of rows), so the one-example op decodes a batch of one row, and the batch call is the
    decoder itself on states [B, D]."""

    def case(rng):
        num_tokens, dim = 7, 3
        kernel, embedding = _normal(rng, dim, num_tokens), _normal(rng, num_tokens, dim)
        probs_kernel = _normal(rng, num_tokens, num_tokens)

        def step_fn(state, previous_token, previous_probs):
            # The decoders feed back float32 probabilities; the step computes in its weights' dtype.
            previous_probs = previous_probs.astype(kernel.dtype)
            return state @ kernel + previous_probs @ probs_kernel, jnp.tanh(state + previous_probs @ embedding)

        def batch_op(states):
            ids = {"pad_id": 0, "bos_id": 2, "eos_id": 3, "num_special": 4}
            return decode(step_fn, states, num_tokens=num_tokens, max_steps=4, **ids, **options)

        def op(state):
            return jax.tree.map(lambda rows: rows[0], batch_op(state[None]))

        return op, [(_normal(rng, dim),) for _ in range(BATCH)], batch_op

    return case


# Case ids: the op's name in `jcaps.ops`, then "[variant]" where an op has several cases.
CASES: dict[str, Callable] = {
    "masked_softmax": _masked_softmax,
    "head_query_attention": _head_query_attention,
    "head_query_attention[per_head]": _head_query_attention_per_head,
    "causal_softmax_pool": _causal_pool(ops.causal_softmax_pool),
    "causal_softmax_pool_quadratic": _causal_pool(ops.causal_softmax_pool_quadratic),
    "structured_self_attention": _structured_self_attention,
    "simplified_attention": _simplified_attention,
    "local_attention": _local_attention,
    "dot_product_attention": _dot_product_attention,
    "additive_attention": _additive_attention,
    "squash": _capsule_vectors(ops.squash),
    "capsule_length": _capsule_vectors(ops.capsule_length),
    "shared_prediction_vectors": _prediction_vectors(ops.shared_prediction_vectors, (3, 2, 4)),
    "unshared_prediction_vectors": _prediction_vectors(ops.unshared_prediction_vectors, (5, 3, 2, 4)),
    "dynamic_routing": _routing(ops.dynamic_routing),
    "routing_contributions": _routing_contributions,
    "kmeans_routing": _routing(ops.kmeans_routing),
    "causal_conv1d": _causal_conv1d,
    "pointwise_conv": _pointwise_conv,
    "residual_layer": _residual_layer,
    "dilated_residual_stack": _dilated_residual_stack,
    "dropout": _dropout,
    "cwc_embedding": _embedding(ops.cwc_embedding),
    "cc_embedding": _embedding(ops.cc_embedding),
    "cc_embedding[training]": _cc_embedding_training,
    "margin_loss": _class_loss(ops.margin_loss),
    "focal_loss": _class_loss(ops.focal_loss),
    "cross_entropy": _class_loss(ops.cross_entropy),
    "sigmoid_binary_cross_entropy": _sigmoid_binary_cross_entropy,
    "sequence_cross_entropy": _sequence_cross_entropy,
    "gru_scan": _recurrent(ops.gru_scan, 3),
    "lstm_scan": _recurrent(ops.lstm_scan, 4),
    "bidirectional_gru": _bidirectional(ops.bidirectional_gru, 3),
    "bidirectional_lstm": _bidirectional(ops.bidirectional_lstm, 4),
    "lstm_cell": _lstm_cell,
    "last_valid_state": _over_time(ops.last_valid_state, H),
    "bidirectional_final_state": _over_time(ops.bidirectional_final_state, 2, H),
    "masked_mean_over_time": _over_time(ops.masked_mean_over_time, H),
    "masked_max_over_time": _over_time(ops.masked_max_over_time, H),
    "label_mask_logits": _label_mask_logits,
    "emitted_to_multi_hot": _emitted_to_multi_hot,
    "mark_emitted": _mark_emitted,
    "greedy_decode": _decoder(ops.greedy_decode),
    "beam_search": _decoder(ops.beam_search, beam_size=2),
}


def _stack(examples):
    return jax.tree.map(lambda *leaves: np.stack(leaves), *examples)


def _assert_trees_close(actual, expected, what):
    leaves = jax.tree.leaves(actual)
    assert len(leaves) == len(jax.tree.leaves(expected)), what
    for got, want in zip(leaves, jax.tree.leaves(expected)):
        assert got.shape == np.shape(want), f"{what}: shape {got.shape}, expected {np.shape(want)}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=what)


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_runs_unbatched_batched_and_under_vmap(case):
    op, examples, *batch_call = CASES[case](np.random.default_rng(0))
    batch_op = batch_call[0] if batch_call else op
    # Jitted throughout: eager dispatch of the unrolled routing loops alone takes seconds.
    expected = _stack([jax.jit(op)(*example) for example in examples])
    batch = _stack(examples)
    _assert_trees_close(jax.jit(jax.vmap(op))(*batch), expected, f"{case} under vmap")
    if batch_op is not None:
        _assert_trees_close(jax.jit(batch_op)(*batch), expected, f"{case} on a batch")


def test_every_public_op_has_a_case():
    cased = {case.split("[")[0] for case in CASES}
    array_ops = {name for name in ops.__all__ if inspect.isfunction(getattr(ops, name)) and name not in NOT_ARRAY_OPS}
    assert not array_ops - cased, f"public ops without a case in {__file__}: {sorted(array_ops - cased)}"
    assert not cased - set(ops.__all__), f"cases of names not in jcaps.ops.__all__: {sorted(cased - set(ops.__all__))}"


# Options wherever they appear: keyword-only in every op.
OPTION_NAMES = {
    "activation", "alpha", "axis", "beam_size", "bias", "dilation", "dilations", "eps", "gamma", "groups", "key",
    "lam", "m_minus", "m_plus", "mask", "num_heads", "num_iterations", "num_samples", "pad_id", "rate", "rng",
    "sampling", "scale", "similarity", "temperature",
}
ARRAY_OPS = [name for name in ops.__all__ if inspect.isfunction(getattr(ops, name)) and name not in NOT_ARRAY_OPS]


@pytest.mark.parametrize("name", ARRAY_OPS)
def test_options_are_keyword_only(name):
    """Arrays first, options after `*`: a positional parameter has no default and is none of
    the options (a mask, an axis, an optional bias...). `receptive_field` computes on its
    dilations, so NOT_ARRAY_OPS are left out."""
    positional = [
        parameter
        for parameter in inspect.signature(getattr(ops, name)).parameters.values()
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    with_default = [parameter.name for parameter in positional if parameter.default is not inspect.Parameter.empty]
    assert not with_default, f"jcaps.ops.{name}: positional parameters with a default {with_default}"
    options = [parameter.name for parameter in positional if parameter.name in OPTION_NAMES]
    assert not options, f"jcaps.ops.{name}: options {options} are positional"


def test_all_names_exist():
    assert len(set(ops.__all__)) == len(ops.__all__)
    for name in ops.__all__:
        assert hasattr(ops, name), name


@pytest.mark.slow
def test_import_loads_jax_only():
    """`import jcaps.ops` imports neither Flax nor Optax nor any jcaps package but itself and
    `jcaps.choices` (which imports nothing)."""
    code = (
        "import sys, jcaps.ops; "
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('flax', 'optax') "
        "or (m.startswith('jcaps.') and not m.startswith(('jcaps.ops', 'jcaps.choices')))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert not loaded, f"import jcaps.ops loaded {loaded}"
