"""Turning evaluation sums into metrics, and writing metrics to `metrics.jsonl` and TensorBoard.

Single-label evaluation sums a confusion matrix; multi-label evaluation sums per-label true
positives, false positives and false negatives and per-example F1 (`multilabel_sums`, jit-safe),
from which `multilabel_metrics` gives hamming loss, micro and macro precision / recall / F1,
example-based F1 and subset accuracy (Zhang & Zhou, A Review on Multi-Label Learning
Algorithms, 2014, Sec. 2.2).
"""

from __future__ import annotations

import json
import os

import jax.numpy as jnp
import numpy as np


def classification_metrics(sums: dict) -> dict:
    """`loss`, `accuracy`, `macro_f1`, `micro_f1` from summed loss and a confusion matrix."""
    confusion = np.asarray(sums["confusion"], np.float64)
    count = float(sums["count"])
    true_positive = np.diag(confusion)
    predicted, actual = confusion.sum(axis=0), confusion.sum(axis=1)
    denominator = predicted + actual
    # Classes that are neither present nor predicted are left out of the macro average.
    present = denominator > 0
    f1 = np.divide(2 * true_positive, denominator, out=np.zeros_like(true_positive), where=present)
    accuracy = float(true_positive.sum() / max(count, 1.0))
    return {
        "loss": float(sums["loss_sum"]) / max(count, 1.0),
        "accuracy": accuracy,
        "macro_f1": float(f1[present].mean()) if present.any() else 0.0,
        "micro_f1": accuracy,  # single-label: micro-F1 equals accuracy
        "count": int(round(count)),
    }


def multilabel_sums(predicted, target, weight) -> dict:
    """Sums over a batch for `multilabel_metrics` (vectorised; usable under jit).

    Args:
        predicted: [B, J] predicted label sets as 0/1.
        target: [B, J] true label sets as 0/1.
        weight: [B] 1 for real examples, 0 for padding.

    Returns:
        `true_positive`, `false_positive`, `false_negative` [J] and `example_f1_sum`,
        `exact_match_sum`, `count` scalars, each weighted by `weight`.
    """
    predicted, target = predicted.astype(jnp.float32), target.astype(jnp.float32)
    w = weight[:, None]
    hits = predicted * target
    overlap, sizes = jnp.sum(hits, axis=-1), jnp.sum(predicted, axis=-1) + jnp.sum(target, axis=-1)
    # An example with no true and no predicted label is a perfect answer (F1 1), not 0/0.
    example_f1 = jnp.where(sizes > 0, 2.0 * overlap / jnp.maximum(sizes, 1.0), 1.0)
    exact = jnp.all(predicted == target, axis=-1).astype(jnp.float32)
    return {
        "true_positive": jnp.sum(hits * w, axis=0),
        "false_positive": jnp.sum(predicted * (1.0 - target) * w, axis=0),
        "false_negative": jnp.sum((1.0 - predicted) * target * w, axis=0),
        "example_f1_sum": jnp.sum(example_f1 * weight),
        "exact_match_sum": jnp.sum(exact * weight),
        "count": jnp.sum(weight),
    }


def _ratio(numerator, denominator):
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)


def multilabel_metrics(sums: dict) -> dict:
    """`hamming_loss`, micro / macro `precision`, `recall`, `f1`, `example_f1`, `subset_accuracy`
    (and `loss` when summed) from `multilabel_sums` totals.

    Macro averages run over the labels that occur in the split or are predicted in it (a label
    neither true nor predicted anywhere has no defined F1 and is left out)."""
    tp, fp, fn = (np.asarray(sums[k], np.float64) for k in ("true_positive", "false_positive", "false_negative"))
    count = max(float(sums["count"]), 1.0)
    micro_p = float(_ratio(tp.sum(), tp.sum() + fp.sum()))
    micro_r = float(_ratio(tp.sum(), tp.sum() + fn.sum()))
    per_label_p, per_label_r = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    per_label_f1 = _ratio(2 * tp, 2 * tp + fp + fn)
    present = (tp + fp + fn) > 0
    metrics = {"loss": float(sums["loss_sum"]) / count} if "loss_sum" in sums else {}
    macro = (lambda v: float(v[present].mean())) if present.any() else (lambda v: 0.0)
    metrics.update({
        "hamming_loss": float((fp.sum() + fn.sum()) / (count * len(tp))),
        "micro_f1": float(_ratio(2 * tp.sum(), 2 * tp.sum() + fp.sum() + fn.sum())),
        "micro_precision": micro_p,
        "micro_recall": micro_r,
        "macro_f1": macro(per_label_f1),
        "macro_precision": macro(per_label_p),
        "macro_recall": macro(per_label_r),
        "example_f1": float(sums["example_f1_sum"]) / count,
        "subset_accuracy": float(sums["exact_match_sum"]) / count,
        "count": round(float(sums["count"])),
    })
    return metrics


def evaluation_metrics(sums: dict) -> dict:
    """The metrics of an evaluation's summed outputs, single-label or multi-label."""
    return multilabel_metrics(sums) if "true_positive" in sums else classification_metrics(sums)


class MetricWriter:
    """Appends one JSON object per event to `metrics.jsonl` and mirrors scalars to TensorBoard.

    Only process 0 writes (every process may call it)."""

    def __init__(self, workdir: str, enabled: bool = True):
        self._enabled = enabled
        self._path = os.path.join(workdir, "metrics.jsonl")
        self._tensorboard = None
        if enabled:
            from tensorboardX import SummaryWriter

            self._tensorboard = SummaryWriter(os.path.join(workdir, "tensorboard"))

    def write(self, step: int, split: str, metrics: dict, **extra) -> None:
        if not self._enabled:
            return
        record = {"step": int(step), "split": split, **{k: _plain(v) for k, v in metrics.items()}, **extra}
        with open(self._path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        for name, value in record.items():
            if isinstance(value, float):
                self._tensorboard.add_scalar(f"{split}/{name}", value, step)
        self._tensorboard.flush()

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()


def _plain(value):
    value = np.asarray(value)
    return value.item() if value.ndim == 0 else value.tolist()
