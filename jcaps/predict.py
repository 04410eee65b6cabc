"""`python -m jcaps.predict --workdir W (--text "..." | --input FILE) [--top_k K]`.

Prints one JSON line per text: the predicted label, and the probabilities of the top-k labels
(all labels when --top_k is 0). `--input` reads one text a line ('-' for standard input).
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np
from absl import app, flags

from jcaps.train.workdir import TrainedModel, load_trained

FLAGS = flags.FLAGS


def predict(trained: TrainedModel, texts: list[str], top_k: int = 0, batch_size: int = 64) -> list[dict]:
    """Label and probabilities for each text (batches padded to the training buckets)."""
    if trained.family.inputs != ("tokens",):
        raise ValueError(f"{trained.config.model.name} reads series, not text: evaluate it with jcaps.evaluate "
                         "and explain it with jcaps.interpret")
    apply = jax.jit(lambda tokens: trained.family.probabilities(trained.apply(tokens)))
    names = trained.dataset.labels.names
    k = top_k or len(names)
    results = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        examples = [
            {"tokens": trained.dataset.encode_text(text), "index": np.int32(i), "label": np.int32(0)}
            for i, text in enumerate(chunk)
        ]
        batch = trained.dataset.pad_batch(examples, len(chunk))
        probabilities = np.asarray(apply(batch["tokens"]))
        for text, p in zip(chunk, probabilities):
            order = np.argsort(-p)[:k]
            results.append(
                {"text": text, "label": names[int(order[0])], "probabilities": {names[int(i)]: round(float(p[i]), 6) for i in order}}
            )
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
    for result in predict(load_trained(FLAGS.workdir), texts, FLAGS.top_k, FLAGS.batch_size):
        print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    # Flags are defined only when run as a program, so importing this module defines none.
    flags.DEFINE_string("workdir", None, "A workdir written by train.py.")
    flags.DEFINE_multi_string("text", [], "A text to classify (repeatable).")
    flags.DEFINE_string("input", None, "A file with one text a line, or '-' for standard input.")
    flags.DEFINE_integer("top_k", 0, "Print the k most probable labels (0: all).")
    flags.DEFINE_integer("batch_size", 64, "Texts per forward pass.")
    flags.mark_flag_as_required("workdir")
    app.run(main)
