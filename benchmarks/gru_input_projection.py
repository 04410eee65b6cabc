"""Where a bidirectional GRU projects its inputs: all steps in one product before the loop, or
each step's inside it (`jcaps.ops.recurrent.IN_LOOP_PROJECTION_ROWS` picks by the rows).

    python -m benchmarks.gru_input_projection --out DIR [--rows 32,64,128,256,1024]
        [--length 64] [--hidden 128] [--inputs 64,256] [--repeats 20] [--tiny]

The forward pass of one layer (`bidirectional_gru`'s two paths, called directly) on random
inputs, jitted and compiled before timing; the median of `--repeats` calls. Writes
DIR/results.json: {"<inputs>": {"<rows>": {"before_loop_s", "in_loop_s"}}, "_run": {...}}.
`--tiny`: 4 and 8 rows of 8 steps, 2 repeats.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.ops import recurrent
from recording.provenance import run_metadata
from recording.results import write_results


def seconds(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows", default="32,64,128,256,1024")
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--inputs", default="64,256")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    if args.tiny:
        args.rows, args.length, args.hidden, args.inputs, args.repeats = "4,8", 8, 4, "4", 2
    load = os.getloadavg()[0]
    before_loop = jax.jit(lambda *a: recurrent._bidirectional(recurrent._gru_states, *a, None))
    in_loop = jax.jit(lambda *a: recurrent._bidirectional_gru_projecting_in_loop(*a, None))
    results: dict = {}
    key = jax.random.key(0)
    for inputs in (int(d) for d in args.inputs.split(",")):
        h = args.hidden
        weights = [jax.random.normal(k, shape) * 0.1 for k, shape in zip(
            jax.random.split(key, 4), ((2, inputs, 3 * h), (2, 3 * h), (2, h, 3 * h), (2, 3 * h)))]
        for rows in (int(r) for r in args.rows.split(",")):
            x = jax.random.normal(key, (rows, args.length, inputs))
            row = {"before_loop_s": seconds(before_loop, x, *weights, repeats=args.repeats),
                   "in_loop_s": seconds(in_loop, x, *weights, repeats=args.repeats)}
            results.setdefault(str(inputs), {})[str(rows)] = row
            print(inputs, rows, row, flush=True)
            write_results(args.out, {**results, "in_loop_from_rows": recurrent.IN_LOOP_PROJECTION_ROWS,
                                     "_run": run_metadata(args.tiny, load)})


if __name__ == "__main__":
    main()
