"""The ITAmoji attention comparison (Anderson 2018, Table 3) on SemEval-2018 Task 2 English emoji.

    python -m studies.emoji_variants.emoji_variants --data_dir ../shared/data/semeval2018_emoji --out DIR
        [--variants none,dot,...,none@1] [--seeds 0] [--jobs 2] [--resamples 1000] [--quick]
    python -m studies.emoji_variants.emoji_variants --tiny --out DIR [--variants none] [--cache_dir C]

Trains `configs/dilated_fcn_emoji.py:VARIANT` for each variant and seed (`--seeds`, or the seed
after `@` in `--variants`, e.g. `none@1`) with the same budget (the
config's 7 epochs; `--quick`: `--steps` steps, default 600, and the test metrics on the first
`--test_size` tweets of us_test, default 10,000, read from a copy in `DIR/quick_data`) through
`train.py`, in `DIR/runs/VARIANT` (seed 0) or `DIR/runs/VARIANT_seedS`. A finished run is reused
and an interrupted one resumes, so running the same command again continues the study where it
stopped. `--jobs 2` runs two trainings at once, each pinned to its own CPU core (Linux
`taskset`). `--report_only` trains nothing and reports the runs that are finished.

Each finished run's model (the one selected on validation macro-F1) predicts every test tweet
once (`RUN/test_predictions.npz`: label, predicted). Then

    DIR/results.json   {"runs": {RUN: {...}}, "meta": {...}, "_run": {commit, date, machine,
                       load when the command started: `recording.provenance.run_metadata`}}
    DIR/results.md     the table, with the paper's ITAmoji numbers beside

where each run has its variant, seed, test `macro_f1` and `accuracy` with 95 % bootstrap
intervals over the test tweets (`--resamples` resamples), the paired bootstrap interval of its
macro-F1 and accuracy difference to `none` of the same seed (the same resampled tweets for both),
the steps and epochs trained, the step selected, `steps_per_s` (the median rate of its progress
lines) and `seconds` (the wall times train.py printed, summed over the run's invocations; one
that was killed printed none). Reads the data
from `--data_dir` (the `text_labels` files us_trial / us_test). `--tiny` needs no data: it
trains each variant's `smoke` run (a network 8 filters wide on generated texts, seconds a
variant), a check that the study runs end to end (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from typing import get_args

import numpy as np

from jcaps.models.choices import DilatedFCNAttention
from recording.provenance import run_metadata
from recording.results import write_results
from studies import ROOT
from studies.emoji_variants.paper import PAPER, PAPER_NAMES
from studies.training_runs import final_test_metrics, train_pending, training_record

CONFIG = os.path.join(ROOT, "configs", "dilated_fcn_emoji.py")
PREDICTIONS_FILE = "test_predictions.npz"
# The variants compared: every attention of the dilated FCN.
VARIANTS = get_args(DilatedFCNAttention)


def run_name(variant: str, seed: int) -> str:
    return variant if seed == 0 else f"{variant}_seed{seed}"


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


def data_dir(args) -> str:
    return args.quick_dir if args.quick else args.data_dir


def train_flags(variant: str, seed: int, workdir: str, args) -> list[str]:
    config = f"{CONFIG}:{variant}" + (",smoke" if args.tiny else "")
    flags = [f"--config={config}", f"--workdir={workdir}", f"--config.data.dir={data_dir(args)}",
             f"--config.train.seed={seed}", "--config.train.progress=lines"]
    if args.cache_dir:
        flags.append(f"--config.data.cache_dir={args.cache_dir}")
    if args.quick:
        flags += [f"--config.train.num_steps={args.steps}", f"--config.train.eval_every_steps={args.steps // 4}"]
    return flags


def test_predictions(workdir: str, args) -> dict[str, np.ndarray]:
    """{"label", "predicted"} of every test tweet by the run's final model, computed once and
    kept in RUN/test_predictions.npz."""
    path = os.path.join(workdir, PREDICTIONS_FILE)
    if not os.path.isfile(path):
        import jax
        import jax.numpy as jnp

        from jcaps.train.workdir import load_trained

        trained = load_trained(workdir, with_data=True, data_overrides={"dir": data_dir(args)})
        predict = jax.jit(lambda tokens: jnp.argmax(trained.apply(tokens).scores, axis=-1))
        labels, predicted = [], []
        for batch in trained.dataset.eval_batches("test", 500):
            real = batch["weight"] > 0
            labels.append(batch["label"][real])
            predicted.append(np.asarray(predict(batch["tokens"]))[real])
        np.savez(path, label=np.concatenate(labels), predicted=np.concatenate(predicted))
    with np.load(path) as saved:
        return {"label": saved["label"], "predicted": saved["predicted"]}


def macro_f1_and_accuracy(confusion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Macro-F1 and accuracy of confusion matrices [..., J, J] (true, predicted), as
    `jcaps.train.metrics.classification_metrics` computes them: classes neither present nor
    predicted are left out of the macro average."""
    true_positive = np.diagonal(confusion, axis1=-2, axis2=-1)
    denominator = confusion.sum(-1) + confusion.sum(-2)
    present = denominator > 0
    f1 = np.divide(2 * true_positive, denominator, out=np.zeros(denominator.shape), where=present)
    macro = f1.sum(-1) / np.maximum(present.sum(-1), 1)
    return macro, true_positive.sum(-1) / confusion.sum((-2, -1))


