"""Localisation on planted evidence: do the explanations of fastText, iCapsNets Short and
CCCapsNet put a planted keyword of the predicted class first?

    python -m studies.localisation.localisation --out DIR [--models fasttext,icapsnet_short,cccapsnet]
        [--methods gradient,smoothgrad,integrated_gradients,occlusion,kernel_shap,lime,random] [--examples 128]
        [--decoys 1] [--train_size 2048] [--epochs 10] [--set KEY=VALUE ...] [--tiny]

Trains each model's `:smoke` config (`configs/MODEL_ag_news.py:smoke`) on the generated texts
of `jcaps.data.synthetic` with `--decoys` single keywords of another class in every text
(`data.synthetic_decoys`; the label is carried by two to four keywords of its class, the rest is
filler), `--train_size` texts for `--epochs` epochs (the smoke configs' own budgets leave
iCapsNets Short at 0.77 test accuracy on these texts), in DIR/runs/MODEL (a finished run is
reused), then runs the sanity checks of
`jcaps.interpret.checks` on the first `--examples` test texts: the pointing game (the top-ranked
token is a keyword of the correctly predicted class), per class as well, the top-k hit rate and
the randomisation check. `--set model.num_layers=2` (repeatable) trains every model with that
override too, for ablations. Writes DIR/results.json ({model: {"accuracy", "checks", "flags"},
"settings", "_run"}). No data needed; `--tiny` trains 3 steps and checks 8 texts with integrated
gradients and random (seconds a model; the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os

from jcaps.interpret import checks
from jcaps.train.workdir import load_trained
from jcaps.viz.html import checks_markdown
from recording.provenance import run_metadata
from studies import ROOT
from studies.training_runs import final_test_metrics, train_pending

MODELS = {"fasttext": "fasttext_ag_news.py", "icapsnet_short": "icapsnet_short_ag_news.py",
          "cccapsnet": "cccapsnet_ag_news.py"}
METHODS = ("gradient", "smoothgrad", "integrated_gradients", "occlusion", "kernel_shap", "lime", "random")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--examples", type=int, default=128)
    parser.add_argument("--decoys", type=int, default=1, help="data.synthetic_decoys of every run")
    parser.add_argument("--train_size", type=int, default=2048, help="data.synthetic_train_size of every run")
    parser.add_argument("--epochs", type=int, default=10, help="train.num_epochs of every run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override of every run")
    parser.add_argument("--tiny", action="store_true", help="3 training steps, 8 texts, two methods (seconds)")
    parser.add_argument("--cache_dir", default="", help="prepared-data cache (default ~/tensorflow_datasets)")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown {unknown}; known: {', '.join(MODELS)}")
    methods = ("integrated_gradients", "random") if args.tiny else tuple(m for m in args.methods.split(",") if m)
    examples = 8 if args.tiny else args.examples
    if any("=" not in s for s in args.set):
        parser.error(f"--set takes KEY=VALUE, not {[s for s in args.set if '=' not in s]}")
    metadata = run_metadata(args.tiny)

    flags = [f"--config.data.synthetic_decoys={args.decoys}", f"--config.data.synthetic_train_size={args.train_size}",
             f"--config.train.num_epochs={args.epochs}", *(f"--config.{s}" for s in args.set)]
    flags += ["--config.train.num_steps=3"] if args.tiny else []
    flags += [f"--config.data.cache_dir={args.cache_dir}"] if args.cache_dir else []
    workdirs = {m: os.path.join(args.out, "runs", m) for m in models}
    train_pending([(workdirs[m], ["--config", os.path.join(ROOT, "configs", f"{MODELS[m]}:smoke"), "--workdir",
                                  workdirs[m], *flags]) for m in models], jobs=1)
    results = {}
    for model in models:
        trained = load_trained(workdirs[model], with_data=True)
        summary = checks.check_workdir(trained, "test", methods, limit=examples)
        results[model] = {"accuracy": round(final_test_metrics(workdirs[model])["accuracy"], 4), "flags": flags,
                          "checks": summary}
        print(f"{model}: test accuracy {results[model]['accuracy']:.4f}\n{checks_markdown(summary)}")
    results["settings"] = {"examples": examples, "decoys": args.decoys, "train_size": args.train_size,
                           "epochs": args.epochs, "set": args.set, "methods": list(methods)}
    results["_run"] = metadata
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {args.out}/results.json")


if __name__ == "__main__":
    main()
