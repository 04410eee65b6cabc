"""The memory `max_rows` bounds: integrated gradients with 300 steps on CCCapsNet (batch 32,
length 256), under its default and with every step in one call.

    python -m benchmarks.max_rows_memory --out DIR [--steps 300] [--batch 32] [--length 256] [--tiny]

The model is CCCapsNet of `configs/cccapsnet_ag_news.py` (vocabulary 62,535 words, 4 classes,
jcaps' initial parameters: memory does not depend on training), explained as a function of its
composed vectors with the token ids as its side input:
`interpret.integrated_gradients(f, vectors, target, args=(tokens,), n_steps=STEPS, max_rows=M)`.
For each M (`interpret.DEFAULT_MAX_ROWS`, and STEPS x batch: every step in one call) the call is
compiled and XLA's own account of its memory read (`Compiled.memory_analysis()`: the arguments,
the outputs and the temporary buffers XLA allocates, which is what a call needs beyond the
model's parameters). The default is then run once (its wall time recorded, its scores checked
finite); that the scores do not depend on `max_rows` is a test
(tests/interpret/test_any_model.py).

Writes DIR/results.json: {"model", "batch", "length", "steps", "parameters_mib", "by_max_rows":
{M: {"rows_per_call", "calls", "argument_mib", "output_mib", "temp_mib", "total_mib"}},
"default_max_rows", "default_run_seconds", "_run": `recording.provenance.run_metadata`}.
`--tiny`: the smoke-sized model, 8 steps, batch 2, length 12 (the tests run it).
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.vs_captum import NUM_CLASSES, VOCAB_SIZE, jcaps_model
from jcaps import interpret
from jcaps.data.vocab import NUM_SPECIAL
from recording.provenance import run_metadata
from recording.results import write_results

MIB = 1 << 20


def memory_of(compiled) -> dict:
    """XLA's account of a compiled call's memory, in MiB."""
    analysis = compiled.memory_analysis()
    sizes = {
        "argument_mib": analysis.argument_size_in_bytes / MIB,
        "output_mib": analysis.output_size_in_bytes / MIB,
        "temp_mib": analysis.temp_size_in_bytes / MIB,
    }
    sizes["total_mib"] = sum(sizes.values())
    return {name: round(value, 1) for name, value in sizes.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    metadata = run_metadata(args.tiny)
    if args.tiny:
        args.steps, args.batch, args.length = 8, 2, 12
    vocab_size = 500 if args.tiny else VOCAB_SIZE
    _, model, params = jcaps_model("cccapsnet", args.tiny, vocab_size)
    tokens = jnp.asarray(
        np.random.default_rng(0).integers(NUM_SPECIAL, vocab_size, size=(args.batch, args.length)), jnp.int32
    )
    outputs = model.apply({"params": params}, tokens, train=False)
    vectors, target = outputs.embeddings, jnp.argmax(outputs.scores, axis=-1)

    def f(e, tokens):
        return model.apply({"params": params}, tokens, embeddings=e, train=False).scores

    every_step = args.steps * args.batch
    results: dict = {
        "model": "cccapsnet",
        "batch": args.batch,
        "length": args.length,
        "steps": args.steps,
        "num_classes": NUM_CLASSES,
        "parameters_mib": round(sum(p.nbytes for p in jax.tree.leaves(params)) / MIB, 1),
        "default_max_rows": interpret.DEFAULT_MAX_ROWS,
        "by_max_rows": {},
        "_run": metadata,
    }
    calls = {}
    for max_rows in (interpret.DEFAULT_MAX_ROWS, every_step):
        explain = jax.jit(functools.partial(interpret.integrated_gradients, f, n_steps=args.steps, max_rows=max_rows))
        compiled = explain.lower(vectors, target, args=(tokens,)).compile()
        rows_per_call = min(args.steps, max(1, max_rows // args.batch)) * args.batch
        results["by_max_rows"][str(max_rows)] = {
            "rows_per_call": rows_per_call,
            "calls": -(-every_step // rows_per_call),
            **memory_of(compiled),
        }
        calls[max_rows] = compiled
    start = time.perf_counter()
    scores = jax.block_until_ready(calls[interpret.DEFAULT_MAX_ROWS](vectors, target, args=(tokens,)))
    results["default_run_seconds"] = round(time.perf_counter() - start, 2)
    if not np.all(np.isfinite(np.asarray(scores))):
        raise SystemExit("integrated gradients returned non-finite scores")
    write_results(args.out, results)
    print({m: r["total_mib"] for m, r in results["by_max_rows"].items()}, results["default_run_seconds"], "s")


if __name__ == "__main__":
    main()
