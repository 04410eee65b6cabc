"""What SGM generates, decoded several ways: how many labels, how its mistakes follow one another,
and where it stops.

    python -m studies.sgm_sequences.sgm_sequences --workdirs W [W ...] --split validation --out DIR
        [--length_penalties 0 0.5 1] [--greedy] [--eos_thresholds 0.4 0.5] [--config.data.dir=D] [--tiny]

For each trained SGM workdir (with or without the global embedding) and each decoding (beam
search with each `--length_penalties` value, greedy decoding with `--greedy`, and greedy
decoding that stops when P(EOS) reaches each of `--eos_thresholds`), it decodes
the split and writes

    DIR/results.json  {"split", "results": {"<workdir>": {"<decoding>": {<multi-label metrics>,
                       "errors": {...}}}}, "_run": {commit, date, machine, load:
                       `recording.provenance.run_metadata`}}

with the metrics `jcaps.evaluate` prints (micro / macro F1, labels generated per example
against the true number, ...) and `studies.sgm_sequences.errors.label_sequence_errors`: the
error rate of the label at each position of the generated sequence, of the labels generated
after a wrong one against after an all-true prefix, and how many true labels were lost because the decoder
stopped (EOS) with every label so far true. Choose decoding settings on `validation`; read
`test` only for the settings chosen. Reads the workdirs' data (`--config.data.dir` if it moved).
`--tiny` decodes the first 32 examples of the split, beam search with length penalty 0 only: a
check that it runs, seconds on a `:smoke` workdir (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os

import jax
import numpy as np

from jcaps.data.vocab import EOS, NUM_SPECIAL
from jcaps.train.metrics import multilabel_metrics, multilabel_sums
from studies.sgm_sequences.errors import label_sequence_errors
from jcaps.train.workdir import load_trained
from recording.provenance import run_metadata

TINY_LIMIT = 32


def decodings(length_penalties: list[float], greedy: bool, eos_thresholds: list[float]) -> dict[str, dict]:
    """{name: decoding keys of the model} for each setting asked for."""
    settings = {f"beam_lp{lp:g}": {"decoding": "beam", "length_penalty": lp} for lp in length_penalties}
    if greedy:
        settings["greedy"] = {"decoding": "greedy", "eos_threshold": 0.0}
    for threshold in eos_thresholds:
        settings[f"greedy_eos{threshold:g}"] = {"decoding": "greedy", "eos_threshold": threshold}
    return settings


def decode_split(trained, split: str, overrides: dict, limit: int = 0) -> dict:
    """Metrics and sequence errors of the `trained` SGM (`load_trained`, with its data) on the
    first `limit` examples of `split` (all when 0), with its decoding keys set to `overrides`
    (the parameters are the same for every setting)."""
    model = trained.model.clone(**overrides)
    predict = jax.jit(lambda params, tokens: model.apply({"params": params}, tokens, method="predict"))
    batch_size = trained.config.train.eval_batch_size or trained.config.train.batch_size
    sequences, predicted, targets = [], [], []
    for batch in trained.dataset.eval_batches(split, batch_size, limit=limit):
        real = batch["weight"] > 0
        out = jax.device_get(predict(trained.params, batch["tokens"]))
        sequences.append(out.sequence[real])
        predicted.append(out.labels[real])
        targets.append(batch["labels"][real])
    sequences, predicted, targets = np.concatenate(sequences), np.concatenate(predicted), np.concatenate(targets)
    sums = jax.device_get(multilabel_sums(predicted, targets, np.ones((len(targets),), np.float32)))
    errors = label_sequence_errors(sequences, targets, NUM_SPECIAL, EOS)
    return {**multilabel_metrics(sums), "selected_step": trained.selection["selected_step"],
            "errors": {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in errors.items()}}


def _error_rate(errors: dict, context: str) -> float:
    """The fraction wrong of the labels generated in `context` ("after_wrong", "after_correct"),
    over every position."""
    return sum(errors[f"{context}_wrong"]) / max(sum(errors[f"{context}_count"]), 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdirs", nargs="+", required=True)
    parser.add_argument("--split", default="validation")
    parser.add_argument("--length_penalties", nargs="*", type=float, default=[0.0, 0.5, 1.0])
    parser.add_argument("--greedy", action="store_true", help="also greedy (argmax) decoding")
    parser.add_argument("--eos_thresholds", nargs="*", type=float, default=[],
                        help="also greedy decoding that stops when P(EOS) reaches each of these")
    parser.add_argument("--config.data.dir", dest="data_dir", default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true", help=f"the first {TINY_LIMIT} examples, one decoding (seconds)")
    args = parser.parse_args()
    if args.tiny:
        args.length_penalties, args.greedy, args.eos_thresholds = [0.0], False, []
    metadata = run_metadata(args.tiny)
    results = {}
    for workdir in args.workdirs:
        results[workdir] = {}
        # Read once: the data and parameters are the same for every decoding.
        data_overrides = {"dir": args.data_dir} if args.data_dir else None
        trained = load_trained(workdir, with_data=True, data_overrides=data_overrides)
        for name, overrides in decodings(args.length_penalties, args.greedy, args.eos_thresholds).items():
            result = decode_split(trained, args.split, overrides, TINY_LIMIT if args.tiny else 0)
            results[workdir][name] = result
            errors = result["errors"]
            print(f"{workdir} {args.split} {name}: micro-F1 {result['micro_f1']:.4f} (P {result['micro_precision']:.3f}"
                  f" R {result['micro_recall']:.3f}) labels {result['labels_per_example']:.2f}"
                  f" / {result['true_labels_per_example']:.2f}; wrong after a wrong label"
                  f" {_error_rate(errors, 'after_wrong'):.3f}, after all true"
                  f" {_error_rate(errors, 'after_correct'):.3f};"
                  f" missed by stopping {errors['missed_by_stopping']} of {errors['missed']} missed", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"split": args.split, "results": results, "_run": metadata}, f, indent=1)


if __name__ == "__main__":
    main()
