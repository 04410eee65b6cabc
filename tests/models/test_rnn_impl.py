"""model.rnn_impl: the cuDNN LSTM path against the scans, its weight layout, and its fallback.

On a CPU the cuDNN kernel cannot run, so the path is checked with `jax.experimental.rnn.lstm_ref`
(JAX's pure-JAX reference of the same call: flat weights unpacked, sequence lengths) standing in
for `rnn.lstm`: everything jcaps does around the call (weight packing, masks to lengths, zeroed
pads, layouts, gradients back to the parameter tree) runs as on a GPU. tests/test_gpu.py runs the
real kernel.
"""

import os
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import rnn

from jcaps.errors import ConfigError
from jcaps.models import cudnn_lstm
from jcaps.models.recurrent_layers import RecurrentLayer
from jcaps.models.sgm import BinaryRelevance
from jcaps.train import config as config_lib

HIDDEN = 6
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LSTMStack(nn.Module):
    """`num_layers` LSTM layers of `num_directions`, each reading the one below's directions
    concatenated (SGM's encoder without embedding and dropout)."""

    num_directions: int
    num_layers: int
    rnn_impl: str

    @nn.compact
    def __call__(self, x, mask):
        for layer in range(self.num_layers):
            states = RecurrentLayer("lstm", HIDDEN, self.num_directions, rnn_impl=self.rnn_impl, name=f"layer_{layer}")(
                x, mask
            )
            x = states.reshape(states.shape[:-2] + (-1,))
        return x


def mixed_length_batch(lengths=(9, 5, 1, 0, 7), steps=9, num_inputs=4, seed=0):
    """x [B, T, D] with garbage (1e3) at the pads and its prefix mask [B, T]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(lengths), steps, num_inputs)).astype(np.float32)
    mask = np.arange(steps)[None, :] < np.asarray(lengths)[:, None]
    x[~mask] = 1e3
    return jnp.asarray(x), jnp.asarray(mask)


def outputs_and_gradients(model, params, x, mask):
    """The stack's outputs and the gradients of sum(outputs * g) (g a fixed random cotangent)
    with respect to the parameters and the inputs."""
    outputs = model.apply({"params": params}, x, mask)
    cotangent = jnp.asarray(np.random.default_rng(1).normal(size=outputs.shape).astype(np.float32))

    def objective(params, x):
        return jnp.sum(model.apply({"params": params}, x, mask) * cotangent)

    return outputs, jax.grad(objective, argnums=(0, 1))(params, x)


def assert_impls_agree(num_directions, num_layers, rtol, atol):
    """rnn_impl='cudnn' and 'scan' give the same outputs and gradients on a masked, padded batch
    of mixed lengths (both run in the current JAX backend)."""
    x, mask = mixed_length_batch()
    scan = LSTMStack(num_directions, num_layers, "scan")
    cudnn = LSTMStack(num_directions, num_layers, "cudnn")
    params = scan.init(jax.random.key(0), x, mask)["params"]
    expected, (expected_param_grads, expected_input_grads) = outputs_and_gradients(scan, params, x, mask)
    got, (param_grads, input_grads) = outputs_and_gradients(cudnn, params, x, mask)
    assert jax.tree.structure(cudnn.init(jax.random.key(0), x, mask)) == jax.tree.structure({"params": params})
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    assert not np.asarray(got)[~np.asarray(mask)].any()  # zeros at the pads
    jax.tree.map(lambda g, e: np.testing.assert_allclose(g, e, rtol=rtol, atol=atol), param_grads, expected_param_grads)
    np.testing.assert_allclose(input_grads, expected_input_grads, rtol=rtol, atol=atol)
    assert np.isfinite(np.asarray(input_grads)).all()


def reference_lstm(x, h_0, c_0, weights, seq_lengths, *, input_size, hidden_size, num_layers, dropout, bidirectional):
    """`rnn.lstm`'s signature, computed by `rnn.lstm_ref` from the unpacked flat weights."""
    unpacked = rnn.unpack_lstm_weights(weights, input_size, hidden_size, num_layers, bidirectional)
    return rnn.lstm_ref(x, h_0, c_0, *unpacked, seq_lengths, input_size, hidden_size, num_layers, dropout, bidirectional)


@pytest.fixture
def cudnn_by_reference(monkeypatch):
    """The cuDNN path taken on this machine, with `rnn.lstm_ref` as the kernel."""
    monkeypatch.setattr("jcaps.models.recurrent_layers.cudnn_unavailable", lambda dtype: None)
    monkeypatch.setattr(cudnn_lstm.rnn, "lstm", reference_lstm)


@pytest.mark.parametrize("num_directions", [1, 2])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_cudnn_path_with_the_reference_kernel_matches_the_scan(cudnn_by_reference, num_directions, num_layers):
    assert_impls_agree(num_directions, num_layers, rtol=1e-5, atol=1e-6)


