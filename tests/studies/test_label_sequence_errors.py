"""`label_sequence_errors` against counts worked out by hand."""

import numpy as np

from studies.sgm_sequences.errors import label_sequence_errors

EOS, PAD, SPECIAL = 3, 0, 4  # labels a, b, c, d are ids 4, 5, 6, 7


def ids(*labels: str) -> list[int]:
    return [SPECIAL + "abcd".index(label) for label in labels]


def test_counts_match_hand_worked_sequences():
    sequences = np.array([
        ids("a", "b") + [EOS, PAD],       # true {a, b, c}: all right, stops with c left
        ids("c", "a", "d") + [EOS],       # true {a, b}: c wrong, then a right, d wrong
        ids("a", "b", "c", "d"),          # true {a, b, c, d}: no EOS, all right
        [EOS, PAD, PAD, PAD],             # true {d}: nothing generated
    ])
    targets = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 1]])
    errors = label_sequence_errors(sequences, targets, SPECIAL, EOS)
    np.testing.assert_array_equal(errors["position_count"], [3, 3, 2, 1])
    np.testing.assert_array_equal(errors["position_wrong"], [1, 0, 1, 0])
    # After an all-true prefix: b (row 0) and b (row 2) at position 2, c and d (row 2) at 3 and 4.
    np.testing.assert_array_equal(errors["after_correct_count"], [0, 2, 1, 1])
    np.testing.assert_array_equal(errors["after_correct_wrong"], [0, 0, 0, 0])
    # After a wrong label: a (position 2) and d (position 3) of row 1; d is wrong.
    np.testing.assert_array_equal(errors["after_wrong_count"], [0, 1, 1, 0])
    np.testing.assert_array_equal(errors["after_wrong_wrong"], [0, 0, 1, 0])
    # Rows 0 and 3 stopped with every generated label true and true labels left (c; d).
    assert errors["stopped_with_labels_left"] == 2 and errors["missed_by_stopping"] == 2
    assert errors["missed"] == 1 + 1 + 0 + 1 and errors["count"] == 4


def test_labels_after_the_first_eos_are_not_counted():
    sequences = np.array([[EOS] + ids("a", "b")])
    errors = label_sequence_errors(sequences, np.array([[0, 0, 1, 0]]), SPECIAL, EOS)
    assert errors["position_count"].sum() == 0 and errors["missed"] == 1
