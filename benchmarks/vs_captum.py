"""jcaps' explanations against Captum's on PyTorch twins of the same models, in one run.

    pip install -e ".[compare]"          # torch, Captum and scikit-learn, for this script only
    python -m benchmarks.vs_captum --out DIR [--models fasttext,icapsnet_short,cccapsnet]
        [--methods integrated_gradients,gradient_x_input,occlusion,kernel_shap,lime]
        [--examples 128] [--batch 32] [--length 64] [--samples 256] [--repeats 3] [--tiny]

Each model is built from its AG News config (`configs/NAME_ag_news.py`, vocabulary 62,535
words as the published CCCapsNet, 4 classes) with jcaps' initial parameters, which its
PyTorch twin (`benchmarks/torch_text_twins.py`) copies: the same parameter count and, on the
same inputs, the same scores (the largest difference is recorded). The inputs are `--examples`
AG-shaped texts of `--length` random words, no padding, explained in batches of `--batch` for
the class jcaps predicts.

Methods, at equal budgets on both sides:
  integrated_gradients  50 midpoint steps from zero vectors (Captum: `riemann_middle`, every
                        step in one batch, its default; jcaps: the steps a call the model
                        ships for CPUs, `ModelHooks.copies_per_call` or one)
  gradient_x_input      one gradient
  occlusion             each word's vector replaced by zeros in turn (Captum: windows of one
                        word, every window of a batch in one call; jcaps: the model's
                        positions a call as shipped)
  kernel_shap           `--samples` coalitions an example, words absent = zero vectors (Captum:
                        `KernelShap`, which fits one scikit-learn regression per example, 64
                        coalitions of the example a forward call; jcaps: the model's
                        coalitions a call as shipped, of every example of the batch)
  lime                  `--samples` perturbed texts an example, cosine kernel of width 0.25,
                        ridge surrogate with alpha 1 (Captum: `Lime` with `SkLearnRidge`; its
                        default sampler keeps each word with probability 1/2, jcaps' keeps all
                        but a uniform number of them; the cost of an example is the same)
jcaps runs `jcaps.interpret.explain.Explainer` (what `python -m jcaps.interpret` runs): jitted,
every example of a batch at once; Captum runs its `attribute` per batch, which for KernelSHAP
and LIME loops over the examples. The two sides are timed call by call in turn (jcaps, Captum,
jcaps, ...; `vs_pytorch.paired_seconds`) over all `--examples`, and the ratio is the median of
the paired ratios jcaps / Captum, with the lowest and highest beside it. PyTorch uses
`os.cpu_count()` threads, XLA:CPU every core by default.

The attributions are compared as well: integrated gradients, gradient x input and occlusion must
agree up to float32 rounding (`max_relative_difference`: the largest difference over the
largest attribution), the sampling methods are estimates from different samples
(`spearman`: mean rank correlation per example of the two sides' scores; `jcaps_reseeded_spearman`:
the same between two jcaps runs with different samples, the agreement sampling noise allows).

Writes DIR/results.json: {"<model>": {"jcaps_parameters", "torch_parameters",
"max_abs_score_difference", "forward" (one forward pass of every batch, no gradient: "jcaps_s",
"torch_s", "ratio", "ratio_min", "ratio_max", the bound of any method that is a number of
forward passes), "methods": {"<method>": {"jcaps_s", "torch_s" (medians, all
examples), "jcaps_s_per_100", "torch_s_per_100", "ratio", "ratio_min", "ratio_max",
"max_relative_difference" | "spearman", "jcaps_gflop", "floor_s", "floor_ratio"}}},
"matmul_gflops": ..., "_run": {...}}.

The floor. `matmul_gflops` is this machine's best float32 matrix-multiplication rate under XLA,
measured in the same run (the fastest of a few large products). `jcaps_gflop` counts the
floating-point operations of jcaps' program for a method over all examples
(`benchmarks.flops.live_flops`: every loop step, dead code left out, as XLA runs it);
`floor_s` = those operations at the peak rate, and `floor_ratio` = floor_s / torch_s, the
lowest ratio any implementation doing those operations could reach on this machine, however
well it used the cores. A target below `floor_ratio` needs fewer operations, not faster ones. `--tiny` runs the smoke-sized models
on 8 texts of 12 words with 16 samples: a check that both sides run (seconds). Needs no data.
"""

