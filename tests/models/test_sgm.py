"""SGM and its binary-relevance baseline: shapes, the sequence loss against NumPy and its
padding, teacher forcing against greedy decoding (same step, same distributions), predictions
without repeated labels, the global embedding, padding invariance, configuration errors.

Parameters are drawn with NumPy into the shapes `init` gives (`jax.eval_shape`): compiling
the random initialisers would take longer than the tests. Every jitted function is built once
per module and shared, as compilation dominates the run time."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.data.vocab import BOS, EOS, NUM_SPECIAL, PAD
from jcaps.models.sgm import SGM, BinaryRelevance
from jcaps.ops.losses import sequence_cross_entropy

B, L, J, VOCAB = 3, 7, 6, 30
MAX_STEPS = S = 8  # the targets' length is the decoders' so decoded sequences can be fed back
V = J + NUM_SPECIAL
LENGTHS = np.array([7, 4, 1])
SMALL = {"embed_dim": 8, "encoder_dim": 8, "decoder_dim": 8, "max_steps": MAX_STEPS, "beam_size": 3}
GE_NAMES = {"ge_w1_kernel", "ge_w1_bias", "ge_w2_kernel"}
_sequence_cross_entropy = jax.jit(sequence_cross_entropy)


def _model(**overrides):
    return SGM(VOCAB, J, BOS, EOS, NUM_SPECIAL, **{**SMALL, **overrides})


def _random_params(shapes, seed):
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for kernels, U(-0.3, 0.3) for vectors, N(0, 1) for
    embedding tables, in the shapes of `shapes`."""
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        if "embedding" in jax.tree_util.keystr(path):
            return jnp.asarray(rng.normal(size=leaf.shape), leaf.dtype)
        bound = leaf.shape[-2] ** -0.5 if len(leaf.shape) >= 2 else 0.3
        return jnp.asarray(rng.uniform(-bound, bound, size=leaf.shape), leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, shapes)


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, size=(B, L)).astype(np.int32)
    tokens[np.arange(L)[None, :] >= LENGTHS[:, None]] = PAD
    labels = np.array(
        [
            [4, 7, 5, EOS, PAD, PAD, PAD, PAD],
            [9, EOS, PAD, PAD, PAD, PAD, PAD, PAD],
            [6, 8, 4, 5, EOS, PAD, PAD, PAD],
        ],
        np.int32,
    )
    return tokens, labels


@pytest.fixture(scope="module")
def params(batch):
    """Parameters of the model with global embedding; without it, the same less W1, b1, W2.
    The output layer is sharp and EOS less likely, so greedy decoding emits a few distinct
    labels before EOS."""
    shapes = jax.eval_shape(_model(global_embedding=True).init, jax.random.key(0), *batch)["params"]
    params = dict(_random_params(shapes, seed=1))
    params["output_kernel"] = 4.0 * params["output_kernel"]
    params["output_bias"] = params["output_bias"].at[EOS].add(-1.0)
    return {True: params, False: {k: v for k, v in params.items() if k not in GE_NAMES}}


@pytest.fixture(scope="module")
def compiled():
    """Jitted teacher-forced pass and decoders, per global-embedding setting."""
    functions = {}
    for ge in (False, True):
        model = _model(global_embedding=ge)
        functions[ge, "forward"] = jax.jit(lambda p, t, y, model=model: model.apply({"params": p}, t, y))
        for decoding in ("greedy", "beam"):
            model = _model(global_embedding=ge, decoding=decoding)
            functions[ge, decoding] = jax.jit(
                lambda p, t, model=model: model.apply({"params": p}, t, method=SGM.predict)
            )
    return functions


# --- loss ----------------------------------------------------------------------------------------