def bootstrap(predictions: dict[str, dict], num_classes: int, resamples: int, seed: int = 0) -> dict:
    """{run: {"macro_f1": [R], "accuracy": [R]}} over `resamples` resamples of the test tweets,
    the same resampled tweets for every run (so differences between runs are paired)."""
    labels = next(iter(predictions.values()))["label"]
    for run, p in predictions.items():
        if not np.array_equal(p["label"], labels):
            raise SystemExit(f"{run} was tested on other tweets than the others")
    rng = np.random.default_rng(seed)
    codes = {run: p["label"].astype(np.int64) * num_classes + p["predicted"] for run, p in predictions.items()}
    draws = {run: np.empty((resamples, num_classes, num_classes)) for run in predictions}
    for r in range(resamples):
        index = rng.integers(0, len(labels), len(labels))
        for run, code in codes.items():
            draws[run][r] = np.bincount(code[index], minlength=num_classes**2).reshape(num_classes, num_classes)
    scores = {}
    for run, confusion in draws.items():
        macro, accuracy = macro_f1_and_accuracy(confusion)
        scores[run] = {"macro_f1": macro, "accuracy": accuracy}
    return scores


def interval(values: np.ndarray) -> list[float]:
    return [round(float(np.percentile(values, 2.5)), 4), round(float(np.percentile(values, 97.5)), 4)]


def variant_record(workdir: str) -> dict:
    """The run's training record (`studies.training_record`) and the attention settings it trained with."""
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return {**training_record(workdir), "attention_gain": config["model"].get("attention_gain", "one"),
            "attention_residual": config["model"].get("attention_residual", False)}


