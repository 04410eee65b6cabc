"""Speed of the input-cell attention LSTM: the O(T) causal pool against the O(T^2) masked one.

    python -m benchmarks.input_cell_speed --out DIR [--lengths 100,1000,5000] [--batch 50]
        [--features 100] [--repeats 5] [--max_quadratic_gib 14] [--tiny]

For each length T it compiles the model's forward + backward (gradient of the mean
cross-entropy with respect to all parameters) with the model's `pool` "linear",
`jcaps.ops.causal_softmax_pool` (the streaming scan), and "quadratic",
`causal_softmax_pool_quadratic` (a [B, r, T, T] masked softmax, what a direct implementation of
the equations computes), checks that the two losses and gradients agree, and writes
`DIR/results.json`:

    {"<T>": {"linear_s", "quadratic_s", "ratio", "max_abs_diff", "linear_peak_bytes", "quadratic_peak_bytes",
             "batch", "features", "device"},
     "_run": {commit, date, machine, load: `recording.provenance.run_metadata`}}

Times are medians of `--repeats` device-synchronised runs after a warm-up; peak bytes are XLA's
memory analysis of the compiled program (arguments + outputs + temporaries). A quadratic
program whose estimate exceeds `--max_quadratic_gib` is not run: its `quadratic_s`, `ratio` and
`max_abs_diff` are null and `quadratic_skipped` says why. `--tiny`: length 8, batch 2, 4
features, one repeat (seconds; the tests run it). Needs no data.
"""

from __future__ import annotations

import argparse
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jcaps.models.input_cell_lstm import InputCellLSTM
from jcaps.ops.pooling import causal_softmax_pool, causal_softmax_pool_quadratic
from recording.provenance import run_metadata
from recording.timing import median_seconds

NUM_CLASSES = 2
TINY = {"lengths": "8", "batch": 2, "features": 4, "repeats": 1}


def loss_and_grad_fn(model):
    def loss(params, series, mask, labels):
        logits = model.apply({"params": params}, series, mask, train=False).scores
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))

    return jax.jit(jax.value_and_grad(loss))


def peak_bytes(compiled) -> int:
    analysis = compiled.memory_analysis()
    return int(analysis.argument_size_in_bytes + analysis.output_size_in_bytes + analysis.temp_size_in_bytes)


def measure(length: int, batch: int, features: int, repeats: int, max_quadratic_bytes: float) -> dict:
    rng = np.random.default_rng(0)
    series = jnp.asarray(rng.normal(size=(batch, length, features)).astype(np.float32))
    mask = jnp.ones((batch, length), bool)
    labels = jnp.asarray(rng.integers(0, NUM_CLASSES, size=(batch,)), jnp.int32)
    linear_model = InputCellLSTM(NUM_CLASSES, variant="input_cell", pool=causal_softmax_pool)
    # Jitted: one compile, where the eager initialisation compiles each of its many small ops.
    params = jax.jit(linear_model.init)(jax.random.key(0), series[:, :4], mask[:, :4])["params"]
    result = {}
    outputs = {}
    for name, pool in (("linear", causal_softmax_pool), ("quadratic", causal_softmax_pool_quadratic)):
        model = InputCellLSTM(NUM_CLASSES, variant="input_cell", pool=pool)
        compiled = loss_and_grad_fn(model).lower(params, series, mask, labels).compile()
        result[f"{name}_peak_bytes"] = peak_bytes(compiled)
        if name == "quadratic" and result[f"{name}_peak_bytes"] > max_quadratic_bytes:
            result.update(quadratic_s=None, ratio=None, max_abs_diff=None,
                          quadratic_skipped=f"needs {result[f'{name}_peak_bytes'] / 2**30:.1f} GiB, over the limit")
            break
        result[f"{name}_s"] = median_seconds(lambda run=compiled: run(params, series, mask, labels), repeats, warmup=1)
        outputs[name] = compiled(params, series, mask, labels)
    if "quadratic" in outputs:
        (loss_l, grads_l), (loss_q, grads_q) = outputs["linear"], outputs["quadratic"]
        diffs = [jnp.max(jnp.abs(a - b)) for a, b in zip(jax.tree.leaves(grads_l), jax.tree.leaves(grads_q))]
        result["max_abs_diff"] = float(max([jnp.abs(loss_l - loss_q)] + diffs))
        result["ratio"] = result["quadratic_s"] / result["linear_s"]
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--lengths", default="100,1000,5000")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max_quadratic_gib", type=float, default=14.0)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, one repeat (seconds)")
    args = parser.parse_args()
    if args.tiny:
        vars(args).update(TINY)
    os.makedirs(args.out, exist_ok=True)
    results = {"_run": run_metadata(args.tiny)}
    for length in (int(t) for t in args.lengths.split(",")):
        result = measure(length, args.batch, args.features, args.repeats, args.max_quadratic_gib * 2**30)
        results[str(length)] = {**result, "batch": args.batch, "features": args.features,
                                "device": jax.devices()[0].device_kind}
        print(f"T={length}: {json.dumps(result)}", flush=True)
        with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
