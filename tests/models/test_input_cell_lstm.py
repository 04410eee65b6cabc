"""InputCellLSTM: every variant's shapes, logits against a NumPy computation from the same
parameters and padding invariance; initialisation, dropout, a few Adam steps on a tiny task,
config validation."""

from typing import get_args

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jcaps.models.choices import InputCellLSTMVariant
from jcaps.models.input_cell_lstm import InputCellLSTM
from jcaps.ops.pooling import causal_softmax_pool_quadratic
from tests.float32 import summed_atol
from tests.ops.recurrent_references import np_lstm as np_lstm_loop

B, T, N, C = 3, 7, 4, 2
LENGTHS = np.array([7, 4, 1])
# Small attention (r = 3 hops, d_a = 6) keeps the NumPy reference short; defaults elsewhere.
SMALL = {"num_hops": 3, "attention_dim": 6}


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    series = rng.normal(size=(B, T, N)).astype(np.float32)
    mask = np.arange(T)[None, :] < LENGTHS[:, None]
    # Padded steps may hold anything.
    series[~mask] = np.nan
    series[1, 5] = 1e3
    return series, mask


def _output_shapes(variant):
    """The outputs a variant returns and their shapes (r = 3)."""
    shapes = {"scores": (B, C)}
    if variant == "input_cell":
        shapes["input_attention_logits"] = (B, T, 3)
    if variant == "lstm_self_attention":
        shapes["hop_attention"] = (B, 3, T)
    return shapes


def _apply(model):
    return jax.jit(lambda params, series, mask: model.apply(params, series, mask))


def _key(seed):
    # XLA's RngBitGenerator compiles about ten times faster than threefry on CPU.
    return jax.random.key(seed, impl="rbg")


def _random_params(model, series, mask, seed=0):
    """Parameters of the shapes `model.init` gives, U(-0.5, 0.5) (non-zero attention biases
    too); from `jax.eval_shape`, which compiles nothing."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(model.init, jax.random.key(0), series, mask)
    return jax.tree.map(lambda s: rng.uniform(-0.5, 0.5, s.shape).astype(np.float32), shapes)


# --- NumPy reference ---------------------------------------------------------------------------


def np_lstm(x, p, direction=0):
    """PyTorch nn.LSTM, one direction of the `lstm` parameters: x [n, D] -> [n, H] (float64)."""
    names = ("input_kernel", "input_bias", "hidden_kernel", "hidden_bias")
    return np_lstm_loop(x, *(np.asarray(p[name][direction], np.float64) for name in names))


def np_causal_pool(scores, x):
    """m_t = hop mean of the softmax over j <= t of scores [n, r], pooling x [n, N]."""
    pooled = np.zeros_like(x)
    for t in range(len(x)):
        e = np.exp(scores[: t + 1] - scores[: t + 1].max(axis=0))
        pooled[t] = np.mean((e / e.sum(axis=0)).T @ x[: t + 1], axis=0)
    return pooled


def np_logits(params, series, length, variant):
    """The logits of one sequence, run on its valid steps only."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    x = np.asarray(series[:length], np.float64)
    if variant == "input_cell":
        scores = np.tanh(x @ p["attention_w1"] + p["attention_b1"]) @ p["attention_w2"] + p["attention_b2"]
        x = np_causal_pool(scores, x)
    states = np_lstm(x, p["lstm"])
    if variant in ("input_cell", "lstm"):
        features = states[-1]
    elif variant == "lstm_maxpool":
        features = states.max(axis=0)
    elif variant == "lstm_meanpool":
        features = states.mean(axis=0)
    elif variant == "bilstm":
        features = np.concatenate([states[-1], np_lstm(x[::-1], p["lstm"], direction=1)[-1]])
    else:
        logits = (np.tanh(states @ p["attention_w1"]) @ p["attention_w2"]).T
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        features = (weights / weights.sum(axis=1, keepdims=True) @ states).mean(axis=0)
    return features @ p["readout"]["kernel"] + p["readout"]["bias"]