def np_sequence_cross_entropy(logits, targets):
    logits = np.asarray(logits, np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    out = np.zeros(targets.shape[0])
    for b in range(targets.shape[0]):
        steps = [t for t in range(targets.shape[1]) if targets[b, t] != PAD]
        out[b] = -np.mean([log_probs[b, t, targets[b, t]] for t in steps]) if steps else 0.0
    return out


def test_sequence_cross_entropy_matches_numpy_and_ignores_pad_targets(batch):
    _, labels = batch
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(B, S, V)).astype(np.float32)
    loss = _sequence_cross_entropy(logits, labels)
    chex.assert_shape(loss, (B,))
    np.testing.assert_allclose(loss, np_sequence_cross_entropy(logits, labels), rtol=1e-5)
    # Whatever the logits of the padded steps hold (the mask value included), nothing changes.
    pads = labels == PAD
    changed = np.where(pads[..., None], np.float32(-1e9), logits)
    np.testing.assert_array_equal(_sequence_cross_entropy(changed, labels), loss)
    grads = jax.jit(jax.grad(lambda x: jnp.sum(sequence_cross_entropy(x, labels))))(changed)
    assert np.all(np.isfinite(grads))
    np.testing.assert_array_equal(np.asarray(grads)[pads], 0.0)
    # A sequence of padding only has zero loss.
    np.testing.assert_array_equal(_sequence_cross_entropy(logits[:1], np.zeros((1, S), np.int32)), 0.0)


# --- teacher forcing ------------------------------------------------------------------------------


@pytest.mark.parametrize("ge", [False, True], ids=["sgm", "sgm_ge"])
def test_shapes_finite_masked_logits_and_attention(ge, batch, params, compiled):
    tokens, labels = batch
    out = compiled[ge, "forward"](params[ge], tokens, labels)
    chex.assert_shape(out.step_logits, (B, S, V))
    chex.assert_shape(out.source_attention, (B, S, L))
    chex.assert_tree_all_finite(out)
    logits = np.asarray(out.step_logits)
    # PAD, UNK and BOS are never possible; a gold label is masked once it is in the prefix.
    assert np.all(logits[..., :3] < -1e8)
    assert logits[0, 1, 4] < -1e8 and logits[0, 0, 4] > -1e8
    assert np.all(logits[..., EOS] > -1e8)
    attention = np.asarray(out.source_attention)
    pads = tokens == PAD
    np.testing.assert_array_equal(np.where(pads[:, None, :], attention, 0.0), 0.0)
    np.testing.assert_allclose(attention.sum(-1), 1.0, rtol=1e-5)


