"""Dilated causal convolution network throughput over input length (characters per second).

    python -m benchmarks.dilated_fcn_speed --out DIR [--lengths 64,256,1024,4096] [--batch 32]
        [--attention none] [--repeats 3] [--tiny]

For each length it times, through the harness (`benchmarks/throughput.py`: compile measured
separately, warm-up, `block_until_ready`, median of `--repeats`), one optimiser step and one
evaluation step of `configs/dilated_fcn_emoji.py` on random character ids, and writes

    DIR/results.json  {"<length>": {"train_chars_per_s", "eval_chars_per_s", "train_step_s",
                       "eval_step_s", "compile_s", "peak_bytes", "batch_size", "length", ...},
                       "_run": {commit, date, machine, load: `recording.provenance.run_metadata`}}

The network has no fixed input size: every length compiles once and runs. `--tiny` times the
config's `smoke` network at length 16, batch 4, one repeat: a check that it runs
(seconds; the tests run it). Needs no data.
"""

from __future__ import annotations

import argparse
import json
import os


from benchmarks.throughput import measure
from jcaps.train.config import load
from recording.provenance import run_metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {"lengths": "16", "batch": 4, "vocab_size": 50, "repeats": 1}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--lengths", default="64,256,1024,4096")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--attention", default="none")
    parser.add_argument("--vocab_size", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="the smoke network at tiny shapes, one repeat (seconds)")
    args = parser.parse_args()
    if args.tiny:
        vars(args).update(TINY)
    results = {"_run": run_metadata(args.tiny)}
    config = load(os.path.join(ROOT, "configs", "dilated_fcn_emoji.py") + f":{args.attention}"
                  + (",smoke" if args.tiny else ""))
    config.train.batch_size = args.batch
    os.makedirs(args.out, exist_ok=True)
    for length in (int(t) for t in args.lengths.split(",")):
        row = measure(config, args.vocab_size, 20, length, args.repeats)
        row["train_chars_per_s"] = args.batch * length / row["train_step_s"]
        row["eval_chars_per_s"] = args.batch * length / row["eval_step_s"]
        row.update(batch_size=args.batch, length=length, attention=args.attention)
        results[str(length)] = row
        print(f"length {length}: {json.dumps(row)}", flush=True)
        with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
