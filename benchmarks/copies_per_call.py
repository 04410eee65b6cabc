"""How many copies of a batch one call of the model should score: each method's speed at every
copies-a-call setting, on the models that ship one (`Method.copies_per_call`, and a model's own
`ModelHooks.copies_per_call`).

    python -m benchmarks.copies_per_call --out DIR [--models fasttext,icapsnet_short,cccapsnet]
        [--methods integrated_gradients,occlusion,lime] [--copies 1,2,4,5,8,16,32]
        [--batch 32] [--length 64] [--repeats 3] [--tiny]

Each model is built from its AG News config (`configs/NAME_ag_news.py`) with jcaps' initial
parameters, as `benchmarks/vs_captum.py` builds it, and explained by
`jcaps.interpret.explain.Explainer` (what `python -m jcaps.interpret` runs) on one batch of
`--batch` texts of `--length` random words, for the class it predicts; the method's copies-a-call
flag (`ig_chunk`, `occlusion_chunk`, `sampling_chunk`) is set to each of `--copies` in turn. The
time of a setting is the median of `--repeats` calls after one that compiles.

Writes DIR/results.json: {"<model>": {"<method>": {"seconds": {"<copies>": s}, "fastest":
copies, "shipped": the copies `python -m jcaps.interpret` uses for it on a CPU}}, "_run": {...}}.
`--tiny` runs the smoke-sized models on 4 texts of 8 words (a check that it runs).
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np

from benchmarks.vs_captum import explainer_of, jcaps_model
from jcaps.attribution.methods import COPIES_PER_CALL, METHODS
from jcaps.data.vocab import NUM_SPECIAL
from jcaps.interpret.explain import Options
from jcaps.interpret.hooks import hooks_of
from recording.provenance import run_metadata
from recording.results import write_results

SAMPLES = 256  # the sampling methods' coalitions an example (their default)


def copies_flag(method: str) -> str:
    """The command-line flag that sets `method`'s copies a call."""
    return next(flag for flag, declared in METHODS[method].flags.items() if declared.option == COPIES_PER_CALL)


def time_method(name: str, method: str, copies: tuple[int, ...], args) -> dict:
    vocab_size = 500 if args.tiny else 62_535
    config, model, params = jcaps_model(name, args.tiny, vocab_size)
    rng = np.random.default_rng(0)
    tokens = rng.integers(NUM_SPECIAL, vocab_size, (args.batch, args.length)).astype(np.int32)
    batch = {"tokens": tokens, "weight": np.ones(args.batch, np.float32)}
    seconds = {}
    for count in copies:
        explainer = explainer_of(config, model, params, SAMPLES)
        explainer.options = Options(ig_steps=50, shap_samples=SAMPLES, lime_samples=SAMPLES, **{copies_flag(method): count})
        rows = explainer.rows(batch)
        jax.block_until_ready(explainer.rows_scores(rows, method))  # compiles
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            jax.block_until_ready(explainer.rows_scores(rows, method))
            times.append(time.perf_counter() - start)
        seconds[str(count)] = float(np.median(times))
    shipped = dict(hooks_of(config.model.name).copies_per_call).get(method) or METHODS[method].copies_per_call
    return {"seconds": seconds, "fastest": int(min(seconds, key=seconds.__getitem__)), "shipped": shipped}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="fasttext,icapsnet_short,cccapsnet")
    parser.add_argument("--methods", default="integrated_gradients,occlusion,lime")
    parser.add_argument("--copies", default="1,2,4,5,8,16,32")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch, args.length, args.repeats = 4, 8, 1
    load = os.getloadavg()[0]
    copies = tuple(int(c) for c in args.copies.split(","))
    results: dict = {}
    for name in args.models.split(","):
        for method in args.methods.split(","):
            results.setdefault(name, {})[method] = time_method(name, method, copies, args)
            print(name, method, results[name][method], flush=True)
            write_results(args.out, {**results, "_run": run_metadata(args.tiny, load)})


if __name__ == "__main__":
    main()
