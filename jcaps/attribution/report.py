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
    targets: Sequence[str] | None = None,
    probabilities: Sequence[float] | None = None,
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
    shown = {
        method: [scores[b, : len(row)].tolist() for b, row in enumerate(tokens)] for method, scores in arrays.items()
    }
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
