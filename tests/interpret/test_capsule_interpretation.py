"""iCapsNets local and global interpretation on hand-built examples with hand-computed answers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.interpret import capsules as interp

# The per-example functions, jitted: eager dispatch of their many small ops is slow.
_SIZES = ("k1", "k2", "kernel_size")
local_interpretation = jax.jit(interp.local_interpretation, static_argnames=_SIZES)
local_interpretation_long = jax.jit(interp.local_interpretation_long, static_argnames=_SIZES)
global_assignment = jax.jit(interp.global_assignment, static_argnames="kernel_size")
global_assignment_long = jax.jit(interp.global_assignment_long, static_argnames="kernel_size")

# Short example: I = 2 capsules, J = 2 classes, N = 6 positions of which the last is PAD, K = 3.
# Class 1 ranks capsule 0 (0.7) before capsule 1 (0.2); class 0 the other way round.
COUPLING = jnp.array([[0.3, 0.7], [0.8, 0.2]])
# The PAD entry is adversarially large: selection must follow the mask, not alpha.
ALPHA = jnp.array([[0.10, 0.05, 0.60, 0.05, 0.20, 0.90], [0.50, 0.10, 0.10, 0.10, 0.20, 0.90]])
MASK = jnp.array([True, True, True, True, True, False])


def _numpy(tree):
    return jax.tree.map(np.asarray, tree)


def test_short_by_hand():
    out = _numpy(local_interpretation(ALPHA, COUPLING, jnp.int32(1), MASK, k1=2, k2=2, kernel_size=3))
    np.testing.assert_array_equal(out["capsules"], [0, 1])
    # Capsule 0: 0.60 at n=2, 0.20 at n=4. Capsule 1: 0.50 at n=0, 0.20 at n=4.
    np.testing.assert_array_equal(out["positions"], [[2, 4], [0, 4]])
    # 3-grams centred on n, clipped to [0, 5): n=4 loses the PAD word, n=0 the word before 0.
    np.testing.assert_array_equal(out["spans"], [[[1, 4], [3, 5]], [[0, 2], [3, 5]]])
    # Spans [1,4), [3,5), [0,2), [3,5): word 3 lies in three of them; PAD in none.
    np.testing.assert_array_equal(out["word_scores"], [1, 2, 1, 3, 2, 0])


def test_short_predicted_class_orders_capsules():
    out = _numpy(local_interpretation(ALPHA, COUPLING, jnp.int32(0), MASK, k1=2, k2=2, kernel_size=3))
    np.testing.assert_array_equal(out["capsules"], [1, 0])
    np.testing.assert_array_equal(out["positions"], [[0, 4], [2, 4]])
    np.testing.assert_array_equal(out["spans"], [[[0, 2], [3, 5]], [[1, 4], [3, 5]]])


def test_wider_kernel_spans():
    out = _numpy(local_interpretation(ALPHA, COUPLING, jnp.int32(1), MASK, k1=1, k2=1, kernel_size=5))
    np.testing.assert_array_equal(out["spans"], [[[0, 5]]])  # n=2 ± 2
    np.testing.assert_array_equal(out["word_scores"], [1, 1, 1, 1, 1, 0])


def test_more_picks_than_valid_candidates_are_marked_missing():
    alpha = jnp.array([[0.3, 0.7, 0.0, 0.0]])
    coupling = jnp.array([[1.0, 0.0], [0.0, 0.0]])  # capsule 1 is padding: zero row
    mask = jnp.array([True, True, False, False])
    # k1 > live capsules, k2 > valid length and even k2 > N.
    out = _numpy(
        local_interpretation(jnp.concatenate([alpha, alpha]), coupling, jnp.int32(0), mask, k1=2, k2=5, kernel_size=3)
    )
    np.testing.assert_array_equal(out["capsules"], [0, -1])
    np.testing.assert_array_equal(out["positions"], [[1, 0, -1, -1, -1], [-1] * 5])
    np.testing.assert_array_equal(out["spans"][0], [[0, 2], [0, 2], [0, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(out["spans"][1], np.zeros((5, 2)))
    np.testing.assert_array_equal(out["word_scores"], [2, 2, 0, 0])


def test_empty_document_selects_nothing():
    out = _numpy(
        local_interpretation(jnp.zeros((2, 4)), COUPLING, jnp.int32(1), jnp.zeros(4, bool), k1=2, k2=2, kernel_size=3)
    )
    np.testing.assert_array_equal(out["positions"], -np.ones((2, 2)))
    np.testing.assert_array_equal(out["spans"], np.zeros((2, 2, 2)))
    np.testing.assert_array_equal(out["word_scores"], np.zeros(4))


def test_even_kernel_is_rejected():
    with pytest.raises(ValueError, match="odd"):
        local_interpretation(ALPHA, COUPLING, jnp.int32(1), MASK, k1=1, k2=1, kernel_size=2)


# Long example: I = 2, M = 3 sentences × N = 4 words, K = 3. Sentence 0 has 4 words,
# sentence 1 has 2, sentence 2 is empty.
LONG_MASK = jnp.array([[True, True, True, True], [True, True, False, False], [False, False, False, False]])
LONG_COUPLING = jnp.array([[0.9, 0.1], [0.4, 0.6]])
# Capsule 1 puts most sentence attention on the empty sentence: it must not be chosen.
LONG_RHO = jnp.array([[0.2, 0.8, 0.0], [0.3, 0.2, 0.5]])
# Capsule 0's strongest word attention (0.9) sits in sentence 0, which its rho does not pick.
LONG_ALPHA = jnp.array(
    [
        [[0.9, 0.1, 0.0, 0.0], [0.3, 0.7, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
        [[0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
    ]
)


def test_long_by_hand():
    out = _numpy(
        local_interpretation_long(
            LONG_ALPHA, LONG_RHO, LONG_COUPLING, jnp.int32(0), LONG_MASK, k1=2, k2=2, kernel_size=3
        )
    )
    np.testing.assert_array_equal(out["capsules"], [0, 1])
    np.testing.assert_array_equal(out["sentences"], [1, 0])
    # Capsule 0 reads sentence 1 (0.7 at n=1, 0.3 at n=0), not its alpha in sentence 0.
    # Capsule 1 reads sentence 0: 0.4 at n=3, 0.3 at n=2.
    np.testing.assert_array_equal(out["positions"], [[1, 0], [3, 2]])
    # Sentence 1 has 2 words, so both 3-grams are [0, 2); sentence 0: [2, 4) and [1, 4).
    np.testing.assert_array_equal(out["spans"], [[[0, 2], [0, 2]], [[2, 4], [1, 4]]])
    np.testing.assert_array_equal(out["word_scores"], [[0, 1, 2, 2], [2, 2, 0, 0], [0, 0, 0, 0]])


def test_short_is_long_with_one_sentence():
    long = local_interpretation_long(
        ALPHA[:, None, :], jnp.ones((2, 1)), COUPLING, jnp.int32(1), MASK[None, :], k1=2, k2=2, kernel_size=3
    )
    short = local_interpretation(ALPHA, COUPLING, jnp.int32(1), MASK, k1=2, k2=2, kernel_size=3)
    np.testing.assert_array_equal(long["sentences"], [0, 0])
    for key in ("capsules", "positions", "spans"):
        np.testing.assert_array_equal(long[key], short[key])
    np.testing.assert_array_equal(long["word_scores"][0], short["word_scores"])


def test_global_assignment_by_hand():
    out = _numpy(global_assignment(COUPLING, jnp.int32(1), ALPHA, MASK, kernel_size=3))
    assert (out["capsule"], out["position"]) == (0, 2)
    np.testing.assert_array_equal(out["span"], [1, 4])
    long = _numpy(global_assignment_long(LONG_COUPLING, jnp.int32(1), LONG_ALPHA, LONG_RHO, LONG_MASK, kernel_size=3))
    # Class 1 prefers capsule 1 (0.6), whose best non-empty sentence is 0, best word 3.
    assert (long["capsule"], long["sentence"], long["position"]) == (1, 0, 3)
    np.testing.assert_array_equal(long["span"], [2, 4])


def _softmax(logits, valid, axis):
    """Softmax over `valid` entries; 0 elsewhere and on all-invalid rows."""
    weights = np.where(valid, np.exp(logits), 0.0)
    total = weights.sum(axis=axis, keepdims=True)
    return np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)


def _random_batch(seed, batch, capsules, classes, sentences, positions):
    """Attention and coupling like the model's, over random trailing-padded masks (numpy: eager
    jax.random ops would dominate the test's run time)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, positions + 1, (batch, sentences))
    mask = np.arange(positions)[None, None, :] < lengths[:, :, None]
    alpha = _softmax(rng.normal(size=(batch, capsules, sentences, positions)), mask[:, None], axis=-1)
    rho = _softmax(rng.normal(size=(batch, capsules, sentences)), mask.any(-1)[:, None], axis=-1)
    coupling = _softmax(rng.normal(size=(batch, capsules, classes)), True, axis=-1)
    predicted = rng.integers(0, classes, batch)
    return (
        jnp.asarray(alpha, jnp.float32),
        jnp.asarray(rho, jnp.float32),
        jnp.asarray(coupling, jnp.float32),
        jnp.asarray(predicted, jnp.int32),
        jnp.asarray(mask),
    )