from __future__ import annotations

import argparse
import os
import time
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from scipy.stats import spearmanr

from benchmarks.flops import live_flops
from jcaps.data.vocab import NUM_SPECIAL
from jcaps.interpret.explain import Explainer, Options
from jcaps.train.config import load
from jcaps.train.families import build_model, get_family
from jcaps.train.state import parameter_count
from recording.provenance import run_metadata
from recording.results import write_results
from recording.timing import paired_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("fasttext", "icapsnet_short", "cccapsnet")
METHODS = ("integrated_gradients", "gradient_x_input", "occlusion", "kernel_shap", "lime")
EXACT_METHODS = ("integrated_gradients", "gradient_x_input", "occlusion")
VOCAB_SIZE = 62_535  # the published CCCapsNet AG News vocabulary
NUM_CLASSES = 4
IG_STEPS = 50
CAPTUM_CHUNK = 64  # Captum's coalitions per forward call (`perturbations_per_eval`)
LIME_WIDTH = 0.25
RIDGE_ALPHA = 1.0


def jcaps_model(name: str, tiny: bool, vocab_size: int):
    """(model config, flax module, parameters) of configs/NAME_ag_news.py (":smoke" if tiny)."""
    config = load(os.path.join(ROOT, "configs", f"{name}_ag_news.py") + (":smoke" if tiny else ""))
    model = build_model(config.model, vocab_size, NUM_CLASSES)
    key = jax.random.key(0)
    params = model.init({"params": key, "dropout": key}, jnp.ones((1, 8), jnp.int32), train=False)["params"]
    return config, model, params


def explainer_of(config, model, params, samples: int, seed: int = 0) -> Explainer:
    """jcaps' explainer of an untrained model (what `load_trained` would give it)."""
    trained = types.SimpleNamespace(
        config=config, model=model, params=params, family=get_family(config.model.name),
        dataset=types.SimpleNamespace(labels=types.SimpleNamespace(names=[f"class {j}" for j in range(NUM_CLASSES)])),
    )
    options = Options(ig_steps=IG_STEPS, shap_samples=samples, lime_samples=samples)
    return Explainer(trained, options, seed=seed)


def captum_attribute(method: str, module, samples: int):
    """`(e, tokens, targets) -> [B, T]` Captum's attributions of the twin, one score a word."""
    import torch
    from captum.attr import InputXGradient, IntegratedGradients, KernelShap, Lime, Occlusion
    from captum.attr._core.lime import get_exp_kernel_similarity_function
    from captum._utils.models.linear_model import SkLearnRidge

    def words(e):  # a mask giving every word's D numbers one feature id
        return torch.arange(e.shape[1]).view(1, -1, 1).expand(e.shape)

    if method == "integrated_gradients":
        ig = IntegratedGradients(module)
        return lambda e, tokens, t: ig.attribute(e, baselines=torch.zeros_like(e), target=t, additional_forward_args=(tokens,),
                                                 n_steps=IG_STEPS, method="riemann_middle").sum(-1)
    if method == "gradient_x_input":
        xg = InputXGradient(module)
        return lambda e, tokens, t: xg.attribute(e, target=t, additional_forward_args=(tokens,)).sum(-1)
    if method == "occlusion":
        occlusion = Occlusion(module)
        return lambda e, tokens, t: occlusion.attribute(
            e, sliding_window_shapes=(1, e.shape[-1]), strides=(1, e.shape[-1]), baselines=0.0, target=t,
            additional_forward_args=(tokens,), perturbations_per_eval=e.shape[1])[..., 0]
    if method == "kernel_shap":
        shap = KernelShap(module)
        return lambda e, tokens, t: shap.attribute(
            e, baselines=0.0, target=t, additional_forward_args=(tokens,), feature_mask=words(e), n_samples=samples,
            perturbations_per_eval=CAPTUM_CHUNK)[..., 0]
    lime = Lime(module, interpretable_model=SkLearnRidge(alpha=RIDGE_ALPHA),
                similarity_func=get_exp_kernel_similarity_function("cosine", kernel_width=LIME_WIDTH))
    return lambda e, tokens, t: lime.attribute(
        e, baselines=0.0, target=t, additional_forward_args=(tokens,), feature_mask=words(e), n_samples=samples,
        perturbations_per_eval=CAPTUM_CHUNK)[..., 0]


