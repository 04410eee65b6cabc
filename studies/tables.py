"""Every results table of the pages, rendered from the results files of the studies
(studies/NAME/results/) and of the speed suite (benchmarks/results/).

    python -m studies.tables            # rewrites the tables in README.md, docs/*.md, studies/*/README.md
    python -m studies.tables --check    # exits 1, naming each table that differs, if any does
    python -m studies.tables --list     # each table's name, the file it reads and its provenance

A page marks where a table goes:

    <!-- table: NAME -->
    (what this module writes: the table, then the provenance of its numbers)
    <!-- /table -->

NAME is one of `TABLES`: a function that reads one results file (or, for a path ending in `/`,
every `*/results.json` of that folder, as {subfolder: results}) and returns Markdown. Under each
table a line says where its numbers come from: the file, and the run's provenance as the run
recorded it under "_run" (`recording.provenance`: commit, date, cores, device, and whether the
machine was idle), or that it was not recorded, for files written before runs recorded it. The
paper's figures that some tables show beside jcaps' are imported from the study that compares
with them (its `paper` module), never typed here.

Reads JSON only (no JAX; the checks table's formatter comes from `jcaps.viz`, which needs
none), so it runs in a second; CI runs `--check`.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Callable

from jcaps.train.config_history import new_name
from jcaps.viz.html import checks_markdown
from studies import ROOT
from studies.emoji_variants import paper as emoji_paper
from studies.icapsnet_global.paper import BASELINE_KNOBS
from studies.saliency_boxes import paper as saliency_paper

# The pages that hold tables, as glob patterns under the repository root.
PAGES = ["README.md", "docs/*.md", "studies/*/README.md"]
MARKER = re.compile(r"(<!-- table: ([\w-]+) -->\n)(.*?)(<!-- /table -->)", re.S)

# name -> (results file, from the repository root, renderer of its loaded JSON)
TABLES: dict[str, tuple[str, Callable[[dict], str]]] = {}


def table(name: str, path: str):
    def register(render: Callable[[dict], str]):
        TABLES[name] = (path, render)
        return render

    return register


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def rows(header: list[str], body: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join("" if cell is None else str(cell) for cell in row) + " |" for row in body]
    return "\n".join(lines)


def number(value, digits: int = 3, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def with_interval(value, interval, digits: int = 3, signed: bool = False) -> str:
    text = number(value, digits, signed)
    if interval:
        text += f" [{number(interval[0], digits, signed)}, {number(interval[1], digits, signed)}]"
    return text


def ratio(row: dict) -> str:
    """The median paired ratio and its range, as vs_pytorch and vs_captum record them."""
    return f"{row['ratio']:.2f} ({row['ratio_min']:.2f}–{row['ratio_max']:.2f})"


def seconds(value: float) -> str:
    return f"{value:.3f}" if value >= 0.01 else f"{value:.4f}"


def commit_text(run: dict) -> str:
    """The run's commit C, and ` with uncommitted changes` where its tree differed from C."""
    return run["commit"] + (" with uncommitted changes" if run.get("dirty") else "")


def provenance(path: str, results) -> str:
    """The line under a table: the file, and the run's provenance as far as it was recorded."""
    source = f"Source: `{path}`"
    run = results.get("_run") if isinstance(results, dict) else None
    if not run or "commit" not in run:
        found = []
        if run:
            found = [f"{key} {value}" for key, value in run.items() if not isinstance(value, dict)]
        meta = results.get("meta", {}) if isinstance(results, dict) else {}
        found += [f"{key} {meta[key]}" for key in ("date", "cores", "jobs") if key in meta]
        if found:
            return (f"{source}; provenance partly recorded ({', '.join(found)}): the commit, and whether the "
                    "machine was idle, not recorded.")
        return f"{source}; provenance not recorded: the commit, and whether the machine was idle, are not known."

    machine = "idle machine" if run.get("idle") else "busy machine"
    load = run.get("load_average_before")
    load_text = f", load {load:.2f} at the start" if isinstance(load, (int, float)) else ""
    tiny = "; tiny sizes (a test run)" if run.get("tiny") else ""
    return (f"{source}; commit {commit_text(run)}, {run['date']}, {run['cores']} cores, "
            f"device {run['device']}, {machine}{load_text}{tiny}.")


# ---------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------


@table("emoji_variants", "studies/emoji_variants/results/results.json")
def emoji_variants(results: dict) -> str:
    body = []
    for name, r in results["runs"].items():
        paper_macro, paper_micro = emoji_paper.PAPER[r["variant"]]
        minutes, secs = divmod(int(r["seconds"]), 60)
        body.append([
            emoji_paper.PAPER_NAMES[r["variant"]], f"`{name}`", r["seed"], with_interval(r["macro_f1"], r["macro_f1_ci"]),
            with_interval(r["accuracy"], r["accuracy_ci"]),
            with_interval(r.get("macro_f1_minus_none"), r.get("macro_f1_minus_none_ci"), signed=True)
            if "macro_f1_minus_none" in r else "",
            with_interval(r.get("accuracy_minus_none"), r.get("accuracy_minus_none_ci"), signed=True)
            if "accuracy_minus_none" in r else "",
            f"{r['epochs']} ({r['selected_step']})", r["steps_per_s"], f"{minutes} min {secs:02d} s",
            f"{paper_macro:.3f} / {paper_micro:.3f}",
        ])
    meta = results["meta"]
    return (rows(["model", "run", "seed", "macro-F1 [95 % CI]", "accuracy [95 % CI]",
                  "macro-F1 − none [paired 95 % CI]", "accuracy − none [paired 95 % CI]", "epochs (selected step)",
                  "steps/s", "wall time", "ITAmoji macro-F1 / micro-F1"], body)
            + f"\n\nTested on {meta['test_tweets']:,} `us_test` tweets, {meta['classes']} emoji (budget: "
            f"{meta['budget']}); intervals from {meta['resamples']:,} bootstrap resamples of the test tweets, paired "
            f"for the differences to `none`; the majority class scores macro-F1 {meta['majority_class_macro_f1']:.3f}. "
            "ITAmoji: the paper's Table 3 (25 emoji, Italian tweets). Single-label, so micro-F1 equals accuracy.")


VS_CAPTUM_MODELS = {"fasttext": "fastText", "icapsnet_short": "iCapsNets Short", "cccapsnet": "CCCapsNet"}