def test_batched_equals_per_example_and_never_selects_padding():
    alpha, rho, coupling, predicted, mask = _random_batch(0, batch=5, capsules=4, classes=3, sentences=3, positions=7)
    sizes = dict(k1=3, k2=4, kernel_size=3)
    short = _numpy(interp.batched_local_interpretation(alpha[:, :, 0], coupling, predicted, mask[:, 0], **sizes))
    long = _numpy(interp.batched_local_interpretation_long(alpha, rho, coupling, predicted, mask, **sizes))
    for b in range(alpha.shape[0]):
        expected = local_interpretation(alpha[b, :, 0], coupling[b], predicted[b], mask[b, 0], **sizes)
        jax.tree.map(lambda x, y: np.testing.assert_array_equal(x[b], y), short, expected)
        expected = local_interpretation_long(alpha[b], rho[b], coupling[b], predicted[b], mask[b], **sizes)
        jax.tree.map(lambda x, y: np.testing.assert_array_equal(x[b], y), long, expected)

    # The global assignment is the first pick of the local interpretation.
    short_global = _numpy(
        interp.batched_global_assignment(coupling, predicted, alpha[:, :, 0], mask[:, 0], kernel_size=3)
    )
    np.testing.assert_array_equal(short_global["capsule"], short["capsules"][:, 0])
    np.testing.assert_array_equal(short_global["position"], short["positions"][:, 0, 0])
    np.testing.assert_array_equal(short_global["span"], short["spans"][:, 0, 0])
    long_global = _numpy(interp.batched_global_assignment_long(coupling, predicted, alpha, rho, mask, kernel_size=3))
    np.testing.assert_array_equal(long_global["sentence"], long["sentences"][:, 0])
    np.testing.assert_array_equal(long_global["span"], long["spans"][:, 0, 0])

    mask = np.asarray(mask)
    assert np.all(long["word_scores"][~mask] == 0)
    assert long["word_scores"].sum() > 0
    for b, capsule_slot, pick in np.ndindex(long["positions"].shape):
        n, m = long["positions"][b, capsule_slot, pick], long["sentences"][b, capsule_slot]
        start, end = long["spans"][b, capsule_slot, pick]
        if n == -1:
            assert start == end == 0
        else:
            assert mask[b, m, n] and mask[b, m, start:end].all() and start <= n < end