def matmul_gflops(repeats: int = 10) -> float:
    """The machine's best float32 matmul rate under XLA, in GFLOP/s: the fastest call of a few
    large products, the rate no model's operations can beat on average."""
    best = 0.0
    for m, k, n in ((2048, 1024, 1024), (2048, 256, 768), (4096, 512, 512)):
        a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
        product = jax.jit(jnp.dot)
        product(a, b).block_until_ready()
        for _ in range(repeats):
            start = time.perf_counter()
            product(a, b).block_until_ready()
            best = max(best, 2 * m * k * n / (time.perf_counter() - start) / 1e9)
    return best


def scores_gflop(explainer: Explainer, rows, method: str) -> float:
    """GFLOP of the program `explainer.rows_scores(rows, method)` runs."""
    from jcaps.interpret.explain import _scores  # the jitted program of `rows_scores`

    def program(params, x, side, targets, key):
        return _scores(explainer.explained_model, method, params, x, side, targets, key, explainer.options)

    return live_flops(program, explainer.params, rows.x, rows.side, rows.targets, jax.random.key(0)).total / 1e9


def mean_spearman(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.nanmean([spearmanr(a, b).statistic for a, b in zip(ours, theirs)]))


def agreement(method: str, ours: np.ndarray, theirs: np.ndarray) -> dict:
    if method in EXACT_METHODS:
        return {"max_relative_difference": float(np.max(np.abs(ours - theirs)) / max(np.max(np.abs(theirs)), 1e-12))}
    return {"spearman": mean_spearman(ours, theirs)}


