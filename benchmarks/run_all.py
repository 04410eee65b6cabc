"""Every model's speed, and its distance from what this machine's matrix units can do.

    python benchmarks/run_all.py --out OUT [--quick] [--models fasttext_ag_news,...]

For each model of `BENCH` (a config at a realistic shape, random inputs) it measures, through
the harness `benchmarks/throughput.py`: compile time of the train step, train and eval
examples/s (median of repeated device-synchronised steps after warm-up), XLA's FLOPs per train
step and peak memory of the compiled step. In the same run it measures the ceiling: the
FLOP/s of a float32 2048 x 2048 matmul. It writes

    OUT/results.json   {"ceiling_flops", "models": {"<config>": {"compile_s", "train_examples_per_s",
                        "eval_examples_per_s", "flops_per_step", "fraction_of_ceiling", "peak_bytes", ...}}}
    OUT/scaling.json   {"<config>": {"length": {L: examples/s}, "batch": {B: examples/s}}}
    OUT/scaling_length.png, OUT/scaling_batch.png

and prints a Markdown table. XLA counts a while loop's body once, so for models built on a
scan (the BiGRU, the LSTMs) FLOPs and the fraction of the ceiling are lower bounds. `--quick`
uses fewer repeats and scaling points. A new model joins with one line in `BENCH`.
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
from throughput import measure, median_seconds  # this script's folder is on sys.path

from jcaps.train.config import load

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")

# name: (config, batch, length, input size: vocabulary or features, classes). Shapes of the
# models' real workloads: AG News texts, the box data's 100 x 100 series.
BENCH = {
    "fasttext_ag_news": ("fasttext_ag_news.py", 64, 128, 30000, 4),
    "icapsnet_short_ag_news": ("icapsnet_short_ag_news.py", 64, 128, 30000, 4),
    "icapsnet_long_ag_news": ("icapsnet_long_ag_news.py", 16, 32, 30000, 4),
    "cccapsnet_ag_news": ("cccapsnet_ag_news.py", 32, 64, 62535, 4),
    "input_cell_boxes": ("input_cell_boxes.py", 50, 100, 100, 2),
}
SCALING = {"length": (32, 64, 128, 256), "batch": (8, 32, 128)}
QUICK_SCALING = {"length": (32, 128), "batch": (8, 64)}


def matmul_ceiling(size: int = 2048, repeats: int = 10) -> float:
    """FLOP/s of a jit-compiled float32 size x size matmul: what the model steps are held to."""
    a = jnp.asarray(np.random.default_rng(0).normal(size=(size, size)).astype(np.float32))
    matmul = jax.jit(lambda x, y: x @ y)
    seconds = median_seconds(lambda: matmul(a, a), repeats)
    return 2 * size**3 / seconds


def bench_config(name: str, batch: int):
    path, batch_size, _, _, _ = BENCH[name]
    config = load(os.path.join(CONFIGS, path))
    config.train.batch_size = batch or batch_size
    return config


def run_model(name: str, ceiling: float, repeats: int, scaling: dict) -> tuple[dict, dict]:
    _, batch, length, input_size, num_classes = BENCH[name]
    result = measure(bench_config(name, batch), input_size, num_classes, length, repeats)
    result["fraction_of_ceiling"] = result["flops_per_step"] / result["train_step_s"] / ceiling
    curves = {"length": {}, "batch": {}}
    for point in scaling["length"]:
        curves["length"][point] = measure(bench_config(name, batch), input_size, num_classes, point, repeats)[
            "train_examples_per_s"]
    for point in scaling["batch"]:
        curves["batch"][point] = measure(bench_config(name, point), input_size, num_classes, length, repeats)[
            "train_examples_per_s"]
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
    lines = [
        f"Ceiling: float32 2048x2048 matmul at {results['ceiling_flops'] / 1e9:.1f} GFLOP/s on {results['device']}.",
        "",
        "| model | batch x length | compile s | train ex/s | eval ex/s | GFLOP/step | achieved GFLOP/s | of ceiling | peak MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["models"].items():
        achieved = r["flops_per_step"] / r["train_step_s"]
        lines.append(
            f"| {name} | {r['batch_size']} x {r['length']} | {r['compile_s']:.1f} | {r['train_examples_per_s']:.0f} | "
            f"{r['eval_examples_per_s']:.0f} | {r['flops_per_step'] / 1e9:.3f} | {achieved / 1e9:.2f} | "
            f"{100 * r['fraction_of_ceiling']:.1f} % | {r['peak_bytes'] / 2**20:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--models", default=",".join(BENCH))
    args = parser.parse_args()
    names = args.models.split(",")
    unknown = [name for name in names if name not in BENCH]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; expected among {', '.join(BENCH)}")
    os.makedirs(args.out, exist_ok=True)
    repeats = 3 if args.quick else 10
    start = time.perf_counter()
    ceiling = matmul_ceiling()
    results = {"ceiling_flops": ceiling, "device": jax.devices()[0].device_kind, "quick": args.quick, "models": {}}
    scaling = {}
    for name in names:
        results["models"][name], scaling[name] = run_model(name, ceiling, repeats, QUICK_SCALING if args.quick else SCALING)
        print(f"{name}: {results['models'][name]['train_examples_per_s']:.0f} train examples/s", flush=True)
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