def test_global_accumulator_by_hand():
    acc = interp.GlobalInterpretation(num_classes=2, num_capsules=3)
    acc.update(np.array([0, 0, 1]), np.array([2, 2, 1]), [["good", "film"], ["good", "plot"], ["bad"]])
    # The last example has no live capsule (-1) and is skipped.
    acc.update([0, 1], [0, -1], [["film"], ["ignored"]])
    np.testing.assert_array_equal(acc.C, [[1, 0, 2], [0, 1, 0]])
    assert acc.top_words((0, 2)) == [("good", 2), ("film", 1), ("plot", 1)]
    assert acc.top_words((0, 2), n=1) == [("good", 2)]
    assert acc.top_words((1, 0)) == []
    np.testing.assert_allclose(acc.top_cell_mass(top=1), [2 / 3, 1.0])

    summary = acc.to_json(["neg", "pos"], top=1)
    assert summary["C"] == [[1, 0, 2], [0, 1, 0]]
    assert summary["class_names"] == ["neg", "pos"]
    assert summary["cells"] == [
        {"class": "neg", "capsule": 0, "count": 1, "top_words": [["film", 1]]},
        {"class": "neg", "capsule": 2, "count": 2, "top_words": [["good", 2], ["film", 1], ["plot", 1]]},
        {"class": "pos", "capsule": 1, "count": 1, "top_words": [["bad", 1]]},
    ]
    assert summary["sparsity"] == {"top": 1, "per_class": {"neg": 2 / 3, "pos": 1.0}, "overall": 0.75}
    assert summary["most_selected"] == {"neg": 2, "pos": 1}
    assert summary["shared_capsules"] == []