def report(runs: list[tuple[str, int]], args) -> dict:
    finished = [(v, s) for v, s in runs if final_test_metrics(os.path.join(args.out, "runs", run_name(v, s)))]
    if not finished:
        raise SystemExit("no run has finished yet")
    predictions = {run_name(v, s): test_predictions(os.path.join(args.out, "runs", run_name(v, s)), args)
                   for v, s in finished}
    num_classes = int(max(max(p["label"].max(), p["predicted"].max()) for p in predictions.values())) + 1
    scores = bootstrap(predictions, num_classes, args.resamples)
    results = {}
    for variant, seed in finished:
        name = run_name(variant, seed)
        confusion = np.bincount(predictions[name]["label"] * num_classes + predictions[name]["predicted"],
                                minlength=num_classes**2).reshape(num_classes, num_classes)
        macro, accuracy = macro_f1_and_accuracy(confusion.astype(np.float64))
        logged = final_test_metrics(os.path.join(args.out, "runs", name))
        if abs(accuracy - logged["accuracy"]) > 1e-6:
            raise SystemExit(f"{name}: predictions give accuracy {accuracy}, training logged {logged['accuracy']}")
        row = {"variant": variant, "seed": seed, "macro_f1": round(float(macro), 4),
               "macro_f1_ci": interval(scores[name]["macro_f1"]), "accuracy": round(float(accuracy), 4),
               "accuracy_ci": interval(scores[name]["accuracy"])}
        baseline = run_name("none", seed)
        if variant != "none" and baseline in scores:
            for metric in ("macro_f1", "accuracy"):
                difference = scores[name][metric] - scores[baseline][metric]
                row[f"{metric}_minus_none"] = round(float(difference.mean()), 4)
                row[f"{metric}_minus_none_ci"] = interval(difference)
        row.update(variant_record(os.path.join(args.out, "runs", name)))
        results[name] = row
    labels = next(iter(predictions.values()))["label"]
    majority = np.zeros((num_classes, num_classes))
    np.add.at(majority, (labels, np.full_like(labels, np.bincount(labels).argmax())), 1)
    meta = {"test_tweets": int(len(labels)), "classes": num_classes, "resamples": args.resamples,
            "majority_class_macro_f1": round(float(macro_f1_and_accuracy(majority)[0]), 4),
            "budget": budget(args),
            "date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(), "jobs": args.jobs}
    return {"runs": results, "meta": meta}


def budget(args) -> str:
    if args.tiny:
        return "smoke runs, generated texts"
    return f"{args.steps} steps, first {args.test_size} test tweets" if args.quick else "config (7 epochs)"


def markdown_table(results: dict) -> str:
    lines = [
        "| model | run | macro-F1 [95 % CI] | accuracy [95 % CI] | macro-F1 − none [paired 95 % CI] | epochs "
        "(selected step) | steps/s | ITAmoji macro-F1 / micro-F1 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["runs"].items():
        paper_macro, paper_micro = PAPER[r["variant"]]
        difference = (f"{r['macro_f1_minus_none']:+.3f} [{r['macro_f1_minus_none_ci'][0]:+.3f}, "
                      f"{r['macro_f1_minus_none_ci'][1]:+.3f}]" if "macro_f1_minus_none" in r else "")
        lines.append(
            f"| {PAPER_NAMES[r['variant']]} | `{name}` | {r['macro_f1']:.3f} [{r['macro_f1_ci'][0]:.3f}, "
            f"{r['macro_f1_ci'][1]:.3f}] | {r['accuracy']:.3f} [{r['accuracy_ci'][0]:.3f}, {r['accuracy_ci'][1]:.3f}] "
            f"| {difference} | {r['epochs']} ({r['selected_step']}) | {r['steps_per_s']} | {paper_macro:.3f} / "
            f"{paper_micro:.3f} |")
    meta = results["meta"]
    lines += ["", f"jcaps: SemEval-2018 Task 2 English ({meta['classes']} emoji), trained on us_trial, tested on "
              f"{meta['test_tweets']:,} us_test tweets (budget: {meta['budget']}); intervals from {meta['resamples']} "
              f"bootstrap resamples of the test tweets, paired for the differences; majority class macro-F1 "
              f"{meta['majority_class_macro_f1']:.3f}. ITAmoji: the paper's Table 3 (25 emoji, Italian tweets; not "
              "public). Single-label: micro-F1 equals accuracy."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default="", help="folder with us_trial.* and us_test.* (text_labels)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", default="0", help="train.seed of each run, comma-separated")
    budgets = parser.add_mutually_exclusive_group()
    budgets.add_argument("--quick", action="store_true", help="train --steps steps per variant")
    budgets.add_argument("--tiny", action="store_true", help="smoke runs on generated texts, no --data_dir (seconds)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--test_size", type=int, default=10000, help="--quick: test tweets scored")
    parser.add_argument("--jobs", type=int, default=1, help="trainings at once (each pinned to a core)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of the test tweets")
    parser.add_argument("--report_only", action="store_true", help="train nothing; report the finished runs")
    parser.add_argument("--cache_dir", default="", help="prepared-data cache (default ~/tensorflow_datasets)")
    args = parser.parse_args()
    if not (args.data_dir or args.tiny):
        parser.error("the following arguments are required: --data_dir")
    load_average_before = os.getloadavg()[0]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
        requested = []
        for entry in (e for e in args.variants.split(",") if e):
            variant, _, seed = entry.partition("@")
            requested += [(variant, int(seed))] if seed else [(variant, s) for s in seeds]
    except ValueError:
        parser.error(f"seeds are whole numbers: --seeds {args.seeds!r}, --variants {args.variants!r}")
    unknown = sorted({v for v, _ in requested if v not in VARIANTS})
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    os.makedirs(args.out, exist_ok=True)
    args.quick_dir = quick_data(args) if args.quick else ""
    if not args.report_only:
        workdirs = [os.path.join(args.out, "runs", run_name(v, s)) for v, s in requested]
        train_pending([(w, train_flags(v, s, w, args)) for w, (v, s) in zip(workdirs, requested)], args.jobs)
    # The report covers every finished run in DIR, those of earlier commands included.
    everything = [(v, s) for s in sorted({0, *(s for _, s in requested), *_seeds_in(args.out)})
                  for v in VARIANTS]
    results = report(everything, args)
    results["_run"] = run_metadata(args.tiny, load_average_before)
    write_results(args.out, results)
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(markdown_table(results))
    print(markdown_table(results))


def _seeds_in(out: str) -> set[int]:
    folder = os.path.join(out, "runs")
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return {int(match.group(1)) for name in names if (match := re.fullmatch(r".+_seed(\d+)", name))}


if __name__ == "__main__":
    main()
