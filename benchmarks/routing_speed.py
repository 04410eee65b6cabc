"""Routing speed: jcaps `dynamic_routing` and `kmeans_routing` under `jit` against NumPy.

    python -m benchmarks.routing_speed --out /tmp/routing_speed [--quick | --tiny]

Batch 256, in_caps I in {16, 32, 128}, out_caps J in {4, 14}, capsule size 16, 3 iterations,
float32; k-means uses its default cosine similarity. Two passes: `forward` (v and c) and
`forward_backward` (the gradient of the sum of output capsule lengths with respect to u_hat).

JAX: `jit`, compile time reported apart (`jax_compile_s`), one warm-up call, then the median of
repeated calls, each synchronised with `block_until_ready`. NumPy: the same algorithm with
vectorised array ops and a Python loop over iterations; its backward pass is written by hand
through the unrolled iterations from saved intermediates, and is checked against `jax.grad`
before any timing. Writes DIR/results.json, `{"batch", "dim", "iterations", "rows": [...],
"_run": {commit, date, machine, load: `recording.provenance.run_metadata`}}` with rows
`{"routing", "I", "J", "pass", "jax_s", "numpy_s", "ratio", "jax_compile_s"}`,
ratio = numpy_s / jax_s (results of earlier versions are the list of rows alone), and prints a
Markdown table. `--quick` takes fewer repeats; `--tiny` times batch 4, I = 4, J = 2 once (seconds;
the tests run it). Time it on an idle machine: a second busy process on 2 cores distorts every
number.
"""
import argparse
import json
import os
import statistics
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.ops import capsules
from recording.provenance import run_metadata

DIM = 16
ITERATIONS = 3
EPS = 1e-7


class Grid(NamedTuple):
    """The shapes timed: every (I, J) pair at one batch size, and the repeats of each side."""

    batch: int
    in_caps: tuple[int, ...]
    out_caps: tuple[int, ...]
    jax_repeats: int
    numpy_repeats: int


GRID = Grid(256, (16, 32, 128), (4, 14), 30, 10)
QUICK_GRID = GRID._replace(jax_repeats=5, numpy_repeats=2)
TINY_GRID = Grid(4, (4,), (2,), 1, 1)


# --------------------------------------------------------------------------- NumPy pieces


def np_squash(s):
    q = np.sum(s * s, axis=-1, keepdims=True)
    return q / (1.0 + q) * s / np.sqrt(q + EPS)


def np_squash_vjp(s, g):
    """Gradient of <g, squash(s)> w.r.t. s; squash(s) = f(q) s with q = |s|^2."""
    q = np.sum(s * s, axis=-1, keepdims=True)
    norm = np.sqrt(q + EPS)
    f = q / ((1.0 + q) * norm)
    df_dq = 1.0 / ((1.0 + q) * norm) - f / (1.0 + q) - f / (2.0 * (q + EPS))
    return f * g + 2.0 * df_dq * np.sum(s * g, axis=-1, keepdims=True) * s


def np_softmax(logits):
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_softmax_vjp(c, g):
    return c * (g - np.sum(c * g, axis=-1, keepdims=True))


def np_normalize(x):
    norm = np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + EPS)
    return x / norm, norm


def np_normalize_vjp(x, norm, g):
    return g / norm - x * np.sum(x * g, axis=-1, keepdims=True) / norm**3


def weighted_sum(c, u):
    return np.einsum("bij,bijd->bjd", c, u)


def agreement(u, v):
    return np.einsum("bijd,bjd->bij", u, v)


def np_dynamic_routing(u, r):
    """Returns v, c and the intermediates the backward pass needs."""
    logits = np.zeros(u.shape[:-1], u.dtype)
    saved = []
    for t in range(r):
        c = np_softmax(logits)
        s = weighted_sum(c, u)
        v = np_squash(s)
        saved.append((c, s, v))
        if t < r - 1:
            logits = logits + agreement(u, v)
    return v, c, saved


def np_dynamic_routing_vjp(u, saved, g_v):
    g_u = np.zeros_like(u)
    g_logits = np.zeros(u.shape[:-1], u.dtype)
    for t in reversed(range(len(saved))):
        c, s, v = saved[t]
        if t < len(saved) - 1:
            # logits_{t+1} = logits_t + <u, v_t>: the gradient reaches both u and v_t.
            g_u += g_logits[..., None] * v[:, None]
            g_v = weighted_sum(g_logits, u)
        g_s = np_squash_vjp(s, g_v)
        g_u += c[..., None] * g_s[:, None]
        g_logits = g_logits + np_softmax_vjp(c, agreement(u, g_s))
    return g_u


def np_kmeans_routing(u, r):
    """Cosine k-means routing; returns squash(v), c and the intermediates for the backward."""
    keys, key_norm = np_normalize(u)
    v = u.sum(axis=1) / u.shape[2]
    saved = []
    for _ in range(r):
        direction, norm = np_normalize(v)
        c = np_softmax(agreement(keys, direction))
        saved.append((v, norm, direction, c))
        v = weighted_sum(c, u)
    return np_squash(v), c, (keys, key_norm, saved, v)


