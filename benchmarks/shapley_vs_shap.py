"""KernelSHAP against exact Shapley values, jcaps beside SHAP's KernelExplainer at the same number
of model evaluations.

    python -m benchmarks.shapley_vs_shap --workdir W --out DIR [--examples 40] [--seeds 5]
    python -m benchmarks.shapley_vs_shap --out DIR --tiny     # trains iCapsNets Short's :smoke config

The game: the first M = 10 tokens of a test text of a trained iCapsNets Short workdir, each token
a player that keeps its word vector or takes zeros, and the model's raw score (capsule length) of
the class it predicts for those 10 tokens. The exact Shapley values enumerate all 2^10 coalitions.
Each estimator gets `--samples` coalition evaluations (256) beside the full and the empty input:

  jcaps            `jcaps.attribution._kernels.kernel_shap` (sizes enumerated while the budget
                   covers them, the rest sampled in complementary pairs by stratum)
  shap             `shap.KernelExplainer(f, zeros).shap_values(ones, nsamples=256)`, its defaults
  shap_no_l1       the same with `l1_reg=False` (no feature selection before the regression)
  uniform          (f(x) - f(0)) / M for every token: efficiency alone, the degenerate estimate

For each, the relative L2 error ||phi - phi_exact|| / ||phi_exact|| of every text, averaged over
the texts, for each of `--seeds` keys (jcaps) or NumPy seeds (SHAP). Needs `shap` (the `compare`
extra). Writes DIR/results.json: {"estimators": {name: {"mean", "std", "per_seed"}}, "examples",
"players", "samples", "workdir", "_run"}.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.attribution import _kernels as attribution
from jcaps.interpret.explain import Explainer
from jcaps.train.workdir import load_trained
from recording.provenance import run_metadata
from recording.results import write_results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAYERS = 10


def exact_shapley(values: np.ndarray, coalitions: np.ndarray) -> np.ndarray:
    """phi [B, M] from the values [2^M, B] of every coalition [2^M, M] (bool):
    phi_i = sum over S without i of |S|! (M - |S| - 1)! / M! (v(S + i) - v(S))."""
    m = coalitions.shape[1]
    index = {tuple(row): n for n, row in enumerate(coalitions)}
    phi = np.zeros((values.shape[1], m))
    for n, row in enumerate(coalitions):
        size = int(row.sum())
        for i in np.flatnonzero(~row):
            joined = row.copy()
            joined[i] = True
            weight = math.factorial(size) * math.factorial(m - size - 1) / math.factorial(m)
            phi[:, i] += weight * (values[index[tuple(joined)]] - values[n])
    return phi


def relative_error(estimate: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean(np.linalg.norm(estimate - exact, axis=-1) / np.linalg.norm(exact, axis=-1)))


def game(workdir: str, examples: int):
    """(score function of vectors [k * B, M, D] -> [k * B, C], vectors [B, M, D], targets [B]) of
    the first `examples` test texts with at least M tokens, cut to their first M."""
    trained = load_trained(workdir, with_data=True)
    explained = Explainer(trained).explained_model
    texts = []
    for batch in trained.dataset.eval_batches("test", 64):
        tokens = np.asarray(batch["tokens"])[:, :PLAYERS]
        texts += [row for row, weight in zip(tokens, batch["weight"]) if weight > 0 and np.all(row > 0)]
        if len(texts) >= examples:
            break
    x = jnp.asarray(np.stack(texts[:examples]))
    params = trained.params

    f = explained.of_vectors(params)

    @jax.jit
    def score(vectors):  # [k * B, M, D]: the B texts read k times, with these vectors
        return f(vectors, jnp.tile(x, (vectors.shape[0] // x.shape[0], 1)))

    vectors = explained.vectors(params, x, None)
    targets = jnp.argmax(score(vectors), axis=-1)
    return score, vectors, targets


def shap_estimates(score, vectors: np.ndarray, targets: np.ndarray, samples: int, seed: int, l1_reg) -> np.ndarray:
    """SHAP's KernelExplainer on each text's game, one text at a time (it explains one function)."""
    import shap

    count, m = vectors.shape[:2]
    estimates = np.zeros((count, m))
    for b in range(count):
        def f(z, b=b):
            # Each row of z [n, M] a coalition of text b; the other texts' rows are left as
            # they are, so the score function sees the batch it was compiled for.
            z = np.asarray(z, bool)
            out = np.zeros(len(z))
            for start in range(0, len(z), count):
                chunk = z[start:start + count]
                batch = np.array(vectors)
                batch[: len(chunk)] = np.where(chunk[..., None], vectors[b], 0.0)
                scores = np.asarray(score(jnp.asarray(batch)))
                out[start:start + len(chunk)] = scores[: len(chunk), targets[b]]
            return out

        np.random.seed(seed)
        explainer = shap.KernelExplainer(f, np.zeros((1, m)))
        estimates[b] = explainer.shap_values(np.ones((1, m)), nsamples=samples, silent=True, l1_reg=l1_reg)[0]
    return estimates


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", help="a trained iCapsNets Short workdir (default with --tiny: trained here)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--tiny", action="store_true", help="the :smoke model, 4 texts, 2 seeds")
    args = parser.parse_args()
    metadata = run_metadata(args.tiny)
    examples, seeds = (4, 2) if args.tiny else (args.examples, args.seeds)
    workdir = args.workdir
    if workdir is None:
        if not args.tiny:
            parser.error("--workdir: a trained iCapsNets Short workdir (or --tiny)")
        workdir = os.path.join(args.out, "workdir")
        if not os.path.isdir(os.path.join(workdir, "best")):
            subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--config",
                            os.path.join(ROOT, "configs", "icapsnet_short_ag_news.py") + ":smoke", "--workdir", workdir,
                            f"--config.data.cache_dir={os.path.join(args.out, 'data')}", "--config.train.progress=none"],
                           check=True, stdout=subprocess.DEVNULL)

    score, vectors, targets = game(workdir, examples)
    count, m = vectors.shape[:2]
    every = np.array([[(n >> i) & 1 for i in range(m)] for n in range(2**m)], bool)
    values = np.asarray(attribution.coalition_values(score, vectors, jnp.zeros_like(vectors), targets,
                                                     jnp.asarray(np.broadcast_to(every[:, None], (2**m, count, m))),
                                                     max_rows=64 * count, linear_map=None, prefix_radius=None))
    exact = exact_shapley(values, every)
    full, empty = values[-1], values[0]
    mask = jnp.ones((count, m), bool)
    kernel_shap = jax.jit(lambda key: attribution.kernel_shap(score, vectors, targets, mask, key,
                                                              n_samples=args.samples, baseline=jnp.zeros_like(vectors),
                                                              max_rows=64 * count, linear_map=None, prefix_radius=None,
                                                              groups=None))
    vectors_np, targets_np = np.asarray(vectors), np.asarray(targets)
    errors: dict[str, list[float]] = {"jcaps": [], "shap": [], "shap_no_l1": []}
    for seed in range(seeds):
        errors["jcaps"].append(relative_error(np.asarray(kernel_shap(jax.random.key(seed))), exact))
        errors["shap"].append(relative_error(shap_estimates(score, vectors_np, targets_np, args.samples, seed, "auto"),
                                             exact))
        errors["shap_no_l1"].append(relative_error(
            shap_estimates(score, vectors_np, targets_np, args.samples, seed, False), exact))
    errors["uniform"] = [relative_error(np.repeat(((full - empty) / m)[:, None], m, axis=1), exact)]
    write_results(args.out, {
        "estimators": {name: {"mean": statistics.mean(per_seed),
                              "std": statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0,
                              "per_seed": per_seed} for name, per_seed in errors.items()},
        "examples": count, "players": m, "samples": args.samples, "workdir": os.path.abspath(workdir),
        "_run": metadata,
    })


if __name__ == "__main__":
    main()
