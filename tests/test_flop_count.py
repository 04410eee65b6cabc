"""The benchmarks' FLOP counter (`benchmarks.flops`): a scan counts its body times its length,
matching XLA's own count of the same loop unrolled; convolutions count only taps on the input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import flops

BATCH, FEATURES, HIDDEN, STEPS = 16, 64, 128, 12


def xla_flops(fn, *args) -> float:
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


def _lstm_loss(unroll: int):
    def step(carry, x, w, u):
        h, c = carry
        i, f, o, z = jnp.split(x @ w + h @ u, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(z)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def loss(w, u, xs):
        zeros = jnp.zeros((BATCH, HIDDEN), jnp.float32)
        return jax.lax.scan(lambda carry, x: step(carry, x, w, u), (zeros, zeros), xs, unroll=unroll)[1].sum()

    return loss


@pytest.fixture(scope="module")
def lstm_args():
    rng = np.random.default_rng(0)
    return tuple(jnp.asarray(rng.normal(size=shape).astype(np.float32))
                 for shape in ((FEATURES, 4 * HIDDEN), (HIDDEN, 4 * HIDDEN), (STEPS, BATCH, FEATURES)))


@pytest.mark.parametrize("gradient", [False, True], ids=["forward", "forward_backward"])
def test_scan_counts_every_step_as_xla_counts_the_unrolled_loop(lstm_args, gradient):
    scanned, unrolled = _lstm_loss(1), _lstm_loss(STEPS)
    if gradient:
        scanned, unrolled = jax.grad(scanned, argnums=(0, 1)), jax.grad(unrolled, argnums=(0, 1))
    counted = flops.count_flops(scanned, *lstm_args)
    assert counted == flops.count_flops(unrolled, *lstm_args)
    reference = xla_flops(unrolled, *lstm_args)
    assert counted.total == pytest.approx(reference, rel=0.03)
    assert counted.matmul == pytest.approx(reference, rel=0.05)
    # What the counter is for: XLA sees the rolled loop's body once.
    assert xla_flops(scanned, *lstm_args) < counted.total / (STEPS / 2)


@pytest.mark.parametrize("dilation", [1, 8, 64])
def test_dilated_convolution_counts_taps_on_the_input_as_xla_does(dilation):
    inputs, kernel = jnp.ones((2, 100, 64), jnp.float32), jnp.ones((7, 64, 32), jnp.float32)

    def loss(inputs, kernel):
        outputs = jax.lax.conv_general_dilated(inputs, kernel, (1,), [(6 * dilation, 0)], rhs_dilation=(dilation,),
                                               dimension_numbers=("NWC", "WIO", "NWC"))
        return jnp.tanh(outputs).sum()  # a cotangent XLA cannot fold away

    for fn in (loss, jax.grad(loss, argnums=(0, 1))):
        assert flops.count_flops(fn, inputs, kernel).matmul == pytest.approx(xla_flops(fn, inputs, kernel), rel=0.02)


def test_while_loop_with_literal_bounds_counts_its_trips_and_others_once():
    matrix = jnp.ones((8, 8), jnp.float32)
    one_product = 2 * 8**3

    def bounded(m):
        return jax.lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] @ m), (0, m))[1]

    def data_dependent(m):
        return jax.lax.while_loop(lambda c: c[1].sum() < 100.0, lambda c: (c[0] + 1, c[1] @ m), (0, m))[1]

    counted = flops.count_flops(bounded, matrix)
    assert (counted.matmul, counted.while_loops_counted_once) == (5 * one_product, 0)
    counted = flops.count_flops(data_dependent, matrix)
    assert (counted.matmul, counted.while_loops_counted_once) == (one_product, 1)


def test_cond_counts_its_costliest_branch_and_jit_and_remat_their_bodies():
    matrix = jnp.ones((8, 8), jnp.float32)

    def fn(m):
        m = jax.jit(lambda a: a @ a)(m)
        m = jax.checkpoint(lambda a: a @ a)(m)
        return jax.lax.cond(m.sum() > 0, lambda a: a @ a @ a, lambda a: a, m)

    assert flops.count_flops(fn, matrix).matmul == 4 * 2 * 8**3


def test_live_flops_leave_out_what_no_output_needs():
    a, b = jnp.ones((8, 16)), jnp.ones((16, 32))

    def one_used(x):
        unused = jnp.tanh(x @ b)  # noqa: F841 (traced, never returned)
        return x @ b

    assert flops.count_flops(one_used, a).matmul == 2 * 2 * 8 * 16 * 32
    assert flops.live_flops(one_used, a) == flops.Flops(matmul=2 * 8 * 16 * 32)
    assert flops.live_flops(jax.jit(one_used), a).matmul == 2 * 8 * 16 * 32  # inside a jit as well
