"""Integrated gradients' completeness error by integration rule: the midpoint rule against
Gauss-Legendre at equal steps, on a trained model's test texts.

    python -m studies.integration_rules.integration_rules --out DIR [--config cccapsnet_ag_news.py:smoke]
        [--steps 4,8,16,32,64] [--examples 64] [--tiny]

Trains `configs/CONFIG` (by default CCCapsNet's `:smoke` config, generated texts, no data needed)
in DIR/run (a finished run is reused), then explains the predicted class of its first
`--examples` test texts by integrated gradients (`jcaps.attribution.integrated_gradients`, zero
baseline at the real positions, through `jcaps.interpret.explain`'s view of the model as a
function of its input vectors) with each rule and number of steps, and records the relative
completeness error |sum of scores - (f(x) - f(x'))| / |f(x) - f(x')| per text: its median, 95th
percentile and maximum. All-zero scores, the degenerate answer, have error 1. Writes
DIR/results.json ({"by_steps": {"<K>": {"midpoint": {...}, "gausslegendre": {...}}}, "config",
"examples", "test_accuracy", "_run"}). `--tiny`: 3 training steps, 8 texts, K = 2 and 4.
"""

from __future__ import annotations

import argparse
import os

import jax.numpy as jnp
import numpy as np

from jcaps import attribution
from jcaps.interpret.explain import Explainer
from jcaps.train.workdir import load_trained
from recording.provenance import run_metadata
from recording.results import write_results
from studies import ROOT
from studies.training_runs import final_test_metrics, train_pending

RULES = ("midpoint", "gausslegendre")


def completeness_errors(explainer: Explainer, rows, n_steps: int, rule: str) -> np.ndarray:
    """[R] relative completeness errors of integrated gradients with `n_steps` points by `rule`."""
    model = explainer.explained_model
    f = model.of_vectors(explainer.params)
    vectors = jnp.asarray(explainer.vectors(rows))
    args = (rows.x,) if rows.side is None else (rows.x, rows.side)
    mask = model.mask(rows.x, rows.side)
    scores = attribution.integrated_gradients(f, vectors, rows.targets, mask=mask, args=args, n_steps=n_steps,
                                              rule=rule)
    baseline = jnp.where(mask[..., None], 0.0, vectors)
    ends = f(jnp.concatenate([vectors, baseline]), *(jnp.concatenate([a, a]) for a in args))
    picked = np.asarray(jnp.take_along_axis(ends, jnp.tile(rows.targets, 2)[:, None], 1)[:, 0])
    change = picked[: len(vectors)] - picked[len(vectors):]
    count = len(rows.example)
    return (np.abs(np.asarray(scores).sum(-1) - change) / np.maximum(np.abs(change), 1e-12))[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--config", default="cccapsnet_ag_news.py:smoke")
    parser.add_argument("--steps", default="4,8,16,32,64")
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    metadata = run_metadata(args.tiny)
    steps = (2, 4) if args.tiny else tuple(int(s) for s in args.steps.split(","))
    examples = 8 if args.tiny else args.examples
    workdir = os.path.join(args.out, "run")
    flags = ["--config", os.path.join(ROOT, "configs", args.config), "--workdir", workdir]
    train_pending([(workdir, flags + (["--config.train.num_steps=3"] if args.tiny else []))], jobs=1)
    trained = load_trained(workdir, with_data=True)
    explainer = Explainer(trained)
    batch = next(iter(trained.dataset.eval_batches("test", examples, limit=examples)))
    rows = explainer.rows(batch)
    results: dict = {"config": args.config, "examples": len(rows.example),
                     "test_accuracy": final_test_metrics(workdir)["accuracy"], "by_steps": {}}
    for n_steps in steps:
        for rule in RULES:
            errors = completeness_errors(explainer, rows, n_steps, rule)
            results["by_steps"].setdefault(str(n_steps), {})[rule] = {
                "median": float(np.median(errors)), "p95": float(np.percentile(errors, 95)),
                "max": float(np.max(errors))}
        print(n_steps, results["by_steps"][str(n_steps)], flush=True)
    write_results(args.out, {**results, "_run": metadata})
    print(f"wrote {args.out}/results.json")


if __name__ == "__main__":
    main()
