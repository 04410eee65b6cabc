"""`python -m jcaps.predict --workdir W (--text "..." | --input FILE) [--top_k K | --threshold P]`.

Prints one JSON line per text. Single-label models: the predicted label, and the probabilities
of the top-k labels (all labels when --top_k is 0). Multi-label models: the predicted label set
(`labels`); binary relevance also prints per-label probabilities (the top k, or all) and takes
`--threshold` (default: the model's `threshold`); a sequence-generation model prints its labels
in the order it generated them (the first k with --top_k). `--input` reads one text a line ('-'
for standard input).
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np
from absl import app, flags

from jcaps import cli

from jcaps.ops.decoding import NUM_SPECIAL
from jcaps.train.workdir import TrainedModel, load_trained

FLAGS = flags.FLAGS


def _token_batches(trained: TrainedModel, texts: list[str], batch_size: int):
    """`(texts, tokens)` chunks padded to the training buckets."""
    dataset = trained.dataset
    # pad_batch wants labels; these placeholders are never read.
    unlabelled = (
        {"labels": np.zeros((dataset.num_classes,), np.float32), "label_ids": np.zeros((0,), np.int32)}
        if dataset.multi_label
        else {"label": np.int32(0)}
    )
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        examples = [{"tokens": dataset.encode_text(t), "index": np.int32(i), **unlabelled} for i, t in enumerate(chunk)]
        yield chunk, dataset.pad_batch(examples, len(chunk))["tokens"]


def _rounded(names, p, order) -> dict:
    return {names[int(i)]: round(float(p[i]), 6) for i in order}


def predict(
    trained: TrainedModel, texts: list[str], top_k: int = 0, batch_size: int = 64, threshold: float | None = None
) -> list[dict]:
    """The prediction for each text: see the module docstring."""
    family, name = trained.family, trained.config.model.name
    if family.inputs[0] != "tokens":
        raise ValueError(f"{name} reads series, not text: evaluate it with jcaps.evaluate "
                         "and explain it with jcaps.interpret")
    multi_label = family.predict_labels is not None
    if threshold is not None and not (multi_label and family.probabilities is not None):
        raise ValueError(f"--threshold applies to multi-label models with per-label scores, not to {name}")
    names = trained.dataset.labels.names
    k = top_k or len(names)
    if multi_label and family.probabilities is None:
        generate = jax.jit(lambda tokens: trained.model.apply({"params": trained.params}, tokens, method="predict"))
    else:
        generate = None
        probabilities_of = jax.jit(lambda tokens: family.probabilities(trained.apply(tokens)))
    cut = trained.config.model.get("threshold", 0.5) if threshold is None else threshold
    results = []
    for chunk, tokens in _token_batches(trained, texts, batch_size):
        if generate is not None:
            # Label-sequence ids: 4 + label index until EOS (the decoder writes nothing after it).
            outputs = jax.device_get(generate(tokens))
            for text, sequence, length in zip(chunk, outputs["sequence"], outputs["length"]):
                labels = [names[int(i) - NUM_SPECIAL] for i in sequence[: int(length)]]
                results.append({"text": text, "labels": labels[:k]})
            continue
        probabilities = np.asarray(probabilities_of(tokens))
        for text, p in zip(chunk, probabilities):
            order = np.argsort(-p)[:k]
            if multi_label:
                chosen = [names[int(i)] for i in np.argsort(-p) if p[i] >= cut]
                results.append({"text": text, "labels": chosen, "threshold": cut, "probabilities": _rounded(names, p, order)})
            else:
                results.append({"text": text, "label": names[int(order[0])], "probabilities": _rounded(names, p, order)})
    return results


def main(argv):
    del argv
    texts = list(FLAGS.text)
    if FLAGS.input:
        stream = sys.stdin if FLAGS.input == "-" else open(FLAGS.input, encoding="utf-8")
        with stream:
            texts += [line.rstrip("\n") for line in stream if line.strip()]
    if not texts:
        raise app.UsageError("give --text or --input")
    try:
        results = predict(load_trained(FLAGS.workdir), texts, FLAGS.top_k, FLAGS.batch_size, FLAGS.threshold)
    except ValueError as error:  # a flag that does not fit this workdir's model
        raise app.UsageError(str(error)) from None
    for result in results:
        print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    # Flags are defined only when run as a program, so importing this module defines none.
    flags.DEFINE_string("workdir", None, "A workdir written by train.py.")
    flags.DEFINE_multi_string("text", [], "A text to classify (repeatable).")
    flags.DEFINE_string("input", None, "A file with one text a line, or '-' for standard input.")
    flags.DEFINE_integer("top_k", 0, "Print the k most probable labels (0: all); for a sequence model, its first k.")
    flags.DEFINE_float("threshold", None, "Multi-label models with per-label scores: the probability a label "
                       "needs to be predicted (default: the model's threshold).")
    flags.DEFINE_integer("batch_size", 64, "Texts per forward pass.")
    flags.mark_flag_as_required("workdir")
    cli.run(main)
