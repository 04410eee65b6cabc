"""SGM's encoder with each `model.rnn_impl`: the scan against cuDNN's fused LSTM, forward + backward.

    python -m benchmarks.rnn_impl_speed --out DIR [--batch 64] [--length 200] [--layers 3]
        [--hidden 512] [--embedding 512] [--repeats 5] [--tiny]

Times, through one `jax.jit` compiled before timing (median of `--repeats` after warm-up), the
encoder of `jcaps.models.sgm` (embedding, `--layers` bidirectional LSTM layers of `--hidden`,
no dropout) on random tokens whose lengths spread from the full `--length` down to a quarter of
it (trailing pads): its outputs and the gradients of sum(outputs * g) with respect to every
parameter, with rnn_impl "scan" and "cudnn", same parameters. The defaults are SGM's reference
encoder (docs/performance.md). Without a GPU the "cudnn" row runs the scan (`cudnn_ran`
false). Writes

    DIR/results.json  {"scan": {"seconds", "compile_s"}, "cudnn": {...}, "cudnn_ran",
                       "scan_over_cudnn", "max_abs_output_difference", "device", shape keys,
                       "_run": {commit, date, machine, load: `recording.provenance.run_metadata`}}

`--tiny`: one layer of 8, batch 2, length 8, vocabulary 50, one repeat (seconds; the tests run
it).
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.models.cudnn_lstm import cudnn_unavailable
from jcaps.models.sgm import BiLSTMEncoder
from recording.provenance import run_metadata
from recording.results import write_results
from recording.timing import median_seconds

TINY = {"batch": 2, "length": 8, "layers": 1, "hidden": 8, "embedding": 8, "vocab_size": 50, "repeats": 1}


def encoder_step(args, rnn_impl: str):
    """The jitted (outputs, parameter gradients) of the encoder with `rnn_impl`."""
    encoder = BiLSTMEncoder(args.vocab_size, args.embedding, args.hidden, args.layers, 0.0, rnn_impl=rnn_impl)
    rng = np.random.default_rng(0)
    lengths = np.linspace(args.length, max(1, args.length // 4), args.batch).astype(np.int32)
    tokens = rng.integers(1, args.vocab_size, size=(args.batch, args.length), dtype=np.int32)
    tokens[np.arange(args.length)[None, :] >= lengths[:, None]] = 0
    tokens = jnp.asarray(tokens)
    # Jitted: one compile, where the eager initialisation compiles each of its many small ops.
    params = jax.jit(encoder.init)(jax.random.key(0), tokens[:, :4])["params"]
    cotangent = jnp.asarray(rng.normal(size=(args.batch, args.length, 2 * args.hidden)).astype(np.float32))

    def objective(params):
        outputs = encoder.apply({"params": params}, tokens)[0]
        return jnp.sum(outputs * cotangent), outputs

    return jax.jit(jax.grad(objective, has_aux=True)), params


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--embedding", type=int, default=512)
    parser.add_argument("--vocab_size", type=int, default=50000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, one repeat (seconds)")
    args = parser.parse_args()
    if args.tiny:
        vars(args).update(TINY)
    results = {key: getattr(args, key) for key in ("batch", "length", "layers", "hidden", "embedding", "vocab_size")}
    results["_run"] = run_metadata(args.tiny)
    outputs = {}
    for rnn_impl in ("scan", "cudnn"):
        step, params = encoder_step(args, rnn_impl)
        start = time.perf_counter()
        compiled = step.lower(params).compile()
        compile_s = time.perf_counter() - start
        outputs[rnn_impl] = np.asarray(compiled(params)[1])
        seconds = median_seconds(functools.partial(compiled, params), args.repeats)
        results[rnn_impl] = {"seconds": seconds, "compile_s": compile_s}
        print(f"{rnn_impl}: {json.dumps(results[rnn_impl])}", flush=True)
    results.update(
        cudnn_ran=cudnn_unavailable(jnp.float32) is None,
        scan_over_cudnn=results["scan"]["seconds"] / results["cudnn"]["seconds"],
        max_abs_output_difference=float(np.max(np.abs(outputs["scan"] - outputs["cudnn"]))),
        device=jax.devices()[0].device_kind,
    )
    write_results(args.out, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
