"""Turning evaluation sums into metrics, and writing metrics to `metrics.jsonl` and TensorBoard."""

from __future__ import annotations

import json
import os

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