def test_shared_capsules_flag_classes_with_the_same_most_selected_capsule():
    """Three of four classes put nearly all their examples in capsule 5: a top-cell share of
    about 1 for every class, and the flag names the capsule and the classes that share it."""
    acc = interp.GlobalInterpretation(num_classes=4, num_capsules=6)
    predicted = [0] * 10 + [1] * 10 + [2] * 10 + [3] * 10
    capsules = [5] * 9 + [0] + [5] * 10 + [2] * 10 + [5] * 8 + [1] * 2
    acc.update(predicted, capsules, [[] for _ in predicted])
    assert acc.most_selected(["w", "s", "b", "t"]) == {"w": 5, "s": 5, "b": 2, "t": 5}
    assert acc.shared_capsules(["w", "s", "b", "t"]) == [{"capsule": 5, "classes": ["w", "s", "t"]}]
    # A class never predicted has no most-selected capsule.
    empty = interp.GlobalInterpretation(num_classes=2, num_capsules=2)
    empty.update([1, 1], [0, 0], [[], []])
    assert empty.most_selected(["a", "b"]) == {"b": 0}
    assert empty.shared_capsules(["a", "b"]) == []


def test_global_accumulator_unpredicted_class_and_mismatched_batch():
    acc = interp.GlobalInterpretation(num_classes=2, num_capsules=2)
    acc.update([1], [0], [["x"]])
    assert acc.sparsity(["a", "b"])["per_class"] == {"a": None, "b": 1.0}
    with pytest.raises(ValueError, match="batch sizes"):
        acc.update([0, 1], [0], [["x"]])
    with pytest.raises(ValueError, match="class names"):
        acc.to_json(["only one"])


def test_global_pipeline_from_batched_assignment():
    """Batched assignment → host-side words of the top K-gram → accumulator."""
    tokens = [["a", "good", "film", "indeed", "yes", "<pad>"], ["<b>", "bad", "plot", "<pad>", "<pad>", "<pad>"]]
    alpha = jnp.stack([ALPHA, jnp.array([[0.1, 0.8, 0.1, 0, 0, 0], [0.1, 0.1, 0.8, 0, 0, 0]])])
    mask = jnp.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], bool)
    coupling = jnp.stack([COUPLING, jnp.array([[0.5, 0.5], [0.1, 0.9]])])
    predicted = jnp.array([1, 1])
    out = _numpy(interp.batched_global_assignment(coupling, predicted, alpha, mask, kernel_size=3))
    acc = interp.GlobalInterpretation(num_classes=2, num_capsules=2)
    acc.update(predicted, out["capsule"], [words[start:end] for words, (start, end) in zip(tokens, out["span"])])
    np.testing.assert_array_equal(acc.C, [[0, 0], [1, 1]])
    assert acc.top_words((1, 0)) == [("film", 1), ("good", 1), ("indeed", 1)]
    assert acc.top_words((1, 1)) == [("bad", 1), ("plot", 1)]


