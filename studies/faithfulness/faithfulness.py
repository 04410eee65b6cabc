"""Faithfulness of every explanation method of a trained workdir, with its cost.

    python -m studies.faithfulness.faithfulness --workdir W --out DIR [--examples 500] [--split test]
        [--methods ...] [--removal pad|unk] [--batch_size 32] [--ig_steps 50] [--ig_chunk N]
        [--checks [--checks_examples 100]] [--tiny]

Explains the first `--examples` examples of the split with every method the model offers (as
`python -m jcaps.interpret --faithfulness` does, whose files it also writes to DIR) and writes
`DIR/results.json`: the content of `faithfulness.json` (one key per method, random included:
comprehensiveness, sufficiency, deletion and insertion AUC with 95 % bootstrap intervals, seconds
per 100 explained predictions), plus, measured in the same run on the first batch:

    "forward_s": one forward pass of the batch (median of 5, compiled),
    "integrated_gradients_s": integrated gradients of the same batch (median of 5),
    "integrated_gradients_over_forward": their ratio,
    "checks": with --checks, the sanity checks of `jcaps.interpret.checks` for the same methods
              on the first `--checks_examples` examples (each re-runs every method once per
              re-initialised stage and per noise draw, so it costs several faithfulness runs),
    "run": {"workdir", "split", "examples", "batch_size", "ig_steps", "wall_s", "model"},
    "_run": {commit, date, machine, load: `recording.provenance.run_metadata`}

and the same as a Markdown table in `DIR/results.md`. Reads the workdir's data (AG News, SemEval
emoji, ... wherever its config points, e.g. ../shared/data). `--tiny` explains 8 examples in one
batch with integrated gradients of 4 steps and random (unless `--methods` names others): a
check that it runs, seconds on a `:smoke` workdir (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from jcaps.interpret import checks, explain
from jcaps.interpret.corpus import explain_workdir
from jcaps.attribution._faithfulness import METRICS
from jcaps.train.workdir import load_trained
from jcaps.viz.html import checks_markdown
from recording.provenance import run_metadata

TINY = {"examples": 8, "batch_size": 8, "ig_steps": 4}
TINY_METHODS = ("integrated_gradients", "random")


def markdown(results: dict) -> str:
    methods = [k for k in results if isinstance(results[k], dict) and "comprehensiveness" in results[k]]
    random = results["random"]["comprehensiveness"] if "random" in results else float("nan")
    lines = [
        "| method | comprehensiveness | sufficiency | deletion AUC | insertion AUC | comprehensiveness / random "
        "| s per 100 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for method in methods:
        values = results[method]
        cells = " | ".join(
            f"{values[m]:.3f} [{values['ci95'][m][0]:.3f}, {values['ci95'][m][1]:.3f}]" for m in METRICS
        )
        lines.append(f"| {method} | {cells} | {values['comprehensiveness'] / random:.2f} | "
                     f"{values['seconds_per_100']:.2f} |")
    lines.append("")
    lines.append(f"One forward pass of a batch: {results['forward_s'] * 1000:.1f} ms; integrated gradients "
                 f"({results['run']['ig_steps']} steps) of the same batch: {results['integrated_gradients_s']:.2f} s "
                 f"= {results['integrated_gradients_over_forward']:.1f} forward passes.")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--split", default="test")
    parser.add_argument("--methods", default="", help="comma-separated; default: all the model offers")
    parser.add_argument("--removal", default="pad", choices=explain.REMOVALS)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--ig_steps", type=int, default=50)
    parser.add_argument("--ig_chunk", type=int, default=None, help="default: the model's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checks", action="store_true", help="add the sanity checks of the same methods")
    parser.add_argument("--checks_examples", type=int, default=100, help="--checks: examples checked")
    parser.add_argument("--tiny", action="store_true", help="8 examples, 4 IG steps, two methods (seconds)")
    args = parser.parse_args()
    if args.tiny:
        vars(args).update(TINY)

    metadata = run_metadata(args.tiny)
    started = time.perf_counter()
    trained = load_trained(args.workdir, with_data=True)
    if args.methods:
        methods = tuple(args.methods.split(","))
    else:
        methods = TINY_METHODS if args.tiny else explain.model_methods(trained.config.model)
    options = explain.Options(ig_steps=args.ig_steps, ig_chunk=args.ig_chunk, removal=args.removal)
    results = explain_workdir(trained, args.split, args.out, methods=methods, limit=args.examples,
                              with_faithfulness=True, options=options, batch_size=args.batch_size, seed=args.seed)

    explainer = explain.Explainer(trained, options, seed=args.seed)
    first = next(iter(trained.dataset.eval_batches(args.split, args.batch_size, limit=args.batch_size)))
    results["forward_s"] = explainer.seconds(first, None)
    results["integrated_gradients_s"] = explainer.seconds(first, "integrated_gradients")
    results["integrated_gradients_over_forward"] = results["integrated_gradients_s"] / results["forward_s"]
    if args.checks:
        results["checks"] = checks.check_workdir(trained, args.split, methods, limit=min(args.checks_examples,
                                                 args.examples), options=options, batch_size=args.batch_size,
                                                 seed=args.seed)
    results["run"] = {
        "workdir": os.path.abspath(args.workdir), "model": trained.config.model.name, "split": args.split,
        "examples": args.examples, "batch_size": args.batch_size, "ig_steps": args.ig_steps, "ig_chunk": args.ig_chunk,
        "removal": args.removal, "wall_s": round(time.perf_counter() - started, 1),
    }
    results["_run"] = metadata
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    table = markdown(results) + (f"\n{checks_markdown(results['checks'])}" if args.checks else "")
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)
    print(f"wall time {results['run']['wall_s']} s; wrote {args.out}/results.json and results.md")


if __name__ == "__main__":
    main()