@table("vs_captum", "benchmarks/results/vs_captum/results.json")
def vs_captum(results: dict) -> str:
    body = []
    for key, model in VS_CAPTUM_MODELS.items():
        entry = results.get(key)
        if entry is None:
            continue
        methods = dict(entry["methods"])
        if "forward" in entry:
            methods = {"forward pass (no gradient)": entry["forward"], **methods}
        for method, r in methods.items():
            if "max_relative_difference" in r:
                agreement = f"max relative difference {r['max_relative_difference']:.1e}"
            elif "spearman" in r:
                agreement = f"Spearman ρ {r['spearman']:.4f}" + (
                    f" (two jcaps draws: {r['jcaps_reseeded_spearman']:.4f})" if "jcaps_reseeded_spearman" in r else "")
            else:
                agreement = ""
            per_100 = ("jcaps_s_per_100" in r and f"{r['jcaps_s_per_100']:.3f}", "torch_s_per_100" in r
                       and f"{r['torch_s_per_100']:.3f}")
            floor = f"{r['floor_ratio']:.2f}" if "floor_ratio" in r else ""
            body.append([model, method if " " in method else f"`{method}`", per_100[0] or seconds(r["jcaps_s"]),
                         per_100[1] or seconds(r["torch_s"]), ratio(r), floor, agreement])
    first = results[next(k for k in VS_CAPTUM_MODELS if k in results)]
    sizes = (f"{first['examples']} examples of {first['length']} tokens, batch {first['batch']}, "
             f"{first['samples']} samples for KernelSHAP and LIME")
    versions = results["_run"].get("versions", {})
    version_text = ", ".join(f"{k} {v}" for k, v in versions.items())
    peak = (f" Floor: the ratio jcaps' operations would reach at this machine's best matmul rate "
            f"({results['matmul_gflops']:.0f} GFLOP/s, measured in the run)." if "matmul_gflops" in results else "")
    return (rows(["model", "method", "jcaps s / 100", "Captum s / 100", "jcaps / Captum, median paired ratio "
                  "[min–max]", "floor", "agreement"], body)
            + f"\n\n{sizes}; each model's jcaps and PyTorch twins hold the same weights (parameters: "
            + ", ".join(f"{VS_CAPTUM_MODELS[k]} {results[k]['jcaps_parameters']:,}" for k in VS_CAPTUM_MODELS
                        if k in results)
            + f"). Timed call by call in turn; {version_text}.{peak}")


def _layer_shape(r: dict) -> str:
    if "cell" in r:
        cell = {"lstm": "LSTM", "gru": "GRU", "lstm_cell": "LSTM cells"}[r["cell"]]
        direction = "Bi" if r.get("bidirectional") else ""
        return (f"{r['layers']}-layer {direction}{cell} {r['hidden']}, input {r['input_size']}, batch {r['batch']}, "
                f"{r['steps']} steps")
    if "rows" in r:
        return f"one matmul [{r['rows']}, {r['contracted']}] × [{r['contracted']}, {r['columns']}]"
    if "jcaps_parameters" in r:
        return (f"SGM train step, {r['jcaps_parameters'] / 1e6:.1f} M parameters, batch {r['batch']}, "
                f"source {r['length']}, {r['label_steps']} label steps")
    return ", ".join(f"{k} {v}" for k, v in r.items() if isinstance(v, int) and k in ("batch", "length", "steps"))


@table("vs_pytorch", "benchmarks/results/vs_pytorch/results.json")
def vs_pytorch(results: dict) -> str:
    body = []
    for key, r in results.items():
        if key.startswith("_") or not isinstance(r, dict) or "ratio" not in r:
            continue
        shape = _layer_shape(r) if key != "sgm_greedy" else (
            f"SGM greedy decoding, {r['max_steps']} steps, batch {r['batch']}, source {r['length']}")
        body.append([shape, f"`{key}`", seconds(r["jcaps_s"]), seconds(r["torch_s"]), ratio(r)])
    return rows(["layer stack or step, shape", "results key", "jcaps s", "PyTorch s",
                 "jcaps / PyTorch, median paired ratio (range)"], body)


FAITHFULNESS_METRICS = ("comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc")


def faithfulness(results: dict) -> str:
    methods = [k for k, v in results.items() if isinstance(v, dict) and "comprehensiveness" in v]
    random = results.get("random", {}).get("comprehensiveness")
    body = []
    for method in methods:
        r = results[method]
        cells = [with_interval(r[m], r.get("ci95", {}).get(m)) for m in FAITHFULNESS_METRICS]
        over_random = f"{r['comprehensiveness'] / random:.1f}" if random else "–"
        completeness = r.get("completeness_error", {}).get("median")
        body.append([method.replace("_", " "), *cells, over_random, f"{r['seconds_per_100']:.2f}",
                     f"{completeness:.1g}" if completeness is not None else ""])
    text = rows(["method", "comprehensiveness ↑", "sufficiency ↓", "deletion AUC ↓", "insertion AUC ↑",
                 "comprehensiveness ÷ random", "s / 100", "IG completeness error (median)"], body)
    first = results[methods[0]]
    examples = results.get("run", {}).get("examples")
    explained = (f"{first['rows']} predictions explained on the first {examples} test examples"
                 if examples is not None and examples != first["rows"] else f"{first['rows']} test examples")
    text += f"\n\n{explained}, tokens removed by {first['removal'].upper()}; intervals: 95 % bootstrap."
    if "forward_s" in results:
        text += (f" One forward pass of a batch: {results['forward_s'] * 1000:.1f} ms; integrated gradients of the "
                 f"same batch: {results['integrated_gradients_s']:.2f} s, "
                 f"{results['integrated_gradients_over_forward']:.1f} forward passes.")
    if "checks" in results:
        settings = results["checks"]["settings"]
        text += (f"\n\nSanity checks on the first {settings['limit']} of them (what each means: docs/explaining.md); ⚑: "
                 f"randomisation ρ ≥ {settings['randomisation_flag']} or at least "
                 f"{settings['degenerate_flag'] * 100:.0f} % of the rows degenerate.\n\n" + checks_markdown(results["checks"]).rstrip())
    return text


for _name in ("icapsnet_short", "cccapsnet", "sgm_debian_tags", "dilated_fcn", "emoji_dot", "emoji_dot8"):
    table(f"faithfulness_{_name}", f"studies/faithfulness/results/{_name}/results.json")(faithfulness)


