"""Dropout's cost: `jcaps.ops.dropout` (8 or 16 random bits per element) against a mask from
`jax.random.bernoulli` (32 bits per element), forward and forward + backward, at SGM's shapes.

    python -m benchmarks.dropout_mask --out DIR [--repeats 10] [--tiny]

Shapes: the encoder's word vectors [64, 200, 512] and a BiLSTM layer's outputs [64, 200, 1024]
(SGM at the reference sizes, batch 64, source 200), each at rate 0.5 (8 bits) and 0.1 (16 bits).
Both sides are jitted, compiled before timing, medians of `--repeats` (`throughput.py`'s
`median_seconds`). Writes DIR/results.json: {"<shape>@<rate>": {"bernoulli_s", "jcaps_s",
"ratio", "bernoulli_grad_s", "jcaps_grad_s", "grad_ratio"}, "_run": {versions, devices, and
commit, date, machine, load: `recording.provenance.run_metadata`}}. `--tiny`: the one shape [4, 12, 16], one
repeat (seconds; the tests run it). Needs no data.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from jcaps.ops.regularisation import dropout
from recording.provenance import run_metadata
from recording.results import write_results
from recording.timing import median_seconds

SHAPES = {"embeddings": (64, 200, 512), "layer_outputs": (64, 200, 1024)}
TINY_SHAPES = {"embeddings": (4, 12, 16)}
RATES = (0.5, 0.1)


def bernoulli_dropout(x: jax.Array, *, rate: float, key: jax.Array) -> jax.Array:
    """Inverted dropout as `flax.linen.Dropout` draws it."""
    keep = jax.random.bernoulli(key, 1 - rate, x.shape)
    return jnp.where(keep, x / (1 - rate), jnp.zeros_like(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, one repeat (seconds)")
    args = parser.parse_args()
    repeats, shapes = (1, TINY_SHAPES) if args.tiny else (args.repeats, SHAPES)
    results = {"_run": {"jax": jax.__version__, "devices": str(jax.devices()), **run_metadata(args.tiny)}}
    key = jax.random.key(0)
    for name, shape in shapes.items():
        x = jax.random.normal(jax.random.key(1), shape)
        for rate in RATES:
            row = {}
            for side, fn in (("bernoulli", bernoulli_dropout), ("jcaps", dropout)):
                forward = jax.jit(lambda x, key, fn=fn: fn(x, rate=rate, key=key))
                grad = jax.jit(jax.grad(lambda x, key, fn=fn: jnp.sum(fn(x, rate=rate, key=key) * x)))
                row[f"{side}_s"] = median_seconds(lambda: forward(x, key), repeats)
                row[f"{side}_grad_s"] = median_seconds(lambda: grad(x, key), repeats)
            row["ratio"] = row["jcaps_s"] / row["bernoulli_s"]
            row["grad_ratio"] = row["jcaps_grad_s"] / row["bernoulli_grad_s"]
            results[f"{name}{list(shape)}@{rate}"] = row
            print(f"{name} {shape} rate {rate}: " + ", ".join(f"{k} {v:.4f}" for k, v in row.items()), flush=True)
            write_results(args.out, results)


if __name__ == "__main__":
    main()