def test_cudnn_path_takes_any_leading_axes_and_no_mask(cudnn_by_reference):
    x, mask = mixed_length_batch()
    params = LSTMStack(2, 1, "scan").init(jax.random.key(0), x, mask)["params"]
    for inputs, inputs_mask in ((x, None), (x[1], mask[1]), (x.reshape(5, 1, 9, 4), mask.reshape(5, 1, 9))):
        expected = LSTMStack(2, 1, "scan").apply({"params": params}, inputs, inputs_mask)
        got = LSTMStack(2, 1, "cudnn").apply({"params": params}, inputs, inputs_mask)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_directions", [1, 2])
def test_weight_conversion_is_cudnns_layout_and_round_trips(num_directions):
    input_size, hidden_size, bidirectional = 3, 4, num_directions == 2
    rng = np.random.default_rng(0)
    shapes = [(num_directions, input_size, 4 * hidden_size), (num_directions, 4 * hidden_size),
              (num_directions, hidden_size, 4 * hidden_size), (num_directions, 4 * hidden_size)]
    params = tuple(jnp.asarray(rng.normal(size=s).astype(np.float32)) for s in shapes)

    flat = cudnn_lstm.to_cudnn_weights(*params)
    assert flat.shape == (rnn.get_num_params_in_lstm(input_size, hidden_size, 1, bidirectional),)
    # cuDNN's own unpacking reads PyTorch's matrices (W_ih [4H, D], gates i, f, g, o) back.
    w_ih, w_hh, b_ih, b_hh = rnn.unpack_lstm_weights(flat, input_size, hidden_size, 1, bidirectional)
    input_kernel, input_bias, hidden_kernel, hidden_bias = params
    for k in range(num_directions):
        np.testing.assert_array_equal(w_ih[k], input_kernel[k].T)
        np.testing.assert_array_equal(w_hh[k], hidden_kernel[k].T)
        np.testing.assert_array_equal(b_ih[k], input_bias[k])
        np.testing.assert_array_equal(b_hh[k], hidden_bias[k])
    for got, expected in zip(cudnn_lstm.from_cudnn_weights(flat, input_size, hidden_size, num_directions), params):
        np.testing.assert_array_equal(got, expected)
    # And from cuDNN's side: an initialised flat vector survives the way there and back.
    initial = rnn.init_lstm_weight(jax.random.key(0), input_size, hidden_size, 1, bidirectional)
    back = cudnn_lstm.to_cudnn_weights(*cudnn_lstm.from_cudnn_weights(initial, input_size, hidden_size, num_directions))
    np.testing.assert_array_equal(back, initial)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="cuDNN runs on a GPU")
def test_cudnn_on_the_cpu_runs_the_scan_and_says_so_once():
    cudnn_lstm.warn_scan_fallback.cache_clear()
    x, mask = mixed_length_batch()
    params = LSTMStack(2, 2, "scan").init(jax.random.key(0), x, mask)["params"]
    expected = LSTMStack(2, 2, "scan").apply({"params": params}, x, mask)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # once by jcaps, not by Python's warning registry
        for _ in range(2):  # two layers, twice
            got = LSTMStack(2, 2, "cudnn").apply({"params": params}, x, mask)
    np.testing.assert_array_equal(got, expected)
    lines = [str(w.message) for w in caught if "rnn_impl='cudnn'" in str(w.message)]
    assert len(lines) == 1, lines
    assert "not a GPU" in lines[0]


def test_rnn_impl_reaches_the_encoder_and_gru_layers_refuse_cudnn(cudnn_by_reference, monkeypatch):
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, 20, size=(3, 7)).astype(np.int32)).at[1, 4:].set(0)
    scan = BinaryRelevance(20, 5, embed_dim=8, encoder_dim=HIDDEN, num_layers=2)
    params = scan.init(jax.random.key(0), tokens)["params"]
    cudnn = BinaryRelevance(20, 5, embed_dim=8, encoder_dim=HIDDEN, num_layers=2, rnn_impl="cudnn")
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs["bidirectional"])
        return reference_lstm(*args, **kwargs)

    monkeypatch.setattr(cudnn_lstm.rnn, "lstm", counted)
    np.testing.assert_allclose(
        cudnn.apply({"params": params}, tokens).scores, scan.apply({"params": params}, tokens).scores, rtol=1e-5
    )
    assert calls == [True, True]
    with pytest.raises(ValueError, match="LSTM layers only"):
        RecurrentLayer("gru", 4, rnn_impl="cudnn")
    with pytest.raises(ValueError, match="rnn_impl must be one of"):
        RecurrentLayer("lstm", 4, rnn_impl="fused")


def test_rnn_impl_is_validated_and_may_change_on_resumption():
    config = config_lib.load(f"{ROOT}/configs/sgm_reuters.py:smoke")
    assert config.model.rnn_impl == "scan"
    config_lib.validate(config)
    saved = config_lib.flatten(config)
    config.model.rnn_impl = "cudnn"
    config_lib.validate(config)
    assert config_lib.incompatible_keys(saved, config) == []
    config.model.rnn_impl = "cuda"
    with pytest.raises(ConfigError, match="model.rnn_impl must be one of scan, cudnn"):
        config_lib.validate(config)