LOCALISATION_MODELS = {"fasttext": "fastText", "icapsnet_short": "iCapsNets Short", "cccapsnet": "CCCapsNet"}


@table("localisation", "studies/localisation/results/results.json")
def localisation(results: dict) -> str:
    settings = results["settings"]
    body = []
    for key, model in LOCALISATION_MODELS.items():
        if key not in results:
            continue
        for method, r in results[key]["checks"].items():
            if method == "settings":
                continue
            per_class = ", ".join(f"{name} {value:.2f}" for name, value in r["pointing_game_per_class"].items())
            full = list(r["randomisation_spearman"].values())[-1]
            body.append([model, f"{results[key]['accuracy']:.3f}", method.replace("_", " "),
                         number(r["pointing_game"]), per_class, number(r["top_k_hit"]), r["localised_rows"],
                         number(full) + (" ⚑" if r["randomisation_flagged"] else "")])
    overrides = "".join(f", `--config.{s}`" for s in settings["set"])
    return (rows(["model", "test accuracy", "method", "pointing game", "per class", "top-k hit",
                  "rows localised", "randomisation ρ (all re-initialised)"], body)
            + f"\n\nEach model's `:smoke` config trained on {settings['train_size']:,} generated texts for "
            f"{settings['epochs']} epochs with {settings['decoys']} decoy keyword{'s' * (settings['decoys'] != 1)} of another "
            "class in every text"
            f"{overrides}; checked on the first {settings['examples']} test texts. Pointing game: the top-ranked "
            "token is a keyword of the predicted class, over the correctly predicted texts; top-k hit: the share of "
            "the k top-ranked tokens that are keywords, k the text's number of keywords.")


@table("run_all_quick", "benchmarks/results/run_all_quick/results.json")
def run_all_quick(results: dict) -> str:
    body = []
    for name, r in results["models"].items():
        body.append([
            f"`{name}`", f"{r['batch_size']} × {r['length']}", f"{r['compile_s']:.1f}",
            f"{r['train_examples_per_s']:.0f}", f"{r['eval_examples_per_s']:.0f}",
            f"{r['greedy_examples_per_s']:.0f}" if "greedy_examples_per_s" in r else "–",
            f"{r['beam_examples_per_s']:.0f}" if "beam_examples_per_s" in r else "–",
            f"{r['flops_per_step'] / 1e9:.3f}", f"{r['xla_flops_per_step'] / 1e9:.3f}",
            f"{r['flops_per_step'] / r['train_step_s'] / 1e9:.1f}", f"{100 * r['fraction_of_ceiling']:.1f} %",
            f"{r['peak_bytes'] / 2**20:.0f}",
        ])
    return (rows(["model", "batch × length", "compile s", "train ex/s", "eval ex/s", "greedy ex/s", "beam ex/s",
                  "GFLOP/step", "XLA GFLOP/step", "achieved GFLOP/s", "of ceiling", "peak MiB"], body)
            + f"\n\nCeiling: a float32 2048 × 2048 matmul at {results['ceiling_flops'] / 1e9:.1f} GFLOP/s on "
            f"{results['device']}, measured in the same run; the whole run took {results['seconds'] / 60:.1f} min. "
            "GFLOP/step counts every scan step (benchmarks/flops.py); XLA's own count, which sees a loop body once, "
            "beside it.")


@table("device_h200", "benchmarks/results/device_h200/")
def device_h200(runs: dict) -> str:
    """The suite on the H200 in both dtypes: `run_all_DTYPE` is the device check's step, which ran
    out of its time limit before the last models, and `run_all_DTYPE_rest` the run of those
    (and, in bfloat16, a second measurement of two models) in a later call."""
    dtypes = ("float32", "bfloat16")
    models: dict[str, dict[str, list[dict]]] = {}
    for dtype in dtypes:
        for run in (f"run_all_{dtype}", f"run_all_{dtype}_rest"):
            for name, r in runs[run]["models"].items():
                models.setdefault(name, {}).setdefault(dtype, []).append(r)

    def cells(measured: list[dict] | None, key: str, form: str) -> str:
        return " / ".join(form.format(r[key]) for r in measured) if measured else "–"

    body = []
    for name, by_dtype in models.items():
        first = next(iter(by_dtype.values()))[0]
        row = [f"`{name}`", f"{first['batch_size']} × {first['length']}"]
        for key, form in (("train_examples_per_s", "{:.0f}"), ("eval_examples_per_s", "{:.0f}"),
                          ("compile_s", "{:.1f}"), ("fraction_of_ceiling", "{:.1%}")):
            row += [cells(by_dtype.get(dtype), key, form) for dtype in dtypes]
        body.append(row)
    ceilings = ", ".join(f"{dtype} {runs[f'run_all_{dtype}']['ceiling_flops'] / 1e12:.0f} TFLOP/s" for dtype in dtypes)
    rnn = runs["rnn_impl"]
    return (rows(["model", "batch × length", "train ex/s f32", "train ex/s bf16", "eval ex/s f32", "eval ex/s bf16",
                  "compile s f32", "compile s bf16", "of ceiling f32", "of ceiling bf16"], body)
            + f"\n\nCeilings: a 2048 × 2048 matmul in each dtype, measured in the same run ({ceilings}); "
            "a cell with two figures holds two runs of that model. SGM's encoder "
            f"({rnn['batch']} × {rnn['length']}, {rnn['layers']} layers of {rnn['hidden']}, forward and backward): "
            f"the scan {rnn['scan']['seconds'] * 1e3:.1f} ms, cuDNN {rnn['cudnn']['seconds'] * 1e3:.1f} ms "
            f"(scan / cuDNN {rnn['scan_over_cudnn']:.2f}), outputs within {rnn['max_abs_output_difference']:.1e}.")


