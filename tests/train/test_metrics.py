"""Single-label metrics from a confusion matrix, worked out by hand: validation macro-F1 selects
the emoji model, so its definition (which classes count, how F1 is averaged) is pinned here."""

import numpy as np
import pytest

from jcaps.train.metrics import classification_metrics


def test_metrics_of_a_hand_computed_confusion_matrix():
    # Rows are true classes, columns predicted ones; class 3 is neither present nor predicted.
    confusion = np.array([
        [3, 1, 0, 0],
        [1, 1, 1, 0],
        [1, 0, 2, 0],
        [0, 0, 0, 0],
    ])
    metrics = classification_metrics({"confusion": confusion, "count": 10.0, "loss_sum": 7.5})
    # Correct: 3 + 1 + 2 = 6 of 10.
    # Class 0: predicted 5 times, present 4 times: precision 3/5, recall 3/4,
    #          F1 = 2 (3/5)(3/4) / (3/5 + 3/4) = 0.9 / 1.35 = 2/3.
    # Class 1: predicted 2, present 3: precision 1/2, recall 1/3, F1 = (1/3) / (5/6) = 2/5.
    # Class 2: predicted 3, present 3: precision 2/3, recall 2/3, F1 = 2/3.
    # Class 3: left out of the average (counting its 0/0 as 0 would give 52/120).
    # Macro-F1 = (2/3 + 2/5 + 2/3) / 3 = (20 + 12 + 20) / 90 = 52/90.
    assert metrics == {
        "loss": pytest.approx(0.75),
        "accuracy": pytest.approx(0.6),
        "macro_f1": pytest.approx(52 / 90),
        "micro_f1": pytest.approx(0.6),  # one label an example: every miss is one FP and one FN
        "count": 10,
    }


def test_a_predicted_class_that_is_never_present_counts_in_macro_f1():
    # Class 1 is predicted once but never present: precision 0 / 1, F1 0, and it is averaged in.
    # Class 0: present 2, predicted 1, correct 1: precision 1, recall 1/2, F1 = 2/3.
    metrics = classification_metrics({"confusion": np.array([[1, 1], [0, 0]]), "count": 2.0, "loss_sum": 1.0})
    assert metrics["accuracy"] == pytest.approx(0.5)
    assert metrics["macro_f1"] == pytest.approx((2 / 3 + 0) / 2)


def test_no_examples_give_zeros_not_nan():
    metrics = classification_metrics({"confusion": np.zeros((3, 3)), "count": 0.0, "loss_sum": 0.0})
    assert metrics == {"loss": 0.0, "accuracy": 0.0, "macro_f1": 0.0, "micro_f1": 0.0, "count": 0}


def test_metrics_lines_are_strict_json(tmp_path):
    """A NaN loss is written as null: Python's bare `NaN` token makes a standard parser reject the line."""
    import json

    from jcaps.train.metrics import MetricWriter

    writer = MetricWriter(str(tmp_path))
    writer.write(3, "validation", {"loss": np.float32("nan"), "accuracy": 0.5, "spread": [1.0, float("inf")]})
    writer.close()
    line = (tmp_path / "metrics.jsonl").read_text()
    assert json.loads(line, parse_constant=pytest.fail) == {
        "step": 3, "split": "validation", "loss": None, "accuracy": 0.5, "spread": [1.0, None]}