# --- forward -----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", get_args(InputCellLSTMVariant))
def test_variant_shapes_numpy_reference_and_padding_invariance(batch, variant):
    series, mask = batch
    model = InputCellLSTM(C, variant=variant, **SMALL)
    params = _random_params(model, series, mask)
    apply = _apply(model)
    outputs = apply(params, series, mask)
    chex.assert_shape(outputs.scores, (B, C))
    chex.assert_tree_all_finite(outputs)
    set_fields = {name: value for name, value in vars(outputs).items() if value is not None}
    assert {name: value.shape for name, value in set_fields.items()} == _output_shapes(variant)

    for b, length in enumerate(LENGTHS):
        np.testing.assert_allclose(
            outputs.scores[b], np_logits(params, series[b], length, variant), rtol=1e-5, atol=1e-5
        )

    # Three more padded steps holding garbage change no logit.
    longer_series = np.concatenate([series, np.full((B, 3, N), -1e3, np.float32)], axis=1)
    longer_series[0, -1] = np.nan
    longer_mask = np.concatenate([mask, np.zeros((B, 3), bool)], axis=1)
    longer = apply(params, longer_series, longer_mask)
    np.testing.assert_allclose(longer.scores, outputs.scores, rtol=1e-6, atol=1e-6)
    if variant == "input_cell":
        # Each logit sums N inputs into each of the attention_dim units, then those units.
        expected = outputs.input_attention_logits[mask]
        terms = N * SMALL["attention_dim"]
        np.testing.assert_allclose(
            longer.input_attention_logits[:, :T][mask], expected, rtol=0, atol=summed_atol(terms, expected)
        )
    if variant == "lstm_self_attention":
        np.testing.assert_allclose(longer.hop_attention[..., :T], outputs.hop_attention, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(longer.hop_attention[..., T:], 0.0)


def test_the_pool_is_composed_in(batch):
    """The model takes its pooling as a function: the O(T^2) form of the equations gives the
    streaming default's scores, and a pool of the caller's own is the one that runs."""
    series, mask = batch
    model = InputCellLSTM(C, variant="input_cell", **SMALL)
    params = _random_params(model, series, mask)
    streaming = _apply(model)(params, series, mask).scores
    quadratic = _apply(model.clone(pool=causal_softmax_pool_quadratic))(params, series, mask).scores
    np.testing.assert_allclose(quadratic, streaming, rtol=1e-5, atol=1e-6)
    seen = []

    def recording_pool(scores, inputs, *, mask):
        seen.append(scores.shape)
        return jnp.zeros_like(inputs)

    _apply(model.clone(pool=recording_pool))(params, series, mask)
    assert seen == [(B, T, SMALL["num_hops"])]


def test_without_mask_every_step_is_valid(batch):
    series, _ = batch
    model = InputCellLSTM(C, variant="bilstm", **SMALL)
    full = series[:1]
    params = _random_params(model, full, None)
    logits = jax.jit(model.apply)(params, full).scores
    np.testing.assert_allclose(logits[0], np_logits(params, full[0], T, "bilstm"), rtol=1e-5, atol=1e-5)


def test_initialisation_and_dropout_in_training(batch):
    series, mask = batch
    hidden = 5
    model = InputCellLSTM(C, variant="lstm", hidden_dim=hidden, dropout_rate=0.5)
    params = jax.jit(model.init)(_key(0), series, mask)["params"]
    # PyTorch's nn.LSTM: every weight and bias U(-1/sqrt(H), 1/sqrt(H)).
    for name, value in params["lstm"].items():
        assert np.all(np.abs(value) <= hidden**-0.5), name
    train = jax.jit(lambda key: model.apply({"params": params}, series, mask, train=True, rngs={"dropout": key}))
    assert not np.allclose(train(_key(1)).scores, train(_key(2)).scores)


def test_invalid_variant_raises():
    with pytest.raises(ValueError, match="variant must be one of"):
        InputCellLSTM(C, variant="gru")


# --- training ----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["input_cell", "lstm"])
def test_adam_steps_lower_the_loss_on_a_tiny_task(variant):
    """Class = sign of the mean of feature 0 over the first 3 steps; lengths 3..6. 40 full-batch
    steps without dropout, so both losses are deterministic."""
    rng = np.random.default_rng(1)
    size, steps, features = 32, 6, 2
    series = rng.normal(size=(size, steps, features)).astype(np.float32)
    mask = np.arange(steps)[None, :] < rng.integers(3, steps + 1, size=size)[:, None]
    labels = (series[:, :3, 0].mean(axis=1) > 0).astype(np.int32)
    model = InputCellLSTM(C, variant=variant, **SMALL)
    params = _random_params(model, series, mask)
    optimizer = optax.adam(0.05)

    def loss(params):
        logits = model.apply(params, series, mask).scores
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))

    @jax.jit
    def losses_before_and_after_training(params):
        def step(carry, _):
            params, state = carry
            # optax raises a Python float to the int32 step count (Adam's bias correction),
            # which strict promotion refuses; jcaps.train.optim does the same for training.
            with jax.numpy_dtype_promotion("standard"):
                updates, state = optimizer.update(jax.grad(loss)(params), state)
            return (optax.apply_updates(params, updates), state), None

        trained = jax.lax.scan(step, (params, optimizer.init(params)), length=40)[0][0]
        return loss(params), loss(trained)

    before, after = losses_before_and_after_training(params)
    assert after < 0.7 * before, (before, after)