@table("shapley_vs_shap", "benchmarks/results/shapley_vs_shap/results.json")
def shapley_vs_shap(results: dict) -> str:
    names = {"jcaps": "jcaps `kernel_shap`", "shap": "SHAP `KernelExplainer` (its defaults)",
             "shap_no_l1": "SHAP `KernelExplainer`, `l1_reg=False`", "uniform": "uniform split of f(x) − f(0) (no samples)"}
    body = [[names[name], f"{r['mean']:.4f}", f"{r['std']:.4f}" if len(r["per_seed"]) > 1 else "–",
             f"{min(r['per_seed']):.4f}–{max(r['per_seed']):.4f}", len(r["per_seed"])]
            for name, r in results["estimators"].items()]
    return (rows(["estimator", "relative L2 error to the exact values", "std over seeds", "range", "seeds"], body)
            + f"\n\n{results['examples']} texts cut to their first {results['players']} tokens, {results['samples']} "
            "coalition evaluations each (beside the full and the empty input); exact values from all "
            f"2^{results['players']} coalitions.")


@table("startup", "benchmarks/results/startup/results.json")
def startup(results: dict) -> str:
    body = [[f"`{name}`", f"{seconds:.2f}", f"{results['range'][name][0]:.2f}–{results['range'][name][1]:.2f}"]
            for name, seconds in results["seconds"].items()]
    ratio = results["predict_over_import_jax"]
    return (rows(["command", "median s", "range"], body)
            + f"\n\nEach a new process, {results['repeats']} runs in turns; `jcaps predict` on one text takes "
            f"{ratio['median']:.2f} times a bare `import jax` (paired ratios {ratio['min']:.2f}–{ratio['max']:.2f}), "
            "its compilation cache filled by an earlier call.")


@table("input_pipeline", "benchmarks/results/input_pipeline/results.json")
def input_pipeline(results: dict) -> str:
    hosts = [[f"`{name}`", f"{row['batch_size']}", f"{row['train_batch_cpu_ms']:.3f}", f"{row['test_examples']:,}",
              f"{row['eval_pass_cpu_s']:.3f}", f"{row['encode_s']:.1f}"]
             for name, row in results.items() if name not in ("_run", "loop_efficiency")]
    loops = [[f"`{name}`", f"{statistics.median(row['run_examples_per_s']):,.0f}",
              f"{statistics.median(row['step_examples_per_s']):,.0f}",
              f"{row['loop_efficiency']:.2f} ({min(row['loop_efficiencies']):.2f}–{max(row['loop_efficiencies']):.2f})",
              f"{row['loop_efficiency_with_compiling']:.2f}", f"{row['test_accuracy']:.4f}"]
             for name, row in results["loop_efficiency"].items()]
    return (rows(["config", "batch", "host CPU ms a training batch", "test examples", "host CPU s an evaluation pass",
                  "encoding s, once"], hosts)
            + "\n\n"
            + rows(["config", "training run examples/s", "compiled step examples/s", "loop efficiency (range)",
                    "with later compiles counted", "test accuracy"], loops)
            + "\n\nHost CPU: user and system time of every thread of the process, the median of the runs. The "
            "training run's rate is its own (evaluations and checkpoints included; compiling left out, the first "
            "step's and each compile after it, which a short run's rate would otherwise carry); the "
            "compiled step's is on the run's first batches, already on the devices; each a new process, "
            f"{len(next(iter(results['loop_efficiency'].values()))['loop_efficiencies'])} pairs, the medians and "
            "the range of the pairs' ratios.")


@table("corpus_explain", "benchmarks/results/corpus_explain/results.json")
def corpus_explain(results: dict) -> str:
    runs = sorted(results["runs"].items(), key=lambda item: int(item[0]) or float("inf"))
    methods = list(runs[0][1]["examples_per_second"])
    body = [[f"{run['examples']:,}", f"{run['peak_rss_mib']:,.0f}", f"{run['examples'] / run['wall_seconds']:.2f}",
             *(f"{run['examples_per_second'][m]:.1f}" for m in methods), str(run["invocations"])]
            for _, run in runs]
    kills = results.get("kills")
    killed = (f" Killed with SIGKILL {kills['count']} times over {kills['examples']:,} examples and resumed each "
              f"time, the run wrote {'the very file' if kills['identical'] else 'another file than'} of the "
              f"uninterrupted one ({'every example once' if kills['each_once'] else 'examples repeated'}).") if kills else ""
    ratio = (f"Peak resident memory of the largest run / the smallest: {results['rss_ratio']:.3f}. "
             if len(runs) > 1 else "")
    return (rows(["examples", "peak RSS MiB", "examples/s, all", *(f"{m} examples/s" for m in methods), "runs"], body)
            + f"\n\n{ratio}\"examples/s, all\": every method with faithfulness and the files, over the summed wall time; a method's own: its "
            "scores alone, compiling left out." + killed)


table("corpus_explain_smoke", "benchmarks/results/corpus_explain_smoke/results.json")(corpus_explain)


@table("max_rows_memory", "benchmarks/results/max_rows_memory/results.json")
def max_rows_memory(results: dict) -> str:
    body = [[f"{int(max_rows):,}" + (" (default)" if int(max_rows) == results["default_max_rows"] else ""),
             f"{row['rows_per_call']:,}", str(row["calls"]), f"{row['temp_mib']:,.0f}", f"{row['total_mib']:,.0f}"]
            for max_rows, row in results["by_max_rows"].items()]
    return (rows(["max_rows", "rows a call", "calls", "temporary MiB", "total MiB"], body)
            + f"\n\nIntegrated gradients, {results['steps']} steps, on {results['model']} (batch {results['batch']}, "
            f"length {results['length']}; parameters {results['parameters_mib']:,.0f} MiB, not counted): XLA's "
            "`memory_analysis()` of the compiled call, its arguments, outputs and temporary buffers. The default "
            f"ran in {results['default_run_seconds']:.0f} s on this machine.")


def tuning(results: dict) -> str:
    """A search of `studies/tuning/tuning.py`: every trial's flags, its validation score (which
    chose) and its test score, then the shipped config and the chosen trial over seeds 0 to 2."""
    select = results["select"]
    body = [[f"`{name}`" + (" (chosen)" if name == results.get("chosen") else ""),
             " ".join(f"`{flag}`" for flag in trial["flags"]) or "(the config as searched)",
             number(trial["validation"][select], 4), number(trial["test"][select], 4)]
            for name, trial in results["trials"].items()]
    text = rows(["trial", "flags", f"validation {select} (chooses)", f"test {select} (seed 0)"], body)
    seeds = results.get("seeds", {})
    if seeds:
        text += "\n\n" + rows(["config", "seeds", f"test {select}", "mean", "min", "max"], [
            [f"`{name}`", ", ".join(map(str, row["seeds"])), ", ".join(number(v, 4) for v in row["test"]),
             number(row["mean"], 4), number(row["min"], 4), number(row["max"], 4)]
            for name, row in seeds.items()])
    pending = results.get("pending") or []
    note = f" Pending: {', '.join(pending)}." if pending else ""
    return (text + f"\n\nOne run a trial (seed 0) over the budget of `{results['config']}`'s search; the trial best on "
            f"validation (the model each run selected on its validation split) is then trained with seeds 1 and 2 "
            f"beside the shipped config.{note}")