def test_label_scores_are_each_labels_best_step_log_probability(batch, params, compiled):
    """scores [B, J]: a label's log-probability at the real step (up to EOS) that gives it the
    most; the float32 minimum for a sequence of padding only."""
    tokens, labels = batch
    out = compiled[True, "forward"](params[True], tokens, labels)
    logits = np.asarray(out.step_logits, np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    chex.assert_shape(out.scores, (B, J))
    for b in range(B):
        steps = labels[b] != PAD
        expected = log_probs[b, steps, NUM_SPECIAL:].max(0) if steps.any() else np.finfo(np.float32).min
        np.testing.assert_allclose(out.scores[b], expected, rtol=1e-5, atol=1e-5)
    padding_only = compiled[True, "forward"](params[True], tokens, np.zeros_like(labels)).scores
    np.testing.assert_array_equal(padding_only, np.finfo(np.float32).min)


@pytest.mark.parametrize("ge", [False, True], ids=["sgm", "sgm_ge"])
def test_steps_after_eos_do_not_change_the_loss(ge, batch, params, compiled):
    tokens, labels = batch
    forward = compiled[ge, "forward"]
    logits = forward(params[ge], tokens, labels).step_logits
    loss = _sequence_cross_entropy(logits, labels)
    # Other tokens after EOS (the decoder reads them as inputs) change only padded steps.
    garbage = np.where(labels == PAD, np.int32(7), labels)
    garbage_logits = forward(params[ge], tokens, garbage).step_logits
    real = labels != PAD
    np.testing.assert_array_equal(np.asarray(garbage_logits)[real], np.asarray(logits)[real])
    np.testing.assert_array_equal(_sequence_cross_entropy(garbage_logits, labels), loss)


@pytest.mark.parametrize("ge", [False, True], ids=["sgm", "sgm_ge"])
def test_teacher_forcing_reproduces_greedy_decoding(ge, batch, params, compiled):
    """Greedy decoding, then its sequence fed as targets: the teacher-forced logits pick the
    same tokens and give the same log probability (the step and the mask are shared)."""
    tokens, _ = batch
    decoded = compiled[ge, "greedy"](params[ge], tokens)
    sequence = np.asarray(decoded.sequence)
    assert np.all(np.asarray(decoded.length) >= 2), sequence  # non-trivial sequences
    logits = compiled[ge, "forward"](params[ge], tokens, sequence).step_logits
    real = sequence != PAD
    np.testing.assert_array_equal(np.where(real, np.argmax(logits, axis=-1), PAD), sequence)
    log_prob = -np.asarray(_sequence_cross_entropy(logits, sequence)) * real.sum(-1)
    np.testing.assert_allclose(log_prob, decoded.log_prob, atol=1e-4)


# --- prediction -----------------------------------------------------------------------------------


@pytest.mark.parametrize("decoding", ["greedy", "beam"])
def test_predictions_have_no_repeated_labels(decoding, batch, params, compiled):
    tokens, _ = batch
    out = compiled[True, decoding](params[True], tokens)
    chex.assert_shape(out.labels, (B, J))
    chex.assert_shape(out.sequence, (B, MAX_STEPS))
    chex.assert_shape(out.length, (B,))
    multi_hot, sequence = np.asarray(out.labels), np.asarray(out.sequence)
    assert set(np.unique(multi_hot)) <= {0.0, 1.0}
    for b in range(B):
        n = int(out.length[b])
        predicted = sequence[b, :n]
        assert np.all(predicted >= NUM_SPECIAL) and len(set(predicted)) == n
        if n < MAX_STEPS:
            assert sequence[b, n] == EOS and np.all(sequence[b, n + 1 :] == PAD)
        expected = np.zeros(J)
        expected[predicted - NUM_SPECIAL] = 1
        np.testing.assert_array_equal(multi_hot[b], expected)


def test_beam_search_scores_at_least_greedy(batch, params, compiled):
    tokens, _ = batch
    greedy = compiled[True, "greedy"](params[True], tokens)
    beam = compiled[True, "beam"](params[True], tokens)
    assert np.all(np.asarray(beam.log_prob) >= np.asarray(greedy.log_prob) - 1e-5)


# --- global embedding -----------------------------------------------------------------------------


def test_global_embedding_parameters_and_effect(batch, params, compiled):
    tokens, labels = batch
    shapes = jax.eval_shape(_model().init, jax.random.key(0), tokens, labels)["params"]
    assert set(shapes) == set(params[False]) and not GE_NAMES & set(shapes)
    # The same parameters plus W1, b1, W2: the outputs change...
    plain = compiled[False, "forward"](params[False], tokens, labels).step_logits
    gated = compiled[True, "forward"](params[True], tokens, labels).step_logits
    real = labels != PAD
    np.testing.assert_array_equal(gated[:, 0], plain[:, 0])  # y_0 = one_hot(BOS): ebar = e
    assert np.max(np.abs(np.asarray(gated - plain)[real])) > 1e-3
    # ...except when the gate H is shut (b1 very negative): then g = e exactly.
    shut = dict(params[True], ge_w1_bias=jnp.full_like(params[True]["ge_w1_bias"], -1e4))
    np.testing.assert_allclose(compiled[True, "forward"](shut, tokens, labels).step_logits, plain, rtol=1e-6, atol=1e-6)


# --- training mode, configuration -----------------------------------------------------------------


def test_dropout_in_training_and_finite_gradients(batch):
    """One layer each: compiling the gradient of the decoder loop is the slowest part of
    these tests (the layer loops are covered by the forward tests)."""
    tokens, labels = batch
    model = _model(global_embedding=True, num_layers=1)
    params = _random_params(jax.eval_shape(model.init, jax.random.key(0), tokens, labels)["params"], seed=3)

    def loss(params, rng):
        out = model.apply({"params": params}, tokens, labels, train=True, rngs={"dropout": rng})
        return jnp.mean(sequence_cross_entropy(out.step_logits, labels)), out.step_logits

    value_and_grad = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (value, logits), grads = value_and_grad(params, jax.random.key(1))
    assert np.isfinite(value)
    chex.assert_tree_all_finite(grads)
    # Other dropout masks, other outputs.
    assert not np.allclose(logits, value_and_grad(params, jax.random.key(2))[0][1])
    # Every parameter takes part in the loss.
    assert all(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grads))