def test_class_capsule_information_by_hand():
    # One capsule selected for every class: the top-3 share is 1 and the capsule says nothing.
    degenerate = np.array([[0, 30, 0], [0, 10, 0]])
    assert interp.class_capsule_information(degenerate) == {
        "mutual_information": 0.0,
        "class_entropy": pytest.approx(-(0.75 * np.log(0.75) + 0.25 * np.log(0.25))),
        "normalized": 0.0,
    }
    # Each capsule selected for one class only: the capsule names the class.
    aligned = np.array([[5, 0, 3], [0, 4, 0]])
    assert interp.class_capsule_information(aligned)["normalized"] == pytest.approx(1.0)
    # By hand: p(j, i) = [[1/4, 1/4], [0, 1/2]], p(j) = [1/2, 1/2], p(i) = [1/4, 3/4].
    mixed = np.array([[1, 1], [0, 2]])
    mi = 0.25 * np.log(0.25 / (0.5 * 0.25)) + 0.25 * np.log(0.25 / (0.5 * 0.75)) + 0.5 * np.log(0.5 / (0.5 * 0.75))
    info = interp.class_capsule_information(mixed)
    assert info["mutual_information"] == pytest.approx(mi)
    assert info["class_entropy"] == pytest.approx(np.log(2))
    assert info["normalized"] == pytest.approx(mi / np.log(2))
    # Undefined: nothing counted, or a single class predicted (H(class) = 0).
    assert interp.class_capsule_information(np.zeros((2, 3))) == dict.fromkeys(
        ("mutual_information", "class_entropy", "normalized")
    )
    assert interp.class_capsule_information(np.array([[2, 1], [0, 0]]))["normalized"] is None


def test_global_accumulator_reports_class_capsule_information():
    acc = interp.GlobalInterpretation(num_classes=2, num_capsules=2)
    acc.update([0, 0, 1, 1], [1, 1, 1, 1], [[], [], [], []])
    assert acc.class_capsule_information()["normalized"] == 0.0
    assert acc.to_json(["a", "b"])["class_capsule_information"]["normalized"] == 0.0
    acc.update([0, 1], [0, 0], [[], []])
    assert acc.to_json(["a", "b"])["class_capsule_information"] == interp.class_capsule_information([[1, 2], [1, 2]])


def test_is_punctuation():
    for word in ("(", ")", ",", "-", "...", "'", '"', "%", "&", "#", "«", "—"):
        assert interp.is_punctuation(word), word
    for word in ("ap", "$", "+", "3", "u.s", "'s", "", "<unk>"):
        assert not interp.is_punctuation(word), word


def test_top_words_leave_out_punctuation_unless_kept():
    kgrams = [["(", "ap", ")"], ["ap", "-", "nasa"], [",", "(", "nasa"]]
    dropped = interp.GlobalInterpretation(num_classes=1, num_capsules=1, keep_punctuation=False)
    kept = interp.GlobalInterpretation(num_classes=1, num_capsules=1)
    for acc in (dropped, kept):
        acc.update([0, 0, 0], [0, 0, 0], kgrams)
    assert dropped.top_words((0, 0)) == [("ap", 2), ("nasa", 2)]
    assert dropped.to_json(["x"])["cells"][0]["top_words"] == [["ap", 2], ["nasa", 2]]
    assert kept.top_words((0, 0)) == [("(", 2), ("ap", 2), ("nasa", 2), (")", 1), (",", 1), ("-", 1)]
    assert kept.top_words((0, 0), n=2) == [("(", 2), ("ap", 2)]