for _search in ("fasttext_ag_news", "icapsnet_short_ag_news", "sgm_reuters"):
    table(f"tuning_{_search}", f"studies/tuning/results/{_search}/results.json")(tuning)


@table("first_call", "benchmarks/results/first_call/results.json")
def first_call(results: dict) -> str:
    model = results["model"]
    body = [[f"`{method}`", number(row["first_s"], 2), f"{1000 * row['second_s']:.2f}",
             f"{1000 * row['jitted_s']:.2f}", number(row["second_over_jitted"], 2)]
            for method, row in results.items() if method not in ("model", "_run")]
    return (rows(["method", "first eager call (s)", "second eager call (ms)", "under jax.jit (ms)",
                  "second / jitted"], body)
            + f"\n\nAn NNX model of {model['parameters']:,} parameters ({model['embed']}-wide word vectors, a "
            f"{model['hidden']}-wide tanh layer, max over positions, {model['classes']} classes), "
            f"{model['batch']} texts of {model['length']} positions, each method at its defaults in a fresh "
            f"process; the second call and the jitted call are medians of {model['repeats']}.")


@table("integration_rules", "studies/integration_rules/results/results.json")
def integration_rules(results: dict) -> str:
    body = [[steps] + [f"{row[rule]['median']:.2e} / {row[rule]['p95']:.2e}" for rule in ("midpoint", "gausslegendre")]
            for steps, row in results["by_steps"].items()]
    return (rows(["steps", "midpoint: median / p95", "Gauss-Legendre: median / p95"], body)
            + f"\n\nIntegrated gradients' relative completeness error |Σ scores − (f(x) − f(x′))| / |f(x) − f(x′)| on "
            f"the first {results['examples']} test texts of `configs/{results['config']}` (test accuracy "
            f"{results['test_accuracy']:.3f}), zero baseline; all-zero scores would have error 1.")


@table("saliency_boxes_quick", "studies/saliency_boxes/results/quick/results.json")
def saliency_boxes_quick(results: dict) -> str:
    boxes = [box for box in results if not box.startswith("_") and isinstance(results[box], dict)]
    variants = [v for v in ("lstm", "lstm_self_attention", "input_cell") if any(v in results[b] for b in boxes)]
    body = []
    for variant in variants:
        body.append([f"{variant} (jcaps)"] + [
            f"{c['wjac']:.3f} / {c['euclidean']:.3f} / {100 * c['accuracy']:.1f}" if (c := results[b].get(variant)) else ""
            for b in boxes])
        if variant in saliency_paper.PAPER:
            cells = dict(zip(saliency_paper.TABLE_BOXES, saliency_paper.PAPER[variant]))
            body.append([f"{variant} (paper)"] + [cells.get(b, "") for b in boxes])
    return (rows(["model"] + boxes, body)
            + "\n\nCells: weighted Jaccard ↑ / Euclidean distance ↓ / test accuracy % of the gradient saliency of the "
            "true class against the box mask; the paper's Table 1 beside, where it has the cell.")


def _by_length(results: dict) -> list[tuple[str, dict]]:
    return sorted(((k, v) for k, v in results.items() if not k.startswith("_")), key=lambda kv: int(kv[0]))


@table("cccapsnet_speed", "benchmarks/results/cccapsnet_speed.json")
def cccapsnet_speed(results: dict) -> str:
    body = [[length, f"{r['batch_size']}", f"{r['model_train_step_s']:.3f}", f"{r['encoder_step_s']:.3f}",
             r.get("reference_step_s", "–"), r.get("target_step_s", "–"),
             str(r["encoder_input_shape"]) if "encoder_input_shape" in r else "not recorded"]
            for length, r in _by_length(results)]
    return rows(["length", "batch", "train step s", "BiGRU encoder s (forward + backward)",
                 "PyTorch reference s (idle)", "target s", "encoder input shape"], body)


@table("input_cell_speed", "benchmarks/results/input_cell_speed.json")
def input_cell_speed(results: dict) -> str:
    body = []
    for length, r in _by_length(results):
        quadratic = (f"{r['quadratic_s']:.3f}" if r.get("quadratic_s") is not None
                     else r.get("quadratic_skipped", "not run"))
        body.append([length, f"{r['linear_s']:.3f}", quadratic,
                     f"{r['ratio']:.1f}" if r.get("ratio") else "–", f"{r['linear_peak_bytes'] / 1e9:.2f}",
                     f"{r['quadratic_peak_bytes'] / 1e9:.1f}",
                     f"{r['max_abs_diff']:.0e}" if r.get("max_abs_diff") is not None else "–"])
    return rows(["T", "O(T) pool s", "O(T²) softmax s", "speed-up", "O(T) peak GB", "O(T²) peak GB",
                 "largest difference"], body) + "\n\nBatch 50, 100 features, forward + backward."


@table("dilated_fcn_speed", "benchmarks/results/dilated_fcn_speed/results.json")
def dilated_fcn_speed(results: dict) -> str:
    body = [[length, f"{r['train_chars_per_s']:,.0f}", f"{r['eval_chars_per_s']:,.0f}", f"{r['train_step_s']:.2f}",
             f"{r['compile_s']:.1f}", f"{r['peak_bytes'] / 1e6:,.0f}"] for length, r in _by_length(results)]
    first = _by_length(results)[0][1]
    return (rows(["length", "train characters/s", "eval characters/s", "train step s", "compile s", "peak MB"], body)
            + f"\n\nBatch {first['batch_size']}, attention `{first.get('attention', 'none')}`, "
            f"{first['parameters']:,} parameters.")


