"""Turning evaluation sums into metrics, and writing metrics to `metrics.jsonl` and TensorBoard.

Single-label evaluation sums a confusion matrix; multi-label evaluation sums per-label true
positives, false positives and false negatives and per-example F1 (`multilabel_sums`, jit-safe),
from which `multilabel_metrics` gives hamming loss, micro and macro precision / recall / F1,
example-based F1 and subset accuracy (Zhang & Zhou, A Review on Multi-Label Learning
Algorithms, 2014, Sec. 2.2).

`metrics.jsonl` holds one JSON object a line: `{"step", "split", <metrics>}`, with `"final":
true` (and `"selected_step"` when model selection chose an earlier step) on the final
evaluation's lines. A resumed run first drops what the interrupted run wrote after its last
checkpoint (`rewind_metrics`), so each (step, split) appears once.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback

import jax.numpy as jnp
import numpy as np

from jcaps import strict_json
from jcaps.errors import writing
from jcaps.files import no_follow, refuse_linked_folder, replacing


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
        "count": round(count),
    }


def multilabel_sums(predicted, target, weight) -> dict:
    """Sums over a batch for `multilabel_metrics` (vectorised; usable under jit).

    Args:
        predicted: [B, J] predicted label sets as 0/1.
        target: [B, J] true label sets as 0/1.
        weight: [B] 1 for real examples, 0 for padding.

    Returns:
        `true_positive`, `false_positive`, `false_negative` [J] and `example_f1_sum`,
        `exact_match_sum`, `predicted_labels_sum`, `count` scalars, each weighted by `weight`.
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
        "predicted_labels_sum": jnp.sum(jnp.sum(predicted, axis=-1) * weight),
        "count": jnp.sum(weight),
    }


def _ratio(numerator, denominator):
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)


def multilabel_metrics(sums: dict) -> dict:
    """`hamming_loss`, micro / macro `precision`, `recall`, `f1`, `example_f1`, `subset_accuracy`,
    the mean number of labels predicted and true per example (`labels_per_example`,
    `true_labels_per_example`), and `loss` when summed, from `multilabel_sums` totals.

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
    metrics.update(
        {
            "hamming_loss": float((fp.sum() + fn.sum()) / (count * len(tp))),
            "micro_f1": float(_ratio(2 * tp.sum(), 2 * tp.sum() + fp.sum() + fn.sum())),
            "micro_precision": micro_p,
            "micro_recall": micro_r,
            "macro_f1": macro(per_label_f1),
            "macro_precision": macro(per_label_p),
            "macro_recall": macro(per_label_r),
            "example_f1": float(sums["example_f1_sum"]) / count,
            "subset_accuracy": float(sums["exact_match_sum"]) / count,
            "labels_per_example": float(sums["predicted_labels_sum"]) / count,
            "true_labels_per_example": float(tp.sum() + fn.sum()) / count,
            "count": round(float(sums["count"])),
        }
    )
    return metrics


def evaluation_metrics(sums: dict) -> dict:
    """The metrics of an evaluation's summed outputs, single-label or multi-label."""
    return multilabel_metrics(sums) if "true_positive" in sums else classification_metrics(sums)


METRICS_FILE = "metrics.jsonl"


def read_metrics(workdir: str) -> list[dict]:
    """The records of WORKDIR/metrics.jsonl ([] when there is none). A line cut short by a killed
    run (not valid JSON), or otherwise damaged, is left out."""
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.isfile(path):
        return []
    records = []
    with open(path, "rb") as f:
        for line in f:
            try:
                record = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):  # a damaged line is left out as a cut-short one
                continue
            if isinstance(record, dict) and "step" in record:
                records.append(record)
    return records


def final_records(records: list[dict], step: int) -> dict[str, dict]:
    """`{split: record}` of the `"final": true` lines written at `step`."""
    return {r["split"]: r for r in records if r.get("final") and r["step"] == step}


