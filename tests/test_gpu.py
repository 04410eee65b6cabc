"""Checks that need a GPU (`@pytest.mark.gpu`): skipped elsewhere, run by benchmarks/device_check.sh."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.models.input_cell_lstm import InputCellLSTM
from jcaps.ops.pooling import causal_softmax_pool, causal_softmax_pool_quadratic
from tests.models.test_rnn_impl import LSTMStack, assert_impls_agree, mixed_length_batch

pytestmark = pytest.mark.gpu


def test_causal_pool_on_the_gpu_matches_the_quadratic_form():
    rng = np.random.default_rng(0)
    scores = jnp.asarray(rng.normal(scale=3.0, size=(4, 300, 20)).astype(np.float32))
    inputs = jnp.asarray(rng.normal(size=(4, 300, 16)).astype(np.float32))
    mask = jnp.asarray(np.arange(300)[None, :] < np.array([300, 250, 10, 1])[:, None])
    linear = jax.jit(causal_softmax_pool)(scores, inputs, mask=mask)
    assert linear.devices() == {jax.devices("gpu")[0]}
    # The reference's matmuls in full float32: at XLA's default GPU precision (TF32) the
    # quadratic form itself is off by 1e-3.
    with jax.default_matmul_precision("float32"):
        reference = causal_softmax_pool_quadratic(scores, inputs, mask=mask)
    np.testing.assert_allclose(linear, reference, atol=1e-5)


def test_input_cell_batch_50_at_length_1000_trains_on_the_gpu():
    # docs/performance.md: the reference cannot run this shape in 24 GiB; the O(T) pool can.
    model = InputCellLSTM(2)
    series = jnp.asarray(np.random.default_rng(0).normal(size=(50, 1000, 100)).astype(np.float32))
    mask = jnp.ones((50, 1000), bool)
    params = model.init(jax.random.key(0), series[:, :4], mask[:, :4])["params"]

    @jax.jit
    def loss_and_grad(params):
        def loss(params):
            return jnp.mean(jax.nn.logsumexp(model.apply({"params": params}, series, mask).scores, axis=-1))

        return jax.value_and_grad(loss)(params)

    value, grads = loss_and_grad(params)
    assert np.isfinite(value) and all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


@pytest.mark.parametrize("num_directions", [1, 2])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_cudnn_lstm_matches_the_scan(num_directions, num_layers):
    # tests/models/test_rnn_impl.py runs the same comparison with JAX's reference kernel.
    x, mask = mixed_length_batch()
    model = LSTMStack(num_directions, num_layers, "cudnn")
    params = model.init(jax.random.key(0), x, mask)["params"]
    jaxpr = str(jax.make_jaxpr(lambda p: model.apply({"params": p}, x, mask))(params))
    assert "rnn_fwd" in jaxpr  # cuDNN's kernel, not the fallback
    # Full float32 on both sides (no TF32 in cuDNN's or XLA's matmuls).
    with jax.default_matmul_precision("float32"):
        assert_impls_agree(num_directions, num_layers, rtol=1e-4, atol=1e-5)