def _sgm_speed(results: dict) -> str:
    body = []
    for model, r in results.items():
        if model.startswith("_"):
            continue
        reference = r.get("reference", {})
        body.append([
            {"sgm": "SGM", "sgm_ge": "SGM + GE", "br": "BR"}.get(model, model), f"{r['train_step_s']:.2f}",
            f"{reference['train_step_s']:.2f}" if "train_step_s" in reference else "–",
            f"{r['greedy_s']:.2f} ({r['greedy_examples_per_s']:.0f}/s)" if "greedy_s" in r else "–",
            f"{reference['greedy_s']:.2f}" if "greedy_s" in reference else "–",
            f"{r['beam_s']:.2f} ({r['beam_examples_per_s']:.0f}/s)" if "beam_s" in r else "–",
        ])
    first = next(v for k, v in results.items() if not k.startswith("_"))
    return (rows(["model", "train step s", "PyTorch reference s", "greedy decoding s (examples/s)",
                  "PyTorch greedy s", "beam search s (examples/s)"], body)
            + f"\n\nBatch {first['batch_size']}, source length {first['length']}, vocabulary "
            f"{first['vocab_size']:,}, sizes `{first['sizes']}`; random weights, so decoding runs to its "
            f"{first.get('max_steps', 30)} steps.")


table("sgm_speed", "benchmarks/results/sgm_speed/results.json")(_sgm_speed)
table("sgm_speed_reference", "benchmarks/results/sgm_speed_reference/results.json")(_sgm_speed)


@table("routing_speed", "benchmarks/results/routing_speed.json")
def routing_speed(results) -> str:
    entries = results["rows"] if isinstance(results, dict) else results
    body = [[r["routing"], r["I"], r["J"], r["pass"].replace("_", " + "), f"{r['jax_s'] * 1e3:.2f}",
             f"{r['numpy_s'] * 1e3:.2f}", f"{r['ratio']:.1f}"] for r in entries]
    return rows(["routing", "I", "J", "pass", "jit-compiled JAX ms", "NumPy ms", "NumPy ÷ JAX"], body)


@table("dropout_mask", "benchmarks/results/dropout_mask/results.json")
def dropout_mask(results: dict) -> str:
    body = [[key, f"{r['bernoulli_s']:.3f}", f"{r['jcaps_s']:.3f}", f"{r['ratio']:.2f}",
             f"{r['bernoulli_grad_s']:.3f}", f"{r['jcaps_grad_s']:.3f}"]
            for key, r in results.items() if not key.startswith("_")]
    return rows(["shape @ rate", "jax.random.bernoulli mask s", "jcaps dropout s", "jcaps ÷ bernoulli",
                 "bernoulli, with gradient s", "jcaps, with gradient s"], body)


@table("checkpoint_integrity", "benchmarks/results/checkpoint_integrity/results.json")
def checkpoint_integrity(r: dict) -> str:
    body = [["save", f"{r['orbax_save_s']:.2f}", f"{r['jcaps_save_s']:.2f}", f"{r['save_overhead']:.2f}"],
            ["restore", f"{r['orbax_restore_s']:.2f}", f"{r['jcaps_restore_s']:.2f}", f"{r['restore_overhead']:.2f}"]]
    return (rows(["", "orbax s", "jcaps s (with SHA-256 checksums)", "jcaps ÷ orbax"], body)
            + f"\n\nSGM's train state at the `{r['sizes']}` sizes: {r['parameters'] / 1e6:.1f} M parameters, "
            f"{r['state_mb']:.0f} MB of files; median of {r['repeats']} repeats. Before saves were waited for, a save "
            f"returned after {r['async_return_s']:.2f} s while orbax wrote in the background.")


@table("throughput_icapsnet_short", "benchmarks/results/throughput_icapsnet_short_ag_news.json")
def throughput_icapsnet_short(r: dict) -> str:
    return rows(["config", "batch × length", "parameters", "compile s", "train examples/s", "eval examples/s"],
                [[f"`{r['config']}`", f"{r['batch_size']} × {r['length']}", f"{r['parameters']:,}",
                  f"{r['compile_s']:.1f}", f"{r['train_examples_per_s']:.0f}", f"{r['eval_examples_per_s']:.0f}"]])


def _knob_changes(knobs: dict, baseline: dict) -> str:
    changed = [f"`{key}={value}`" for key, value in knobs.items() if value != baseline.get(key)]
    return ", ".join(changed) or "none (the paper's routing and selection)"


def _spread_of(values: list[float], digits: int = 3) -> str:
    """mean ± std (min–max) of a study's per-seed figures."""
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


@table("icapsnet_global_seeds", "studies/icapsnet_global/results/shipped/results.json")
def icapsnet_global_seeds(results: dict) -> str:
    runs = list(results["runs"].values())
    body = []
    for run in runs:
        shared = "; ".join(f"{e['capsule']}: {', '.join(e['classes'])}" for e in run["shared_capsules"])
        body.append([run["seed"], f"{run['accuracy']:.4f}", f"{run['mi_over_h']:.3f}", f"{run['mi_over_h_coupling']:.3f}",
                     f"{run['top3_share']:.3f}", ", ".join(f"{c} {i}" for c, i in run["most_selected"].items()),
                     shared or "none", f"{run['train_seconds'] / 60:.1f} min"])
    body.append(["all", _spread_of([r["accuracy"] for r in runs], 4), _spread_of([r["mi_over_h"] for r in runs]),
                 _spread_of([r["mi_over_h_coupling"] for r in runs]), "", "", "", ""])
    rule = runs[0]["selection"]
    return (rows(["seed", "test accuracy", f"MI / H ({rule}, shipped)", "MI / H (coupling, the paper's rule)",
                  "top-3 share", "most-selected capsule per class", "capsule shared by classes", "training"], body)
            + f"\n\n`{results['settings']['config']}` as shipped, one run per seed, each analysed on the 7,600 "
            "test examples with the model selected on validation; `all`: mean ± std (min–max). MI / H is "
            "MI(predicted class; selected capsule) / H(class). Training: two runs at a time, one core each, on a "
            "2-core machine doing other work beside them, so the times are upper bounds.")


def _knobs_under_todays_names(knobs: dict) -> dict:
    """The knobs an iCapsNets Short run recorded, under the names its config keys have today."""
    return {new_name("model", key, "icapsnet_short") or key: value for key, value in knobs.items()}


