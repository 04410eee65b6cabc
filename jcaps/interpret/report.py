"""Files a person can read: the interpretation of a trained iCapsNets workdir over a split, and
`write_html` (`jcaps.attribution.report`'s, named here too), the explanation report of any
model's attributions.

`interpret_workdir` runs one jit-compiled function per batch — forward pass, probabilities and
the vmapped local interpretation (`jcaps.interpret.capsules`) — and writes to OUT:
  - `local.jsonl`: per example: text, tokens, label, prediction, probabilities, the selected
    capsules, their K-grams and the per-word scores;
  - `global.json`: the class × capsule frequency matrix C and the top words of each cell;
  - `C.png`: the heatmap of C with class and capsule labels (`report.html`, written by
    `jcaps.interpret.explain`, shows it with C's cells beside every method's explanations).
The global assignment of an example is its local interpretation's first capsule and first
position (top-1 by coupling, then top-1 by attention), so it is not computed twice.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, cast

import jax
import jax.numpy as jnp
import numpy as np

from jcaps import strict_json
from jcaps.attribution.report import write_html
from jcaps.errors import UserError
from jcaps.files import replacing
from jcaps.interpret import capsules as capsule_interpretation
from jcaps.interpret.explain import native_method
from jcaps.train.workdir import TrainedModel
from jcaps.viz.figures import plot_capsule_heatmap

__all__ = ["interpret_workdir", "write_html"]

if TYPE_CHECKING:
    from jcaps.data.text import TextDataset


def _text_dataset(trained: TrainedModel) -> TextDataset:
    """The dataset of an iCapsNets workdir, which reads text."""
    return cast("TextDataset", trained.dataset)


def _interpretation_fn(trained: TrainedModel, k1: int, k2: int):
    """batch tokens → predictions, probabilities and the local interpretation (jitted)."""
    kernel_size = trained.config.model.kernel_size

    @jax.jit
    def interpret(tokens):
        outputs = trained.apply(tokens)
        probabilities = trained.family.probabilities(outputs)
        predicted = jnp.argmax(outputs.scores, axis=-1)
        local = capsule_interpretation.batched_local_interpretation_of(
            outputs, predicted, tokens > 0, k1=k1, k2=k2, kernel_size=kernel_size
        )
        return {"predicted": predicted, "probabilities": probabilities, **local}

    return interpret


def example_record(trained: TrainedModel, text: str, tokens: np.ndarray, label, result: dict) -> dict:
    """One example's local interpretation in words (sentences flattened for Long)."""
    dataset = _text_dataset(trained)
    vocab, names = dataset.vocab, dataset.labels.names
    rows = tokens if dataset.nested else tokens[None]
    sentences = [vocab.decode(row[row > 0]) for row in rows]
    scores = result["word_scores"] if dataset.nested else result["word_scores"][None]
    picked_sentences = result["sentences"] if dataset.nested else np.zeros_like(result["capsules"])
    # Two selected capsules may attend to the same position: list each K-gram once, in order.
    places = dict.fromkeys(
        (int(sentence), int(start), int(end))
        for capsule, sentence, spans in zip(result["capsules"], picked_sentences, result["spans"])
        if capsule >= 0
        for start, end in spans
        if end > start
    )
    kgrams = [sentences[sentence][start:end] for sentence, start, end in places]
    return {
        "text": text,
        "words": [w for s in sentences for w in s],
        "word_scores": [int(scores[m, n]) for m, s in enumerate(sentences) for n in range(len(s))],
        "label": names[int(label)] if label is not None else None,
        "prediction": names[int(result["predicted"])],
        "probabilities": {name: round(float(p), 6) for name, p in zip(names, result["probabilities"])},
        "capsules": [int(c) for c in result["capsules"] if c >= 0],
        "kgrams": kgrams,
    }


def interpret_workdir(
    trained: TrainedModel,
    split: str,
    out: str,
    limit: int = 0,
    k1: int = 3,
    k2: int = 2,
    keep_punctuation: bool = False,
) -> dict:
    """Writes the three interpretation files of a trained iCapsNets model (`load_trained(...,
    with_data=True)`) on `split` to `out`; returns the global summary. `keep_punctuation`: list
    punctuation-only tokens among the most frequent words of each cell."""
    if native_method(trained.config.model) != "capsules":
        raise UserError(f"interpretation needs an iCapsNets workdir, not {trained.config.model.name!r}")
    if split not in trained.dataset.splits:
        raise UserError(f"--split: no split {split!r}; the dataset has {', '.join(trained.dataset.splits)}")
    os.makedirs(out, exist_ok=True)
    names = trained.dataset.labels.names
    interpret = _interpretation_fn(trained, k1, k2)
    accumulator = capsule_interpretation.GlobalInterpretation(
        len(names), trained.config.model.num_capsules, keep_punctuation=keep_punctuation
    )
    batch_size = trained.config.train.eval_batch_size or trained.config.train.batch_size
    with replacing(os.path.join(out, "local.jsonl")) as local_file:
        for batch in trained.dataset.eval_batches(split, batch_size, limit=limit):
            results = jax.device_get(interpret(batch["tokens"]))
            predicted, i_star, top_kgrams = [], [], []
            for b in np.flatnonzero(batch["weight"] > 0):
                result = {k: v[b] for k, v in results.items()}
                index = int(batch["index"][b])
                record = example_record(
                    trained,
                    _text_dataset(trained).text(split, index),
                    batch["tokens"][b],
                    batch.get("label", [None] * len(batch["weight"]))[b],
                    result,
                )
                local_file.write(strict_json.dumps({"index": index, **record}, ensure_ascii=False) + "\n")
                predicted.append(int(result["predicted"]))
                i_star.append(int(result["capsules"][0]))
                top_kgrams.append(record["kgrams"][0] if record["kgrams"] else [])
            accumulator.update(predicted, i_star, top_kgrams)
    summary = accumulator.to_json(list(names))
    with replacing(os.path.join(out, "global.json")) as f:
        strict_json.dump(summary, f, indent=1, ensure_ascii=False)
    heatmap = os.path.join(out, "C.png")
    plot_capsule_heatmap(
        accumulator.C, list(names), heatmap, title=f"C on {split}: predicted class × most-coupled capsule"
    )
    return summary
