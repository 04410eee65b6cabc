"""The ITAmoji attention comparison (Anderson 2018, Table 3) on SemEval-2018 Task 2 English emoji.

    python benchmarks/emoji_variants.py --data_dir ../shared/data/semeval2018_emoji --out DIR
        [--variants none,dot,...] [--quick] [--jobs 2]

Trains `configs/dilated_fcn_emoji.py:VARIANT` for each of the seven attention variants with the
same budget (the config's epochs; `--quick`: `--steps` steps, default 600, and the test metrics
on the first `--test_size` tweets of us_test, default 10,000, read from a copy in
`DIR/quick_data`) in `DIR/runs/VARIANT` through `train.py` (a finished run is reused, an
interrupted one resumes), then writes

    DIR/results.json   {"<variant>": {"macro_f1", "micro_f1", "accuracy", "seconds", "steps"}}
    DIR/results.md     the paper's Table 3 layout, with the paper's ITAmoji numbers beside

Test-split metrics of the model chosen by validation macro-F1. `--jobs 2` runs two trainings
at once, each pinned to its own CPU core (Linux `taskset`). Reads the data from `--data_dir`
(the `text_labels` files us_trial / us_test).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from jcaps.models.choices import DILATED_FCN_ATTENTIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = os.path.join(ROOT, "configs", "dilated_fcn_emoji.py")
PAPER = {  # Anderson 2018 (ITAmoji, 25 emoji, Italian), Table 3: macro-F1, micro-F1
    "none": (0.110, 0.319),
    "simplified": (0.106, 0.341),
    "local": (0.106, 0.341),
    "dot": (0.105, 0.339),
    "dot8": (0.113, 0.316),
    "local8": (0.106, 0.337),
    "simplified8": (0.109, 0.308),
}
PAPER_NAMES = {
    "none": "no attention",
    "simplified": "simplified attention",
    "local": "local attention",
    "dot": "1-head dot-product attention",
    "dot8": "8-head dot-product attention",
    "local8": "8-head local attention",
    "simplified8": "8-head simplified attention",
}


def final_test_metrics(workdir: str) -> dict | None:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        finals = [r for r in map(json.loads, f) if r.get("final") and r.get("split") == "test"]
    return finals[-1] if finals else None


def quick_data(args) -> str:
    """`DIR/quick_data`: the training files as they are, us_test cut to `--test_size` tweets."""
    folder = os.path.join(args.out, "quick_data")
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(args.data_dir):
        source, target = os.path.join(args.data_dir, name), os.path.join(folder, name)
        if os.path.exists(target):
            continue
        if name in ("us_test.text", "us_test.labels"):
            with open(source, encoding="utf-8") as f:
                lines = [line for _, line in zip(range(args.test_size), f)]
            with open(target, "w", encoding="utf-8") as f:
                f.writelines(lines)
        else:
            shutil.copyfile(source, target)
    return folder


def command(variant: str, workdir: str, args) -> list[str]:
    data_dir = args.quick_dir if args.quick else args.data_dir
    flags = [f"--config={CONFIG}:{variant}", f"--workdir={workdir}", f"--config.data.dir={data_dir}",
             "--config.train.progress=lines"]
    if args.cache_dir:
        flags.append(f"--config.data.cache_dir={args.cache_dir}")
    if args.quick:
        flags += [f"--config.train.num_steps={args.steps}", f"--config.train.eval_every_steps={args.steps // 4}"]
    return [sys.executable, os.path.join(ROOT, "train.py"), *flags]


def run_all(variants: list[str], args) -> dict[str, float]:
    """Trains the variants that have no final test metrics yet, `args.jobs` at a time."""
    pending = [v for v in variants if final_test_metrics(os.path.join(args.out, "runs", v)) is None]
    running: list[tuple[str, subprocess.Popen, float, int]] = []
    seconds: dict[str, float] = {}
    free_cores = list(range(args.jobs))
    while pending or running:
        while pending and free_cores:
            variant, core = pending.pop(0), free_cores.pop(0)
            workdir = os.path.join(args.out, "runs", variant)
            os.makedirs(workdir, exist_ok=True)
            cmd = command(variant, workdir, args)
            if args.jobs > 1 and shutil.which("taskset"):
                cmd = ["taskset", "-c", str(core), *cmd]
            print(f"training {variant} (log: {workdir}/train.log)", flush=True)
            with open(os.path.join(workdir, "train.log"), "a", encoding="utf-8") as log:  # the child keeps its copy
                process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            running.append((variant, process, time.perf_counter(), core))
        time.sleep(2)
        for item in list(running):
            variant, process, start, core = item
            if process.poll() is None:
                continue
            running.remove(item)
            free_cores.append(core)
            if process.returncode != 0:
                raise SystemExit(f"{variant} failed (exit {process.returncode}); see {args.out}/runs/{variant}/train.log")
            seconds[variant] = time.perf_counter() - start
            print(f"{variant} done in {seconds[variant]:.0f} s", flush=True)
    return seconds


def markdown_table(results: dict, args) -> str:
    lines = [
        "| model | macro-F1 | micro-F1 | accuracy | ITAmoji macro-F1 | ITAmoji micro-F1 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for variant, r in results.items():
        paper_macro, paper_micro = PAPER[variant]
        lines.append(f"| {PAPER_NAMES[variant]} (`{variant}`) | {r['macro_f1']:.3f} | {r['micro_f1']:.3f} | "
                     f"{r['accuracy']:.3f} | {paper_macro:.3f} | {paper_micro:.3f} |")
    lines.append("")
    budget = (f"its first {args.test_size:,} tweets, after {args.steps} training steps" if args.quick
              else "the config's training budget")
    lines.append(f"jcaps: SemEval-2018 Task 2 English (20 emoji), trained on us_trial, tested on us_test ({budget}); "
                 "ITAmoji: the paper's Table 3 (25 emoji, Italian tweets; not public). Single-label: "
                 "micro-F1 equals accuracy.")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True, help="folder with us_trial.* and us_test.* (text_labels)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", default=",".join(DILATED_FCN_ATTENTIONS))
    parser.add_argument("--quick", action="store_true", help="train --steps steps per variant")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--test_size", type=int, default=10000, help="--quick: test tweets scored")
    parser.add_argument("--jobs", type=int, default=1, help="trainings at once (each pinned to a core)")
    parser.add_argument("--cache_dir", default="", help="prepared-data cache (default ~/tensorflow_datasets)")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in DILATED_FCN_ATTENTIONS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(DILATED_FCN_ATTENTIONS)}")
    os.makedirs(args.out, exist_ok=True)
    args.quick_dir = quick_data(args) if args.quick else ""
    previous = {}
    results_path = os.path.join(args.out, "results.json")
    if os.path.isfile(results_path):
        with open(results_path, encoding="utf-8") as f:
            previous = json.load(f)
    seconds = run_all(variants, args)
    results = {}
    for variant in variants:
        metrics = final_test_metrics(os.path.join(args.out, "runs", variant))
        results[variant] = {
            "macro_f1": metrics["macro_f1"],
            "micro_f1": metrics["micro_f1"],
            "accuracy": metrics["accuracy"],
            "seconds": round(seconds.get(variant, previous.get(variant, {}).get("seconds", float("nan"))), 1),
            "steps": metrics["step"],
        }
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(markdown_table(results, args))
    print(markdown_table(results, args))


if __name__ == "__main__":
    main()