def compare_model(name: str, args) -> dict:
    import torch
    from benchmarks.torch_text_twins import twin

    vocab_size = 500 if args.tiny else VOCAB_SIZE
    config, model, params = jcaps_model(name, args.tiny, vocab_size)
    module = twin(config.model, params)
    row = {"jcaps_parameters": parameter_count(params),
           "torch_parameters": sum(p.numel() for p in module.parameters()),
           "examples": args.examples, "batch": args.batch, "length": args.length, "samples": args.samples}
    if row["jcaps_parameters"] != row["torch_parameters"]:
        raise AssertionError(f"{name}: parameter counts differ: {row}")
    explainer = explainer_of(config, model, params, args.samples)
    # A second jcaps explainer drawing other samples: how far two estimates of the same sampling
    # method agree, the yardstick for their agreement with Captum's.
    reseeded = explainer_of(config, model, params, args.samples, seed=1)
    rng = np.random.default_rng(0)
    tokens = rng.integers(NUM_SPECIAL, vocab_size, (args.examples, args.length)).astype(np.int32)
    batches = [{"tokens": tokens[i:i + args.batch], "weight": np.ones(args.batch, np.float32)}
               for i in range(0, args.examples, args.batch)]
    rows = [explainer.rows(batch) for batch in batches]
    targets = [torch.from_numpy(np.asarray(r.targets, np.int64)) for r in rows]
    token_batches = [torch.from_numpy(b["tokens"].astype(np.int64)) for b in batches]
    with torch.no_grad():
        vectors = [module.embed(t) for t in token_batches]
        torch_scores = np.concatenate([module(e, t).numpy() for e, t in zip(vectors, token_batches)])
    jcaps_scores = np.asarray(jax.jit(lambda p, x: model.apply({"params": p}, x).scores)(params, tokens))
    row["max_abs_score_difference"] = float(np.max(np.abs(jcaps_scores - torch_scores)))
    # The unit every method pays for: one forward pass of each batch (no gradient), timed in turn.
    forward = jax.jit(lambda p, x: model.apply({"params": p}, x).scores)

    def jcaps_forward():
        return [forward(params, b["tokens"]).block_until_ready() for b in batches]

    def torch_forward():
        with torch.no_grad():
            return [module(module.embed(t), t) for t in token_batches]

    row["forward"] = paired_seconds(jcaps_forward, torch_forward, args.repeats, warmup=1)
    print(f"{name} forward: ratio {row['forward']['ratio']:.2f}", flush=True)
    row["methods"] = {}
    for method in args.methods:
        attribute = captum_attribute(method, module, args.samples)

        def jcaps_call():
            return [explainer.rows_scores(r, method) for r in rows]

        def torch_call():
            return [attribute(e, t, target).detach().numpy() for e, t, target in zip(vectors, token_batches, targets)]

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Captum's advice to explain one example at a time
            theirs = np.concatenate(torch_call())
            ours = np.concatenate(jcaps_call())
            timing = paired_seconds(jcaps_call, torch_call, args.repeats, warmup=1)
        per_100 = 100.0 / args.examples
        gflop = sum(scores_gflop(explainer, r, method) for r in rows)
        floor_s = gflop / args.matmul_gflops
        row["methods"][method] = {**timing, "jcaps_s_per_100": timing["jcaps_s"] * per_100,
                                  "torch_s_per_100": timing["torch_s"] * per_100, **agreement(method, ours, theirs),
                                  "jcaps_gflop": gflop, "floor_s": floor_s, "floor_ratio": floor_s / timing["torch_s"]}
        if method not in EXACT_METHODS:
            again = np.concatenate([reseeded.rows_scores(r, method) for r in rows])
            row["methods"][method]["jcaps_reseeded_spearman"] = mean_spearman(ours, again)
        print(f"{name} {method}: jcaps {timing['jcaps_s']:.3f} s, Captum {timing['torch_s']:.3f} s, "
              f"ratio {timing['ratio']:.2f} [{timing['ratio_min']:.2f}, {timing['ratio_max']:.2f}]", flush=True)
    return row


def versions() -> dict:
    import captum
    import sklearn
    import torch

    return {"jax": jax.__version__, "torch": torch.__version__, "captum": captum.__version__,
            "sklearn": sklearn.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--examples", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--samples", type=int, default=256, help="KernelSHAP coalitions / LIME texts an example")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="smoke-sized models, 8 texts of 12 words, 16 samples")
    args = parser.parse_args()
    args.models, args.methods = args.models.split(","), args.methods.split(",")
    for value, known in ((args.models, MODELS), (args.methods, METHODS)):
        unknown = sorted(set(value) - set(known))
        if unknown:
            parser.error(f"unknown {', '.join(unknown)}; choose among {', '.join(known)}")
    if args.tiny:
        args.examples, args.batch, args.length, args.samples, args.repeats = 8, 4, 12, 16, 1
    import torch

    torch.set_num_threads(os.cpu_count())
    results = {"_run": {**run_metadata(args.tiny), "torch_threads": torch.get_num_threads(), "versions": versions()}}
    args.matmul_gflops = results["matmul_gflops"] = matmul_gflops(2 if args.tiny else 10)
    for name in args.models:
        results[name] = compare_model(name, args)
        write_results(args.out, results)
    results["_run"]["load_average_after"] = os.getloadavg()[0]
    write_results(args.out, results)


if __name__ == "__main__":
    main()
