"""FLOPs of a JAX function counted on its jaxpr, every loop body times its trip count.

    flops = count_flops(jax.jit(step), state, batch)   # Flops(matmul=..., elementwise=..., ...)
    flops.total

XLA's `cost_analysis` counts a while loop's body once, so for a model built on `lax.scan` (a
GRU, an LSTM, a decoder) it misses all steps but one. This counter walks the jaxpr instead:

- `dot_general`: 2 x output elements x contraction size; `conv_general_dilated`: 2 x output
  batch x output features x input features of a group x the (output position, kernel tap)
  pairs that fall on the input, not on padding or on the holes of an input dilation (what
  XLA counts too);
- elementwise arithmetic, comparisons and transcendental functions: one FLOP an output element
  (XLA keeps transcendentals out of its `flops`); reductions and cumulative ops: one an input
  element; gathers, slices, reshapes, transposes, casts: none;
- `scan`: the body times `length`; `while`: the body times its trip count where the loop is
  `i < N` with `i` starting at a literal and stepping by 1 and `N` a literal, the condition
  once more; otherwise the body once, and `while_loops_counted_once` says how many such loops
  there were (a decoder that stops early has a data-dependent trip count);
- `cond`: the most expensive branch; `jit`, `remat`, `custom_jvp_call`, `custom_vjp_call` and
  any other primitive with inner jaxprs: their sum.

Shapes are the jaxpr's, so under a mesh the count is of the whole step over all devices.
Matrix FLOPs of an unrolled loop agree with XLA's (tests/test_flop_count.py).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, jaxprs_in_params

ELEMENTWISE = frozenset({
    "abs", "add", "add_any", "and", "atan2", "cbrt", "ceil", "clamp", "cos", "digamma", "div", "eq", "erf",
    "erf_inv", "erfc", "exp", "exp2", "expm1", "floor", "ge", "gt", "integer_pow", "is_finite", "le", "lgamma",
    "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg", "nextafter", "not", "or", "pow", "rem",
    "round", "rsqrt", "select_n", "sign", "sin", "sqrt", "square", "sub", "tan", "tanh", "xor",
})
REDUCTIONS = frozenset({
    "argmax", "argmin", "cumlogsumexp", "cummax", "cummin", "cumprod", "cumsum", "reduce_and", "reduce_max",
    "reduce_min", "reduce_or", "reduce_prod", "reduce_sum",
})


@dataclasses.dataclass(frozen=True)
class Flops:
    matmul: float = 0.0  # dot_general and conv_general_dilated
    elementwise: float = 0.0  # arithmetic, comparisons, transcendentals, reductions
    while_loops_counted_once: int = 0

    @property
    def total(self) -> float:
        return self.matmul + self.elementwise

    def __add__(self, other: Flops) -> Flops:
        return Flops(self.matmul + other.matmul, self.elementwise + other.elementwise,
                     self.while_loops_counted_once + other.while_loops_counted_once)

    def times(self, count: int) -> Flops:
        return Flops(self.matmul * count, self.elementwise * count, self.while_loops_counted_once)


def count_flops(fn, *args, **kwargs) -> Flops:
    """FLOPs of one call `fn(*args, **kwargs)` (arrays or shape-dtype structs), traced, not run."""
    return jaxpr_flops(jax.make_jaxpr(fn)(*args, **kwargs))


def live_flops(fn, *args, **kwargs) -> Flops:
    """`count_flops` of what the outputs depend on: a trace keeps every equation, XLA drops those
    no output needs (a hand-written VJP's parameter cotangents, when only the input's gradient is
    taken), and so does this count. JAX offers dead-code removal only in `partial_eval`."""
    from jax._src.interpreters import partial_eval

    closed = jax.make_jaxpr(fn)(*args, **kwargs)
    live, _ = partial_eval.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    return jaxpr_flops(live)


def jaxpr_flops(jaxpr: Jaxpr | ClosedJaxpr) -> Flops:
    jaxpr = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
    total = Flops()
    for eqn in jaxpr.eqns:
        total = total + _eqn_flops(eqn)
    return total


def _size(var) -> int:
    return math.prod(var.aval.shape)


def _eqn_flops(eqn: JaxprEqn) -> Flops:
    name = eqn.primitive.name
    if name == "dot_general":
        (lhs_contracting, _), _ = eqn.params["dimension_numbers"]
        contraction = math.prod(eqn.invars[0].aval.shape[d] for d in lhs_contracting)
        return Flops(matmul=2.0 * _size(eqn.outvars[0]) * contraction)
    if name == "conv_general_dilated":
        return Flops(matmul=_conv_flops(eqn))
    if name in ELEMENTWISE:
        return Flops(elementwise=float(sum(_size(v) for v in eqn.outvars)))
    if name in REDUCTIONS:
        return Flops(elementwise=float(_size(eqn.invars[0])))
    if name == "scan":
        return jaxpr_flops(eqn.params["jaxpr"]).times(eqn.params["length"])
    if name == "while":
        body, cond = jaxpr_flops(eqn.params["body_jaxpr"]), jaxpr_flops(eqn.params["cond_jaxpr"])
        trips = _while_trip_count(eqn)
        if trips is None:
            return body + cond + Flops(while_loops_counted_once=1)
        return body.times(trips) + cond.times(trips + 1)
    if name == "cond":
        return max((jaxpr_flops(branch) for branch in eqn.params["branches"]), key=lambda f: f.total)
    total = Flops()
    for inner in jaxprs_in_params(eqn.params):
        total = total + jaxpr_flops(inner)
    return total


def _conv_flops(eqn: JaxprEqn) -> float:
    lhs, rhs = (v.aval.shape for v in eqn.invars)
    out = eqn.outvars[0].aval.shape
    params = eqn.params
    lhs_spec, rhs_spec, out_spec = params["dimension_numbers"]
    taps = 1
    for i, (low, _) in enumerate(params["padding"]):
        # Positions in the padded, input-dilated coordinates: o * stride + k * rhs_dilation - low.
        lhs_dilation = params["lhs_dilation"][i]
        positions = (np.arange(out[out_spec[2 + i]])[:, None] * params["window_strides"][i]
                     + np.arange(rhs[rhs_spec[2 + i]])[None, :] * params["rhs_dilation"][i] - low)
        on_input = (positions >= 0) & (positions <= (lhs[lhs_spec[2 + i]] - 1) * lhs_dilation)
        taps *= int(np.sum(on_input & (positions % lhs_dilation == 0)))
    return 2.0 * out[out_spec[0]] * out[out_spec[1]] * rhs[rhs_spec[1]] * taps


def _while_trip_count(eqn: JaxprEqn) -> int | None:
    """Trips of a `while` whose condition is `carry[k] < N` (N a literal), `carry[k]` starting at
    a literal and the body adding 1 to it; None for any other loop."""
    cond, body = eqn.params["cond_jaxpr"].jaxpr, eqn.params["body_jaxpr"].jaxpr
    cond_consts, body_consts = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    test = next((e for e in cond.eqns if e.outvars[0] == cond.outvars[0]), None)
    if test is None or test.primitive.name != "lt" or not isinstance(test.invars[1], Literal):
        return None
    counter = test.invars[0]
    if isinstance(counter, Literal) or counter not in cond.invars[cond_consts:]:
        return None
    k = cond.invars[cond_consts:].index(counter)
    start = eqn.invars[cond_consts + body_consts + k]
    step = next((e for e in body.eqns if e.outvars[0] == body.outvars[k]), None)
    if (not isinstance(start, Literal) or step is None or step.primitive.name != "add"
            or step.invars[0] != body.invars[body_consts + k]
            or not isinstance(step.invars[1], Literal) or step.invars[1].val != 1):
        return None
    return max(0, int(test.invars[1].val) - int(start.val))
