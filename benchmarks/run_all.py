"""Every model's speed, and its distance from what this machine's matrix units can do.

    python -m benchmarks.run_all --out OUT [--quick | --tiny] [--models fasttext_ag_news,...]
        [--dtype float32 | bfloat16] [--no-scaling]

For each model of `BENCH` (a config at its real workload's shape, random inputs: fastText,
iCapsNets Short and Long, CCCapsNet, the input-cell LSTM, the dilated FCN, SGM, SGM + GE and
binary relevance) it measures, through the harness `benchmarks/throughput.py`: compile time of
the train step, train and eval examples/s (median of repeated device-synchronised steps after
warm-up), FLOPs per train step and peak memory of the compiled step; for SGM and SGM + GE also
label-set decoding, greedy and beam search (`predict`, timed as `benchmarks/sgm_speed.py`
does). FLOPs are counted on the step's jaxpr with every scan body times its length
(`benchmarks/flops.py`), so `fraction_of_ceiling` is an estimate for the recurrent models too;
XLA's own count, which sees a loop body once, is kept beside it. In the same run it measures
the ceiling: the FLOP/s of a 2048 x 2048 matmul in `--dtype`, the dtype of the models'
activations (`train.dtype`; parameters stay float32). It writes

    OUT/results.json   {"ceiling_flops", "models": {"<config>": {"compile_s", "train_examples_per_s",
                        "eval_examples_per_s", "flops_per_step", "xla_flops_per_step",
                        "fraction_of_ceiling", "peak_bytes", ["greedy_examples_per_s",
                        "beam_examples_per_s"], "batch_size", "length", ...}},
                        "_run": {commit, date, machine, load: `recording.provenance.run_metadata`}}
    OUT/scaling.json   {"<config>": {"length": {L: examples/s}, "batch": {B: examples/s}}}
    OUT/scaling_length.png, OUT/scaling_batch.png

and prints a Markdown table. `--quick` (under 15 minutes on an idle 2-core CPU) times 3 steps
instead of 10 and adds one point a scaling axis, and none for a model whose train step takes
longer than `QUICK_SCALING_MAX_STEP_S`; `--no-scaling` measures only each model's own shape.
`--tiny` times each model's `:smoke` config at batch 4,
length 16, input size at most 50, once, against a 256 x 256 matmul, with no scaling points: a
check that the harness runs every model (seconds a model; the tests run it). A new model joins
with one line in `BENCH`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from benchmarks.sgm_speed import decode_seconds
from benchmarks.throughput import measure
from jcaps.train.config import load
from recording.provenance import run_metadata
from recording.timing import median_seconds

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")

# name: (config, batch, length, input size: vocabulary or features, classes). Shapes of the
# models' real workloads: AG News texts, the box data's 100 x 100 series, tweets in characters
# (padded to buckets of up to 160), Reuters stories at the reference's source length 200 with
# the 90 ModApte topics (label sequences of up to 3 labels + EOS).
BENCH = {
    "fasttext_ag_news": ("fasttext_ag_news.py", 64, 128, 30000, 4),
    "icapsnet_short_ag_news": ("icapsnet_short_ag_news.py", 64, 128, 30000, 4),
    "icapsnet_long_ag_news": ("icapsnet_long_ag_news.py", 16, 32, 30000, 4),
    "cccapsnet_ag_news": ("cccapsnet_ag_news.py", 32, 64, 62535, 4),
    "input_cell_boxes": ("input_cell_boxes.py", 50, 100, 100, 2),
    "dilated_fcn_emoji": ("dilated_fcn_emoji.py", 64, 128, 500, 20),
    "sgm_reuters": ("sgm_reuters.py", 64, 200, 50000, 90),
    "sgm_ge_reuters": ("sgm_ge_reuters.py", 64, 200, 50000, 90),
    "br_reuters": ("br_reuters.py", 64, 200, 50000, 90),
}
SCALING = {"length": (32, 64, 128, 256), "batch": (8, 32, 128)}
QUICK_SCALING = {"length": (32,), "batch": (8,)}
# --quick measures no scaling points for a model whose train step is slower than this: each
# point is one more compile and a dozen steps.
QUICK_SCALING_MAX_STEP_S = 0.3
CEILING_SIZE, TINY_CEILING_SIZE = 2048, 256
TINY_BATCH, TINY_LENGTH, TINY_INPUT_SIZE = 4, 16, 50


def matmul_ceiling(size: int = CEILING_SIZE, repeats: int = 10, dtype: str = "float32") -> float:
    """FLOP/s of a jit-compiled size x size matmul in `dtype`: what the model steps are held to."""
    a = jnp.asarray(np.random.default_rng(0).normal(size=(size, size)).astype(np.float32), dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    seconds = median_seconds(lambda: matmul(a, a), repeats)
    return 2 * size**3 / seconds


def bench_config(name: str, batch: int, tiny: bool, dtype: str):
    path, batch_size, _, _, _ = BENCH[name]
    config = load(os.path.join(CONFIGS, path) + (":smoke" if tiny else ""))
    config.train.batch_size = batch or batch_size
    config.train.dtype = dtype
    return config


def run_model(name: str, ceiling: float, repeats: int, quick: bool, tiny: bool, dtype: str,
              scaling_points: bool = True) -> tuple[dict, dict]:
    _, batch, length, input_size, num_classes = BENCH[name]
    if tiny:
        batch, length, input_size = TINY_BATCH, TINY_LENGTH, min(input_size, TINY_INPUT_SIZE)
    config = bench_config(name, batch, tiny, dtype)
    result = measure(config, input_size, num_classes, length, repeats)
    result["fraction_of_ceiling"] = result["flops_per_step"] / result["train_step_s"] / ceiling
    if config.model.name == "sgm":
        for decoding in ("greedy", "beam"):
            result.update(decode_seconds(config, input_size, batch, length, decoding, repeats))
    # The measured shape is a point of both curves.
    curves = {"length": {length: result["train_examples_per_s"]}, "batch": {batch: result["train_examples_per_s"]}}
    scaling = SCALING
    if tiny or not scaling_points or (quick and result["train_step_s"] > QUICK_SCALING_MAX_STEP_S):
        scaling = {"length": (), "batch": ()}
    elif quick:
        scaling = QUICK_SCALING
    for point in (p for p in scaling["length"] if p != length):
        point_config = bench_config(name, batch, tiny, dtype)
        curves["length"][point] = measure(point_config, input_size, num_classes, point, repeats)["train_examples_per_s"]
    for point in (p for p in scaling["batch"] if p != batch):
        point_config = bench_config(name, point, tiny, dtype)
        curves["batch"][point] = measure(point_config, input_size, num_classes, length, repeats)["train_examples_per_s"]
    return result, curves


def plot_scaling(scaling: dict, axis: str, path: str) -> None:
    figure = Figure(figsize=(5.5, 3.8), layout="constrained")
    axes = figure.add_subplot()
    for name, curves in scaling.items():
        points = sorted(curves[axis].items())
        axes.plot([p for p, _ in points], [v for _, v in points], marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("sequence length" if axis == "length" else "batch size")
    axes.set_ylabel("training examples / s")
    axes.legend(fontsize=7)
    figure.savefig(path, dpi=90)


def markdown(results: dict) -> str:
    size = results["ceiling_size"]
    lines = [
        f"Activations in {results['dtype']}. Ceiling: {results['dtype']} {size}x{size} matmul at {results['ceiling_flops'] / 1e9:.1f} GFLOP/s on {results['device']}.",
        "",
        "GFLOP/step counts every scan step (benchmarks/flops.py); XLA's count, a loop body once, beside it.",
        "",
        ("| model | batch x length | compile s | train ex/s | eval ex/s | greedy ex/s | beam ex/s | GFLOP/step "
         "| XLA GFLOP/step | achieved GFLOP/s | of ceiling | peak MB |"),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["models"].items():
        achieved = r["flops_per_step"] / r["train_step_s"]
        decoding = " | ".join(f"{r[key]:.0f}" if key in r else "-"
                              for key in ("greedy_examples_per_s", "beam_examples_per_s"))
        lines.append(
            f"| {name} | {r['batch_size']} x {r['length']} | {r['compile_s']:.1f} | {r['train_examples_per_s']:.0f} | "
            f"{r['eval_examples_per_s']:.0f} | {decoding} | {r['flops_per_step'] / 1e9:.3f} | "
            f"{r['xla_flops_per_step'] / 1e9:.3f} | {achieved / 1e9:.2f} | "
            f"{100 * r['fraction_of_ceiling']:.1f} % | {r['peak_bytes'] / 2**20:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    budgets = parser.add_mutually_exclusive_group()
    budgets.add_argument("--quick", action="store_true")
    budgets.add_argument("--tiny", action="store_true", help="the :smoke configs at one tiny shape, once (seconds)")
    parser.add_argument("--models", default=",".join(BENCH))
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="the models' activations (train.dtype) and the ceiling matmul's dtype")
    parser.add_argument("--no-scaling", action="store_true", help="no scaling points: each model's own shape only")
    args = parser.parse_args()
    names = args.models.split(",")
    unknown = [name for name in names if name not in BENCH]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; expected among {', '.join(BENCH)}")
    os.makedirs(args.out, exist_ok=True)
    repeats = 1 if args.tiny else 3 if args.quick else 10
    metadata = run_metadata(args.tiny)
    start = time.perf_counter()
    ceiling_size = TINY_CEILING_SIZE if args.tiny else CEILING_SIZE
    ceiling = matmul_ceiling(ceiling_size, repeats=1 if args.tiny else 10, dtype=args.dtype)
    results = {"ceiling_flops": ceiling, "ceiling_size": ceiling_size, "device": jax.devices()[0].device_kind,
               "dtype": args.dtype, "quick": args.quick, "models": {}, "_run": metadata}
    scaling = {}
    for name in names:
        results["models"][name], scaling[name] = run_model(
            name, ceiling, repeats, args.quick, args.tiny, args.dtype, scaling_points=not args.no_scaling)
        print(f"{name}: {results['models'][name]['train_examples_per_s']:.0f} train examples/s "
              f"({time.perf_counter() - start:.0f} s so far)", flush=True)
        results["seconds"] = time.perf_counter() - start
        with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
        with open(os.path.join(args.out, "scaling.json"), "w", encoding="utf-8") as f:
            json.dump(scaling, f, indent=2)
    for axis in ("length", "batch"):
        plot_scaling(scaling, axis, os.path.join(args.out, f"scaling_{axis}.png"))
    table = markdown(results)
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