@table("icapsnet_global_candidates", "studies/icapsnet_global/results/")
def icapsnet_global_candidates(studies: dict) -> str:
    body = []
    for name, results in studies.items():
        runs = list(results["runs"].values())
        knobs = _knobs_under_todays_names(runs[0]["knobs"])
        if any(_knobs_under_todays_names(run["knobs"]) != knobs for run in runs):
            raise ValueError(f"icapsnet_global/{name}: its seeds trained with different knobs")
        body.append([f"`{name}`", _knob_changes(knobs, BASELINE_KNOBS), ", ".join(str(run["seed"]) for run in runs),
                     _spread_of([r["accuracy"] for r in runs], 4),
                     _spread_of([r["mi_over_h_coupling"] for r in runs]),
                     _spread_of([r["mi_over_h_contribution"] for r in runs]),
                     sum(bool(run["shared_capsules"]) for run in runs)])
    return (rows(["study", "knobs changed", "seeds", "test accuracy", "MI / H, coupling (the paper's rule)",
                  "MI / H, contribution", "seeds with a shared capsule (own rule)"], body)
            + "\n\nMean ± std (min–max) over the seeds. Each study: "
            "`python -m studies.icapsnet_global.icapsnet_global --seeds S --out DIR --data_dir PATH/ag_news "
            "[--set model.KNOB=VALUE ...]`; the knobs are read from each run's config.json, and the changes are against the paper's routing, attention and selection with one W_ij "
            "per pair (`BASELINE_KNOBS`). `capsule_selection` changes only how capsules are read, not training, so "
            "both rules are measured on every run.")


TRAINING_METRICS = {"accuracy": "test accuracy", "macro_f1": "test macro-F1", "micro_f1": "test micro-F1",
                    "hamming_loss": "test hamming loss", "example_f1": "test example F1",
                    "labels_per_example": "labels an example"}


def _minutes(value: float) -> str:
    minutes, secs = divmod(int(value), 60)
    return f"{minutes} min {secs:02d} s"


def training_study(results: dict) -> str:
    """One row per trained (run, seed) of `studies/training/training_results.py`, a mean row under a
    run of several seeds, and the runs still pending."""
    metrics = [m for m in results["metrics"] if m in TRAINING_METRICS]
    digits = {"hamming_loss": 4, "labels_per_example": 2}
    by_run: dict[str, list[dict]] = {}
    for entry in results["runs"].values():
        by_run.setdefault(entry["run"], []).append(entry)
    body, commits, busy = [], set(), 0
    for entries in by_run.values():
        for e in entries:
            provenance = e.get("provenance") or {}
            commits.add(commit_text(provenance) if provenance.get("commit") else "not recorded")
            busy += not (provenance.get("idle") and provenance.get("jobs", 1) == 1)
            validation = ", ".join(f"{k} {v:.4f}" for k, v in e["validation"].items()) or "none (the last step)"
            body.append([e["label"], f"`{e['command']}`", e["seed"], f"{e['parameters']:,}" if e["parameters"] else "–",
                         *(number(e["test"].get(m), digits.get(m, 4)) for m in metrics), validation,
                         f"{e['epochs']} ({e['selected_step']})", _minutes(e["seconds"])])
        if len(entries) > 1:
            body.append(["", "", "mean", "", *(number(statistics.fmean(e["test"][m] for e in entries), digits.get(m, 4))
                                              for m in metrics), "", "", ""])
    baseline = results.get("baseline")
    fits = []
    if baseline:
        fits = [("the bar", baseline["bar"])] + ([("unweighted", baseline["unweighted"])] if baseline["unweighted"] else [])
    for label, fit in fits:
        weighting = "" if fit["class_weights"] == "none" else f", class weights {fit['class_weights']}"
        selects = "micro_f1" if "micro_f1" in fit["validation"] else "accuracy"  # what chose its settings
        chosen = f"{selects} {fit['validation'][selects]:.4f}"
        body.append([f"TF-IDF + linear SVM ({label}{weighting})",
                     f"n-grams {fit['ngram_range'][0]}-{fit['ngram_range'][1]}, C {fit['C']}", "", "",
                     *(number(fit["test"].get(m), digits.get(m, 4)) for m in metrics), chosen, "", ""])
    true_labels = {e["test"]["true_labels_per_example"] for e in results["runs"].values()
                   if "true_labels_per_example" in e["test"]}
    notes = [f"The model of each run is the one selected on validation where it has a validation part; test "
             f"metrics on the whole test split; budget: {results['budget']}."]
    if true_labels:
        notes.append(f"The test examples carry {min(true_labels):.2f} labels on average.")
    if baseline:
        notes.append(f"The bar: {baseline['model']}, on the splits of `{baseline['splits_of']}`, the classes weighted as "
                     f"`{baseline['config']}` weighs them in its loss.")
    if body:
        notes.append(f"Runs trained at commit{'s' if len(commits) > 1 else ''} {', '.join(sorted(commits))}; "
                     f"{busy} of {len(results['runs'])} beside another training or other work (their wall times are "
                     "upper bounds).")
    if results["pending"]:
        notes.append(f"Not trained yet with today's code: {', '.join(f'`{p}`' for p in results['pending'])} "
                     f"(`python -m studies.training.training_results --study {results['study']} ...` trains them).")
    return (rows(["run", "config", "seed", "params", *(TRAINING_METRICS[m] for m in metrics),
                  "validation (selects)", "epochs (selected step)", "wall time"], body)
            + "\n\n" + " ".join(notes))


for _study in ("ag_news", "cccapsnet", "input_cell_real", "emoji_recipe", "reuters", "debian_tags"):
    table(f"training_{_study}", f"studies/training/results/{_study}/results.json")(training_study)


def _sequence_model(workdir: str) -> str:
    return "SGM + GE" if "sgm_ge" in os.path.basename(workdir) else "SGM"


