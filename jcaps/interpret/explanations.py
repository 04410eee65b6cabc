"""`explain_workdir`: every method's explanations of a trained workdir on a split, written as
`attributions.jsonl`, `faithfulness.json` and `report.html` (see `python -m jcaps.interpret`).

attributions.jsonl, one JSON object per example: `index`, `text` (text models), `tokens` (the
example's words, characters or time steps, one per position), `label` (true class or labels),
`prediction` (predicted classes or labels, in order) and `explanations`: one entry per
explained prediction, `{"target", "probability", "scores": {method: [one score per token]}}`,
with `completeness_error` when integrated gradients ran.

faithfulness.json, with `--faithfulness`: one key per method, random included:
`{"comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc": mean over the explained
predictions, "ci95": {metric: [low, high]} (bootstrap over them), "seconds_per_100": wall time of
the method per 100 explained predictions, "rows": how many}`; integrated gradients adds
`completeness_error` (median and 95th percentile) and every entry the removal used.
"""

from __future__ import annotations

import json
import os

import numpy as np

from jcaps.interpret.explain import Explainer, Options, native_note
from jcaps.interpret.faithfulness import METRICS, bootstrap_interval
from jcaps.viz.html import write_explanation_report

SCORE_DECIMALS = 5


def position_words(trained, split: str, index: int, x_row: np.ndarray) -> list[str | None]:
    """The word (character, time step) at each flattened position of an example; None at
    padding. Words come from the tokenizer, so unknown words keep their spelling."""
    dataset = trained.dataset
    if "series" in trained.family.inputs:
        return [f"t{t}" for t in range(x_row.shape[0])]
    words = dataset.tokenize(dataset.text(split, index))
    if dataset.nested:
        width = x_row.shape[-1]
        flat: list[str | None] = [None] * (x_row.shape[0] * width)
        for m, sentence in enumerate(words[: x_row.shape[0]]):
            for n, word in enumerate(sentence[:width]):
                flat[m * width + n] = word
        return flat
    return [words[p] if p < len(words) else None for p in range(x_row.shape[-1])]


def true_labels(trained, batch: dict, b: int):
    names = trained.dataset.labels.names
    if "labels" in batch:
        return [names[j] for j in np.flatnonzero(batch["labels"][b] > 0)]
    return names[int(batch["label"][b])] if "label" in batch else None


def explain_workdir(
    trained,
    split: str,
    out: str,
    *,
    methods: tuple[str, ...],
    limit: int = 0,
    with_faithfulness: bool = False,
    options: Options = Options(),
    batch_size: int = 32,
    report_examples: int = 12,
    seed: int = 0,
    extra_html: str = "",
) -> dict:
    """Writes the explanations of `trained` (`load_trained(..., with_data=True)`) on `split` to
    `out`; returns the faithfulness summary ({} without `with_faithfulness`)."""
    explainer = Explainer(trained, options, seed=seed)
    os.makedirs(out, exist_ok=True)
    is_text = "tokens" in trained.family.inputs
    per_metric = {method: {metric: [] for metric in METRICS} for method in methods}
    seconds = {method: [] for method in methods}
    completeness: list[np.ndarray] = []
    shown: dict[str, list] = {}
    rows_total = 0
    with open(os.path.join(out, "attributions.jsonl"), "w", encoding="utf-8") as records:
        for batch_number, batch in enumerate(trained.dataset.eval_batches(split, batch_size, limit=limit)):
            explained = explainer.explain(batch, methods, with_faithfulness)
            rows_total += len(explained.example)
            for method, spent in explained.seconds.items():
                seconds[method].append((batch_number, spent, len(explained.example)))
            if explained.completeness_error is not None:
                completeness.append(explained.completeness_error)
            for method, metrics in explained.faithfulness.items():
                for metric in METRICS:
                    per_metric[method][metric].append(metrics[metric])
            inputs = batch["series"] if not is_text else batch["tokens"]
            for b in np.flatnonzero(np.asarray(batch["weight"]) > 0):
                index = int(batch["index"][b])
                words = position_words(trained, split, index, np.asarray(inputs[b]))
                record = {
                    "index": index,
                    "text": trained.dataset.text(split, index) if is_text else None,
                    "tokens": [w for w in words if w is not None],
                    "label": true_labels(trained, batch, b),
                    "prediction": explained.predictions[b],
                    "explanations": [],
                }
                for r in np.flatnonzero(explained.example == b):
                    real = explained.mask[r]
                    entry = {
                        "target": explained.target_name[r],
                        "probability": round(float(explained.probability[r]), 6),
                        "scores": {
                            method: np.round(explained.scores[method][r][real], SCORE_DECIMALS).tolist()
                            for method in methods
                        },
                    }
                    if explained.completeness_error is not None:
                        entry["completeness_error"] = round(float(explained.completeness_error[r]), 6)
                    record["explanations"].append(entry)
                    group = shown.setdefault(entry["target"], [])
                    if len(group) < report_examples:
                        group.append({**entry, "index": index, "tokens": record["tokens"], "label": record["label"],
                                      "prediction": record["prediction"]})
                records.write(json.dumps(record, ensure_ascii=False) + "\n")

    summary = {}
    errors = np.concatenate(completeness) if completeness else np.zeros(0)
    if with_faithfulness:
        for method in methods:
            values = {metric: np.concatenate(per_metric[method][metric]) if per_metric[method][metric]
                      else np.zeros(0) for metric in METRICS}
            summary[method] = {
                **{metric: float(np.mean(v)) if v.size else float("nan") for metric, v in values.items()},
                "ci95": {metric: bootstrap_interval(v, seed=seed) for metric, v in values.items()},
                "seconds_per_100": _per_100(seconds[method], rows_total),
                "rows": int(rows_total),
                "removal": options.removal if is_text else "zeros",
            }
        if errors.size and "integrated_gradients" in summary:
            summary["integrated_gradients"]["completeness_error"] = {
                "median": float(np.median(errors)), "p95": float(np.percentile(errors, 95)),
            }
        with open(os.path.join(out, "faithfulness.json"), "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    write_explanation_report(
        os.path.join(out, "report.html"),
        title=f"{trained.config.model.name} on {split}: explanations",
        methods=methods,
        groups=shown,
        faithfulness=summary,
        completeness=float(np.median(errors)) if errors.size else None,
        joiner="" if is_text and trained.config.data.tokenizer.endswith("chars") else " ",
        extra_html=extra_html,
        note=native_note(trained.config.model),
    )
    return summary


def _per_100(timings: list, rows_total: int) -> float:
    """Seconds per 100 explained predictions; the first batch (which compiles) is left out when
    there are others."""
    steady = [t for t in timings if t[0] > 0] or timings
    rows = sum(t[2] for t in steady)
    return round(100 * sum(t[1] for t in steady) / max(rows, 1), 4)
