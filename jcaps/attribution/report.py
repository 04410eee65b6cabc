"""`write_html(path, tokens, scores_by_method, ...)`: the page `python -m jcaps.interpret` writes,
from arrays of your own: the methods side by side (tokens coloured by score), the faithfulness
table of `faithfulness`'s results and the sanity checks of `checks.sanity_checks`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from jcaps.attribution._faithfulness import summarise
from jcaps.attribution.checks import degenerate_shares, html_table
from jcaps.viz.html import write_explanation_report


def write_html(
    path: str | os.PathLike,
    tokens: Sequence[Sequence[str]],
    scores_by_method: Mapping[str, object],
    *,
    targets: Sequence[str] | Sequence[Sequence[str]] | None = None,
    probabilities: Sequence[float] | Sequence[Sequence[float]] | None = None,
    labels: Sequence[str | Sequence[str] | None] | None = None,
    faithfulness: Mapping[str, Mapping[str, object]] | None = None,
    checks: Mapping | None = None,
    title: str = "Explanations",
    joiner: str = " ",
) -> str:
    """Writes the explanation report of B examples: one self-contained HTML file. A method that
    gives every token of an example the same score is flagged as degenerate.

    Args:
      path: where to write it.
      tokens: B sequences of strings, one per real position of each example, in order (words,
        or subwords, or `interpret.aggregate`'s words with their summed scores).
      scores_by_method: {method: [B, T] scores} (a method's output; the first len(tokens[b]) of
        row b are shown, so real positions come first), or [B, K, T] for K outputs explained an
        example (each shown in its output's group).
      targets: B names of the explained outputs (the report groups by them), or B sequences of
        K names for [B, K, T] scores; None: one group ("output k" for K outputs).
      probabilities: B probabilities of the explained outputs (B sequences of K for K outputs),
        shown beside each example.
      labels: B true labels (a class name, a sequence of label names, or None for an example
        without one), shown beside each example; None: the examples are unlabelled.
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
    longest = max((len(t) for t in tokens), default=0)
    ndim = next(iter(arrays.values())).ndim
    for method, scores in arrays.items():
        if scores.ndim not in (2, 3) or scores.ndim != ndim or scores.shape[0] != batch or scores.shape[-1] < longest:
            raise ValueError(
                f"scores_by_method[{method!r}]: expected [B, T] with B = {batch} (len(tokens)) and T at least the "
                f"longest token sequence (or [B, K, T], as every method's), got shape {scores.shape}"
            )
    outputs = 1 if ndim == 2 else next(iter(arrays.values())).shape[1]
    if any(scores.shape[:-1] != next(iter(arrays.values())).shape[:-1] for scores in arrays.values()):
        raise ValueError("scores_by_method: expected every method's scores for the same outputs ([B, K, T] alike)")
    by_output = {method: scores[:, None] if ndim == 2 else scores for method, scores in arrays.items()}
    if labels is not None and len(labels) != batch:
        raise ValueError(f"labels: expected {batch} values (one an example of tokens), got {len(labels)}")
    names = _per_output("targets", targets, batch, outputs, several=ndim == 3)
    chances = _per_output("probabilities", probabilities, batch, outputs, several=ndim == 3)
    groups: dict[str, list[dict]] = {}
    shown: dict[str, list[list[float]]] = {method: [] for method in arrays}
    for b, row in enumerate(tokens):
        label = None if labels is None else labels[b]
        for k in range(outputs):
            if names is None:
                target = "explained" if ndim == 2 else f"output {k}"
            else:
                target = str(names[b][k])
            probability = None if chances is None else float(chances[b][k])
            scores_shown = {method: scores[b, k, : len(row)].tolist() for method, scores in by_output.items()}
            for method, values in scores_shown.items():
                shown[method].append(values)
            groups.setdefault(target, []).append(
                {
                    "index": b,
                    "tokens": list(row),
                    "label": label if label is None or isinstance(label, str) else list(label),
                    "prediction": target,
                    "target": target,
                    "probability": probability,
                    "scores": scores_shown,
                }
            )
    table = {method: summarise(values) for method, values in (faithfulness or {}).items()}
    return write_explanation_report(
        path,
        title=title,
        methods=methods,
        groups=groups,
        faithfulness=table,
        degenerate=degenerate_shares(shown),
        joiner=joiner,
        extra_html=html_table(dict(checks)) if checks else "",
    )


def _per_output(name: str, values, batch: int, outputs: int, *, several: bool) -> list[list] | None:
    """`values` (B of them, or B sequences of K for K outputs an example) as B lists of K."""
    if values is None:
        return None
    if len(values) != batch:
        raise ValueError(f"{name}: expected {batch} values (one an example of tokens), got {len(values)}")
    rows = [list(value) if several else [value] for value in values]
    if any(len(row) != outputs for row in rows):
        raise ValueError(f"{name}: expected {batch} sequences of {outputs} (one an explained output), as the scores")
    return rows
