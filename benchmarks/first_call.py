"""The first and the second eager call of each attribution method, against the method under
`jax.jit`, on a small NNX model.

    python -m benchmarks.first_call --out DIR [--repeats 21] [--tiny]

The model (an NNX module: word vectors [B, T, 64] -> a 128-wide tanh layer, max over positions
-> 4 classes; 8,836 parameters) is explained on a batch of 16 texts of 48 positions with each
method of `interpret.METHODS` at its defaults: `method(model, x, target, mask=mask, key=key)`.
Each method runs in a fresh process, as a user's first call does:
  * first_s: the first eager call (tracing, compiling, running), JAX already started by an
    unrelated operation;
  * second_s: the median of `--repeats` further eager calls on the same model, shapes and
    options (the compiled program reused: `jcaps.attribution._compiled`);
  * jitted_s: the median of `--repeats` calls of the method under `jax.jit` with the model as an
    argument (its parameters inputs, as in the eager call's program) after its compiling call,
    the cost of the computation itself; each taken in turn with an eager call;
  * second_over_jitted: their ratio (the cost of an eager call's checks and dispatch).

Writes DIR/results.json: {method: {"first_s", "second_s", "jitted_s", "second_over_jitted"},
"model": {...}, "_run": `recording.provenance.run_metadata`}. `--tiny`: 2 texts of 6
positions, one repeat (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from recording.provenance import run_metadata
from recording.results import write_results

EMBED, HIDDEN, CLASSES = 64, 128, 4


def measure(method: str, batch: int, length: int, repeats: int) -> dict:
    """The timings of one method, in this process (a fresh one: see `main`)."""
    import statistics
    import time

    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jcaps import interpret

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.hidden = nnx.Linear(EMBED, HIDDEN, rngs=rngs)
            self.out = nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

        def __call__(self, x):
            return self.out(jnp.tanh(self.hidden(x)).max(axis=1))

    model = Model(nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (batch, length, EMBED))
    mask = jnp.arange(length)[None] < jnp.maximum(length - jnp.arange(batch)[:, None], 1)
    target = jnp.argmax(model(x), axis=-1).block_until_ready()  # JAX started before the clock
    entry = interpret.METHODS[method]
    keyword = {"mask": mask, **({"key": jax.random.key(2)} if entry.needs_key else {})}

    def timed(call) -> float:
        start = time.perf_counter()
        jax.block_until_ready(call())
        return time.perf_counter() - start

    first = timed(lambda: entry.function(model, x, target, **keyword))
    jitted_method = jax.jit(lambda module, x, target, keyword: entry.function(module, x, target, **keyword))
    jax.block_until_ready(jitted_method(model, x, target, keyword))
    seconds, jitted_seconds = [], []
    for _ in range(repeats):  # in turn, so that both see the machine alike
        seconds.append(timed(lambda: entry.function(model, x, target, **keyword)))
        jitted_seconds.append(timed(lambda: jitted_method(model, x, target, keyword)))
    second, jitted = statistics.median(seconds), statistics.median(jitted_seconds)
    return {
        "first_s": round(first, 4),
        "second_s": round(second, 6),
        "jitted_s": round(jitted, 6),
        "second_over_jitted": round(second / jitted, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--method", help=argparse.SUPPRESS)  # one method, in a process of its own
    parser.add_argument("--batch", type=int, default=16, help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, default=48, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.method:
        print(json.dumps(measure(args.method, args.batch, args.length, args.repeats)))
        return
    metadata = run_metadata(args.tiny)
    if args.tiny:
        args.batch, args.length, args.repeats = 2, 6, 1
    from jcaps.attribution.methods import METHODS  # the table alone: no JAX in this process

    results: dict = {
        "model": {
            "kind": "flax.nnx",
            "embed": EMBED,
            "hidden": HIDDEN,
            "classes": CLASSES,
            "parameters": EMBED * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES,
            "batch": args.batch,
            "length": args.length,
            "repeats": args.repeats,
        },
        "_run": metadata,
    }
    environment = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    for method in METHODS:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.first_call",
                "--out",
                args.out,
                "--method",
                method,
                "--batch",
                str(args.batch),
                "--length",
                str(args.length),
                "--repeats",
                str(args.repeats),
            ],
            capture_output=True,
            text=True,
            env=environment,
            check=False,
        )
        if done.returncode:
            raise SystemExit(
                f"{method}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
            )
        results[method] = json.loads(done.stdout.strip().splitlines()[-1])
        print(method, results[method], flush=True)
    write_results(args.out, results)


if __name__ == "__main__":
    main()