def test_unknown_knob_values_raise():
    with pytest.raises(ValueError, match="beam"):
        _model(decoding="sample")
    with pytest.raises(ValueError, match="max"):
        BinaryRelevance(VOCAB, J, pool="sum")


# --- binary relevance -----------------------------------------------------------------------------


@pytest.mark.parametrize("pool", ["max", "mean"])
def test_binary_relevance_shapes_and_padding_invariance(pool, batch):
    tokens, _ = batch
    model = BinaryRelevance(VOCAB, J, embed_dim=8, encoder_dim=8, num_layers=1, pool=pool)
    variables = _random_params(jax.eval_shape(model.init, jax.random.key(0), tokens), seed=2)
    apply = jax.jit(model.apply)
    scores = apply(variables, tokens).scores
    chex.assert_shape(scores, (B, J))
    chex.assert_tree_all_finite(scores)
    longer = np.concatenate([tokens, np.zeros((B, 4), np.int32)], axis=1)
    np.testing.assert_allclose(apply(variables, longer).scores, scores, rtol=1e-5, atol=1e-5)
    # Examples are independent of each other.
    np.testing.assert_allclose(apply(variables, tokens[::-1]).scores, scores[::-1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("embedding_dropout,dropout_rate", [(0.5, 0.0), (0.0, 0.5), (0.0, 0.0)])
def test_binary_relevance_drops_out_embeddings_and_pooled_vector_by_their_own_rates(
    embedding_dropout, dropout_rate, batch
):
    """One encoder layer: `embedding_dropout` acts on the word vectors alone, `dropout_rate` on
    the pooled vector alone; with both 0 training computes what inference does."""
    tokens, _ = batch
    model = BinaryRelevance(VOCAB, J, embed_dim=8, encoder_dim=8, num_layers=1,
                            embedding_dropout=embedding_dropout, dropout_rate=dropout_rate)
    variables = _random_params(jax.eval_shape(model.init, jax.random.key(0), tokens), seed=2)
    inference = model.apply(variables, tokens).scores
    training = model.apply(variables, tokens, train=True, rngs={"dropout": jax.random.key(1)}).scores
    if embedding_dropout or dropout_rate:
        assert not np.allclose(training, inference)
    else:
        np.testing.assert_allclose(training, inference, rtol=1e-6)


def test_binary_relevance_starts_every_label_at_probability_one_over_j(batch):
    tokens, _ = batch
    model = BinaryRelevance(VOCAB, J, embed_dim=8, encoder_dim=8, num_layers=1)
    shapes = jax.eval_shape(model.init, jax.random.key(0), tokens)
    bias = model.init(jax.random.key(0), tokens[:1, :2])["params"]["readout"]["bias"]
    chex.assert_shape(bias, shapes["params"]["readout"]["bias"].shape)
    # sigmoid(-log J) = 1 / (1 + J)
    np.testing.assert_allclose(jax.nn.sigmoid(bias), np.full(J, 1 / (1 + J)), rtol=1e-5)
