"""Multi-label metrics against hand-computed values."""

import jax
import numpy as np
import pytest

from jcaps.train.metrics import multilabel_metrics, multilabel_sums

# Three real examples over three labels, and one padding row that predicts everything.
PREDICTED = np.array([[1, 0, 1], [0, 1, 0], [0, 0, 0], [1, 1, 1]], np.float32)
TARGET = np.array([[1, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]], np.float32)
WEIGHT = np.array([1, 1, 1, 0], np.float32)


def metrics_of(predicted, target, weight):
    return multilabel_metrics(jax.device_get(jax.jit(multilabel_sums)(predicted, target, weight)))


def test_metrics_match_hand_computed_values():
    # Per label (TP, FP, FN): (1, 0, 0), (1, 0, 1), (0, 1, 1); in all TP 2, FP 1, FN 2.
    m = metrics_of(PREDICTED, TARGET, WEIGHT)
    assert m["count"] == 3
    assert m["hamming_loss"] == pytest.approx(3 / 9)
    assert m["micro_precision"] == pytest.approx(2 / 3)
    assert m["micro_recall"] == pytest.approx(2 / 4)
    assert m["micro_f1"] == pytest.approx(4 / 7)
    assert m["macro_precision"] == pytest.approx((1 + 1 + 0) / 3)
    assert m["macro_recall"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    # Example F1: 2*1/(2+2), 2*1/(1+1), 0/(0+1).
    assert m["example_f1"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert m["subset_accuracy"] == pytest.approx(1 / 3)
    # Predicted 2 + 1 + 0 labels, true 2 + 1 + 1; the padding row's 3 count for neither.
    assert m["labels_per_example"] == pytest.approx(3 / 3)
    assert m["true_labels_per_example"] == pytest.approx(4 / 3)


def test_sums_add_up_over_batches():
    whole = multilabel_sums(PREDICTED, TARGET, WEIGHT)
    parts = [multilabel_sums(PREDICTED[s], TARGET[s], WEIGHT[s]) for s in (slice(0, 2), slice(2, 4))]
    added = jax.tree.map(lambda a, b: a + b, *parts)
    assert multilabel_metrics(jax.device_get(added)) == multilabel_metrics(jax.device_get(whole))


def test_perfect_and_empty_predictions():
    perfect = metrics_of(TARGET[:3], TARGET[:3], WEIGHT[:3])
    assert perfect["hamming_loss"] == 0.0 and perfect["micro_f1"] == 1.0 and perfect["subset_accuracy"] == 1.0
    # An example with no true and no predicted label counts as right, not as 0/0.
    nothing = metrics_of(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32), np.ones(2, np.float32))
    assert nothing["example_f1"] == 1.0 and nothing["micro_f1"] == 0.0 and not np.isnan(nothing["macro_f1"])


def test_labels_absent_everywhere_are_left_out_of_macro_averages():
    predicted = np.array([[1, 0, 0]], np.float32)
    target = np.array([[1, 0, 0]], np.float32)
    assert metrics_of(predicted, target, np.ones(1, np.float32))["macro_f1"] == 1.0