def np_kmeans_routing_vjp(u, cache, g_out):
    keys, key_norm, saved, v_last = cache
    g_v = np_squash_vjp(v_last, g_out)
    g_u = np.zeros_like(u)
    g_keys = np.zeros_like(u)
    for v, norm, direction, c in reversed(saved):
        g_u += c[..., None] * g_v[:, None]
        g_logits = np_softmax_vjp(c, agreement(u, g_v))
        g_keys += g_logits[..., None] * direction[:, None]
        g_v = np_normalize_vjp(v, norm, weighted_sum(g_logits, keys))
    g_u += g_v[:, None] / u.shape[2]
    return g_u + np_normalize_vjp(u, key_norm, g_keys)


def length_grad(v):
    """Gradient of sum_j |v_j| w.r.t. v."""
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


NUMPY = {
    "dynamic": (np_dynamic_routing, np_dynamic_routing_vjp),
    "kmeans": (np_kmeans_routing, np_kmeans_routing_vjp),
}
JAX = {
    "dynamic": lambda u: capsules.dynamic_routing(u, num_iterations=ITERATIONS),
    "kmeans": lambda u: capsules.kmeans_routing(u, num_iterations=ITERATIONS),
}


def numpy_passes(routing):
    forward, vjp = NUMPY[routing]

    def forward_backward(u):
        v, _, cache = forward(u, ITERATIONS)
        return vjp(u, cache, length_grad(v))

    return {"forward": lambda u: forward(u, ITERATIONS)[:2], "forward_backward": forward_backward}


def jax_passes(routing):
    route = JAX[routing]

    def total_length(u):
        return jnp.sum(jnp.linalg.norm(route(u)[0], axis=-1))

    return {"forward": route, "forward_backward": jax.grad(total_length)}


# --------------------------------------------------------------------------- timing


def median_seconds(fn, arg, repeats):
    fn(arg)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(arg))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def check_agreement(name, jax_out, numpy_out):
    for a, b in zip(jax.tree.leaves(jax_out), jax.tree.leaves(numpy_out)):
        a, b = np.asarray(a), np.asarray(b)
        scale = np.max(np.abs(b)) + 1e-12
        if np.max(np.abs(a - b)) > 1e-3 * scale:
            raise AssertionError(f"{name}: JAX and NumPy disagree ({np.max(np.abs(a - b)):.3g})")


def run(grid: Grid):
    rng = np.random.default_rng(0)
    results = []
    for routing in ("dynamic", "kmeans"):
        for n_in in grid.in_caps:
            for n_out in grid.out_caps:
                u_np = rng.normal(size=(grid.batch, n_in, n_out, DIM)).astype(np.float32)
                u = jnp.asarray(u_np)
                jaxes, numpys = jax_passes(routing), numpy_passes(routing)
                for pass_name in ("forward", "forward_backward"):
                    start = time.perf_counter()
                    compiled = jax.jit(jaxes[pass_name]).lower(u).compile()
                    compile_s = time.perf_counter() - start
                    name = f"{routing} I={n_in} J={n_out} {pass_name}"
                    check_agreement(name, compiled(u), numpys[pass_name](u_np))
                    jax_s = median_seconds(compiled, u, grid.jax_repeats)
                    numpy_s = median_seconds(numpys[pass_name], u_np, grid.numpy_repeats)
                    results.append({
                        "routing": routing,
                        "I": n_in,
                        "J": n_out,
                        "pass": pass_name,
                        "jax_s": jax_s,
                        "numpy_s": numpy_s,
                        "ratio": numpy_s / jax_s,
                        "jax_compile_s": compile_s,
                    })
                    print(f"{name}: jax {jax_s * 1e3:.2f} ms, numpy {numpy_s * 1e3:.2f} ms",
                          flush=True)
    return results


def markdown_table(results, batch):
    lines = [
        f"batch {batch}, capsule size {DIM}, {ITERATIONS} iterations, float32, "
        f"{jax.devices()[0].platform}",
        "",
        "| routing | I | J | pass | jax ms | numpy ms | numpy / jax | jax compile s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['routing']} | {r['I']} | {r['J']} | {r['pass']} | {r['jax_s'] * 1e3:.2f} "
            f"| {r['numpy_s'] * 1e3:.2f} | {r['ratio']:.1f} | {r['jax_compile_s']:.2f} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for results.json")
    budgets = parser.add_mutually_exclusive_group()
    budgets.add_argument("--quick", action="store_true", help="fewer repeats")
    budgets.add_argument("--tiny", action="store_true", help="one tiny shape, timed once (seconds)")
    args = parser.parse_args()
    grid = TINY_GRID if args.tiny else QUICK_GRID if args.quick else GRID
    metadata = run_metadata(args.tiny)
    rows = run(grid)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"batch": grid.batch, "dim": DIM, "iterations": ITERATIONS, "rows": rows, "_run": metadata}, f,
                  indent=2)
    print(markdown_table(rows, grid.batch))


if __name__ == "__main__":
    main()
