"""Files a person can read: `write_html`, the explanation report of any model's attributions;
and the interpretation of a trained iCapsNets workdir over a split.

`write_html(path, tokens, scores_by_method, ...)` writes the page `python -m jcaps.interpret`
writes, from arrays of your own: the methods side by side (tokens coloured by score), the
faithfulness table of `interpret.faithfulness`'s results and the sanity checks of
`checks.sanity_checks`.

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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import jax
import jax.numpy as jnp
import numpy as np

from jcaps import strict_json
from jcaps.errors import UserError
from jcaps.files import replacing
from jcaps.interpret import capsules as capsule_interpretation
from jcaps.interpret.checks import html_table
from jcaps.interpret.erasure import summarise
from jcaps.interpret.explain import native_method
from jcaps.train.workdir import TrainedModel
from jcaps.viz.figures import plot_capsule_heatmap
from jcaps.viz.html import write_explanation_report

if TYPE_CHECKING:
    from jcaps.data.text import TextDataset


def write_html(
    path: str | os.PathLike,
    tokens: Sequence[Sequence[str]],
    scores_by_method: Mapping[str, object],
    *,
    targets: Sequence[str] | None = None,
    probabilities: Sequence[float] | None = None,
    faithfulness: Mapping[str, Mapping[str, object]] | None = None,
    checks: Mapping | None = None,
    title: str = "Explanations",
    joiner: str = " ",
) -> str:
    """Writes the explanation report of B examples: one self-contained HTML file.

    Args:
      path: where to write it.
      tokens: B sequences of strings, one per real position of each example, in order (words,
        or subwords, or `interpret.aggregate`'s words with their summed scores).
      scores_by_method: {method: [B, T] scores} (a method's output; the first len(tokens[b]) of
        row b are shown, so real positions come first).
      targets: B names of the explained outputs (the report groups by them); None: one group.
      probabilities: B probabilities of the explained outputs, shown beside each example.
      faithfulness: {method: `interpret.faithfulness`'s per-example results} (the table on top,
        with the random ranking as the baseline when it is among them); None: not measured.
      checks: `checks.sanity_checks`'s summary (its table under the faithfulness table).
      title: the page title.
      joiner: what stands between tokens ("" for characters).

    Returns:
      `path` as a string.
    """
    methods = tuple(scores_by_method)
    if not methods:
        raise ValueError("scores_by_method: expected at least one method's scores")
    arrays = {method: np.asarray(scores) for method, scores in scores_by_method.items()}
    batch = len(tokens)
    for method, scores in arrays.items():
        if scores.ndim != 2 or scores.shape[0] != batch or scores.shape[1] < max((len(t) for t in tokens), default=0):
            raise ValueError(
                f"scores_by_method[{method!r}]: expected [B, T] with B = {batch} (len(tokens)) and T at least the "
                f"longest token sequence, got shape {scores.shape}"
            )
    for name, values in (("targets", targets), ("probabilities", probabilities)):
        if values is not None and len(values) != batch:
            raise ValueError(f"{name}: expected {batch} values (one an example of tokens), got {len(values)}")
    groups: dict[str, list[dict]] = {}
    for b, row in enumerate(tokens):
        target = "explained" if targets is None else str(targets[b])
        groups.setdefault(target, []).append(
            {
                "index": b,
                "tokens": list(row),
                "label": None,
                "prediction": target,
                "target": target,
                "probability": None if probabilities is None else float(probabilities[b]),
                "scores": {method: scores[b, : len(row)].tolist() for method, scores in arrays.items()},
            }
        )
    table = {method: summarise(values) for method, values in (faithfulness or {}).items()}
    return write_explanation_report(
        path,
        title=title,
        methods=methods,
        groups=groups,
        faithfulness=table,
        joiner=joiner,
        extra_html=html_table(dict(checks)) if checks else "",
    )


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
