"""Where a label-sequence model's mistakes fall: the analysis behind the SGM decoding study
(`studies/sgm_sequences/sgm_sequences.py`), on generated id sequences and true label sets."""

from __future__ import annotations

import numpy as np


def label_sequence_errors(sequences: np.ndarray, targets: np.ndarray, num_special: int, eos_id: int) -> dict:
    """How a label-sequence model's mistakes follow one another and where it stops: the analysis
    of whether one wrong label derails those generated after it (SGM's global embedding is meant
    to keep it from doing so), and of whether a model under-generates by stopping early.

    Args:
        sequences: [N, S] generated ids: labels (label j as `num_special + j`), then `eos_id`
            (absent when the sequence ran out of steps), then padding.
        targets: [N, J] the true label sets as 0/1.
        num_special: ids below it are special (padding, BOS, EOS, ...).
        eos_id: the end-of-sequence id.

    Returns:
        `position_count` / `position_wrong` [S]: labels generated at each position (1-based
        position t at index t - 1) and how many of them are not true labels;
        `after_correct_count` / `after_correct_wrong` [S]: per position, the labels whose earlier
        labels were all true, and how many of them are wrong (0 at the first position, which
        has no earlier label); `after_wrong_count` / `after_wrong_wrong` [S]: the same after at
        least one wrong label;
        `stopped_with_labels_left`: examples whose generated labels were all true, that ended
        with EOS while true labels remained; `missed_by_stopping`: those remaining true labels,
        `missed`: every true label never generated.
    """
    sequences, targets = np.asarray(sequences), np.asarray(targets) > 0
    n, steps = sequences.shape
    is_eos = sequences == eos_id
    # A position holds a label when no EOS came at or before it and it is not special.
    before_eos = np.cumsum(is_eos, axis=1) == 0
    is_label = before_eos & (sequences >= num_special)
    label_index = np.clip(sequences - num_special, 0, targets.shape[1] - 1)
    wrong = is_label & ~np.take_along_axis(targets, label_index, axis=1)
    # Wrong labels strictly before each position.
    wrong_before = np.cumsum(wrong, axis=1) - wrong
    later = is_label & (np.arange(steps) >= 1)
    after_correct, after_wrong = later & (wrong_before == 0), later & (wrong_before > 0)
    generated = np.zeros_like(targets)
    rows = np.repeat(np.arange(n), steps)
    generated[rows[is_label.ravel()], label_index.ravel()[is_label.ravel()]] = True
    left = (targets & ~generated).sum(axis=1)
    all_correct = wrong.sum(axis=1) == 0
    stopped = all_correct & is_eos.any(axis=1) & (left > 0)
    return {
        "position_count": is_label.sum(axis=0),
        "position_wrong": wrong.sum(axis=0),
        "after_correct_count": after_correct.sum(axis=0),
        "after_correct_wrong": (wrong & after_correct).sum(axis=0),
        "after_wrong_count": after_wrong.sum(axis=0),
        "after_wrong_wrong": (wrong & after_wrong).sum(axis=0),
        "stopped_with_labels_left": int(stopped.sum()),
        "missed_by_stopping": int(left[stopped].sum()),
        "missed": int(left.sum()),
        "count": n,
    }