def _position_errors(results: dict) -> str:
    """Error rates by position in the generated label sequence, pooled over the seeds' runs."""
    pooled: dict[str, dict[str, list[int]]] = {}
    for workdir, decodings in results["results"].items():
        errors = next(iter(decodings.values()))["errors"]
        model = pooled.setdefault(_sequence_model(workdir), {})
        for key, values in errors.items():
            if isinstance(values, list):
                model[key] = [a + b for a, b in zip(model.get(key, [0] * len(values)), values)]
    groups = [("1", slice(0, 1)), ("2", slice(1, 2)), ("3", slice(2, 3)), ("4", slice(3, 4)),
              ("5 and later", slice(4, None)), ("all", slice(0, None))]

    def cell(errors: dict, kind: str, part: slice) -> str:
        count, wrong = sum(errors[f"{kind}count"][part]), sum(errors[f"{kind}wrong"][part])
        return f"{wrong / count:.3f} ({count:,})" if count else "–"

    models = sorted(pooled)
    header = ["position in the generated sequence"]
    for model in models:
        header += [f"{model}: all labels", "after an all-true prefix", "after a wrong label"]
    body = [[label] + [cell(pooled[m], kind, part) for m in models
                       for kind in ("position_", "after_correct_", "after_wrong_")] for label, part in groups]
    runs = {m: sum(_sequence_model(w) == m for w in results["results"]) for m in models}
    return (rows(header, body) + "\n\nError rate of the labels generated at each position (the number of labels in "
            f"brackets), on the {results['split']} split, pooled over "
            + ", ".join(f"{n} runs of {m}" for m, n in runs.items()) + ".")


table("debian_tags_errors", "studies/sgm_sequences/results/test_sequences/results.json")(_position_errors)

DECODINGS = {"beam_lp0": "beam 5, summed log probability", "beam_lp0.5": "beam 5, log probability / length ** 0.5",
             "beam_lp1": "beam 5, / length ** 1", "beam_lp2": "beam 5, / length ** 2", "greedy": "greedy (argmax)"}


@table("debian_tags_decodings", "studies/sgm_sequences/results/validation_decodings/results.json")
def debian_tags_decodings(results: dict) -> str:
    body = []
    for workdir, decodings in results["results"].items():
        for name, r in decodings.items():
            label = DECODINGS.get(name) or re.sub(r"greedy_eos([\d.]+)", r"greedy, stop when P(EOS) >= \1", name)
            errors = r["errors"]
            body.append([f"`{os.path.basename(workdir)}`", label, f"{r['labels_per_example']:.2f}",
                         f"{r['micro_precision']:.3f}", f"{r['micro_recall']:.3f}", f"{r['micro_f1']:.3f}",
                         f"{errors['missed']:,} / {errors['missed_by_stopping']:,}"])
    true = next(iter(next(iter(results["results"].values())).values()))["true_labels_per_example"]
    return (rows(["run", "decoding", f"labels a package (true {true:.2f})", "micro precision", "micro recall",
                  "micro-F1", "true labels missed / of them after an all-true prefix that stopped"], body)
            + f"\n\nOn the {results['split']} split.")


# ---------------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------------


def load(path: str):
    """The JSON of PATH (from the repository root); for a folder (PATH ends in `/`), {subfolder: the JSON
    of its results.json} over the subfolders that have one, in name order."""
    if not path.endswith("/"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            return json.load(f)
    folder = os.path.join(ROOT, path)
    found = {}
    for name in sorted(os.listdir(folder)):
        file = os.path.join(folder, name, "results.json")
        if os.path.isfile(file):
            with open(file, encoding="utf-8") as f:
                found[name] = json.load(f)
    return found


def folder_provenance(path: str, studies: dict) -> str:
    """The provenance line of a folder's studies: each file's commit, date and machine, grouped
    where they agree (the load at each start is in the files)."""
    groups: dict[str, list[str]] = {}
    for name, results in studies.items():
        run = results.get("_run") or {}
        if "commit" not in run:
            key = "provenance not recorded"
        else:
            key = (f"commit {commit_text(run)}, {run['date']}, {run['cores']} cores, device {run['device']}, "
                   f"{'idle' if run.get('idle') else 'busy'} machine")
        groups.setdefault(key, []).append(name)
    parts = [f"{key} ({', '.join(names)})" if len(groups) > 1 else key for key, names in groups.items()]
    return f"Source: `{path}*/results.json`; " + "; ".join(parts) + "."


def recorded(path: str) -> str:
    """In a few words, the provenance of the file(s) a table reads: each run's commit (and whether
    the tree had uncommitted changes), date and whether the machine was idle, or that it was not
    recorded (a file to measure again)."""
    results = load(path)
    files = list(results.values()) if path.endswith("/") else [results]
    runs = [(r.get("_run") if isinstance(r, dict) else None) or {} for r in files]
    if not runs or not all("commit" in run for run in runs):
        return "provenance not recorded"
    return "; ".join(sorted({f"commit {commit_text(run)}, {run['date']}, {'idle' if run.get('idle') else 'busy'} machine"
                             for run in runs}))


def render(name: str) -> str:
    """Table NAME with its provenance line, as it stands between its markers."""
    if name not in TABLES:
        raise KeyError(f"no table {name!r}; the tables: {', '.join(sorted(TABLES))}")
    path, renderer = TABLES[name]
    if not os.path.exists(os.path.join(ROOT, path)):
        raise SystemExit(f"table {name}: {path} does not exist; run the benchmark or study that writes it")
    results = load(path)
    source = folder_provenance(path, results) if path.endswith("/") else provenance(path, results)
    return f"{renderer(results)}\n\n{source}\n"


def pages(root: str = ROOT) -> list[str]:
    return [path for pattern in PAGES for path in sorted(glob.glob(os.path.join(root, pattern)))]


def rewrite(text: str) -> tuple[str, list[str]]:
    """`text` with every marked table rendered anew, and the names of those that changed."""
    changed = []

    def replace(match: re.Match) -> str:
        fresh = render(match.group(2))
        if match.group(3) != fresh:
            changed.append(match.group(2))
        return match.group(1) + fresh + match.group(4)

    return MARKER.sub(replace, text), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a table differs from its file")
    parser.add_argument("--list", action="store_true",
                        help="print each table's name, the file it reads and that file's provenance")
    parser.add_argument("--root", default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        for name, (path, _) in sorted(TABLES.items()):
            print(f"{name}\t{path}\t{recorded(path)}")
        return 0
    stale = []
    for page in pages(args.root):
        with open(page, encoding="utf-8") as f:
            text = f.read()
        fresh, changed = rewrite(text)
        relative = os.path.relpath(page, args.root)
        stale += [f"{relative}: table {name}" for name in changed]
        if changed and not args.check:
            with open(page, "w", encoding="utf-8") as f:
                f.write(fresh)
    for line in stale:
        print(f"{line} {'differs from its results file' if args.check else 'rewritten'}",
              file=sys.stderr if args.check else sys.stdout)
    if args.check and stale:
        print("run `python -m studies.tables` to render them again", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