def rewind_metrics(workdir: str, step: int, keep_final: bool = False) -> int:
    """Makes WORKDIR/metrics.jsonl the log of a run about to continue from `step`: drops the
    lines of later steps (written after the checkpoint of `step` by an interrupted run), cut-short
    lines, and, unless `keep_final`, the final evaluation's lines (evaluated again at the end).
    Rewrites the file atomically, and only when a line goes; returns how many went."""
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.isfile(path):
        return 0
    with open(path, "rb") as f:
        lines = f.readlines()
    kept = []
    for raw in lines:
        try:
            line = raw.decode("utf-8")
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(record, dict) or record.get("step", step + 1) > step:
            continue
        if record.get("final") and not keep_final:
            continue
        kept.append(line if line.endswith("\n") else line + "\n")
    dropped = len(lines) - len(kept)
    if dropped or (lines and not lines[-1].endswith(b"\n")):
        with writing("the metrics", path), replacing(path) as f:
            f.writelines(kept)
    return dropped


def _from_tensorboardx(error_traceback) -> bool:
    """Whether an exception was raised inside tensorboardX's code."""
    tensorboardx = f"{os.sep}tensorboardX{os.sep}"
    return any(tensorboardx in frame.filename for frame in traceback.extract_tb(error_traceback))


def _quiet_tensorboardx_leftovers() -> None:
    """tensorboardX flushes its events once more at exit (an atexit callback) and from a thread of
    its own; after a write that failed (a full disk), which jcaps reports in one line, both fail
    again on the same disk, with tracebacks that say nothing more. Exceptions raised in its code
    there are dropped (idempotent); every other one is printed as before."""
    previous_unraisable, previous_thread = sys.unraisablehook, threading.excepthook
    if getattr(previous_unraisable, "drops_tensorboardx", False):
        return

    def unraisable(report) -> None:
        if not _from_tensorboardx(report.exc_traceback):
            previous_unraisable(report)

    def thread(report) -> None:
        if not _from_tensorboardx(report.exc_traceback):
            previous_thread(report)

    setattr(unraisable, "drops_tensorboardx", True)  # noqa: B010 (a function's attribute, which mypy refuses)
    sys.unraisablehook, threading.excepthook = unraisable, thread


class MetricWriter:
    """Appends one JSON object per event to `metrics.jsonl` and mirrors scalars to TensorBoard.

    Only process 0 writes (every process may call it). `resumed_from`: the step a resumed run
    continues from; TensorBoard then discards the interrupted run's later events."""

    def __init__(self, workdir: str, enabled: bool = True, resumed_from: int | None = None):
        self._enabled = enabled
        self._path = os.path.join(workdir, METRICS_FILE)
        self._tensorboard_path = os.path.join(workdir, "tensorboard")
        self._tensorboard = None
        if enabled:
            from tensorboardX import SummaryWriter

            purge_step = None if resumed_from is None else resumed_from + 1
            refuse_linked_folder(self._tensorboard_path)
            _quiet_tensorboardx_leftovers()
            with writing("the TensorBoard events in", self._tensorboard_path):
                self._tensorboard = SummaryWriter(self._tensorboard_path, purge_step=purge_step)

    def write(self, step: int, split: str, metrics: dict, **extra) -> None:
        if not self._enabled:
            return
        record = {"step": int(step), "split": split, **{k: _plain(v) for k, v in metrics.items()}, **extra}
        with writing("the metrics", self._path), open(self._path, "a", encoding="utf-8", opener=no_follow) as f:
            f.write(strict_json.dumps(record) + "\n")
        tensorboard = self._tensorboard
        assert tensorboard is not None  # opened in __init__ when enabled
        with writing("the TensorBoard events in", self._tensorboard_path):
            for name, value in record.items():
                if isinstance(value, float):
                    tensorboard.add_scalar(f"{split}/{name}", value, step)
            tensorboard.flush()

    def close(self) -> None:
        if self._tensorboard is not None:
            with writing("the TensorBoard events in", self._tensorboard_path):
                self._tensorboard.close()


def _plain(value):
    """A metric as plain Python: a number, or nested lists (`tolist` of a 0-d array is its item)."""
    return np.asarray(value).tolist()
