"""`attribution.attribute` and its `Explanation`: what each method's result carries, slicing, the
saved file read back equal, jit, the notebook view and SHAP's object."""

import html

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps import attribution
from jcaps.attribution import _kernels

B, T, D = 4, 5, 3
rng = np.random.default_rng(0)
W = rng.normal(size=(D, 3)).astype(np.float32)
X = rng.normal(size=(B, T, D)).astype(np.float32)
MASK = np.arange(T)[None] < np.array([5, 4, 3, 2])[:, None]
TARGET = np.array([0, 1, 2, 1])
TOKENS = [["the", "<b>cat</b>", "sat", "on", "mats"][: int(n)] for n in MASK.sum(1)]


def f(x):
    total = x.sum(axis=1) @ W
    return jnp.tanh(total) * total


def equal(a, b) -> bool:
    """Two explanations hold the same arrays (keys by their data) and the same static fields."""
    if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):
        return False

    def data(leaf):
        return np.asarray(jax.random.key_data(leaf) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf)

    return all(np.array_equal(data(u), data(v)) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("method", list(attribution.METHODS))
def test_every_method_returns_its_scores_with_what_they_depend_on(method):
    explanation = attribution.attribute(f, X, TARGET, method=method, mask=MASK, key=jax.random.key(0))
    options = {"key": jax.random.key(0)} if attribution.METHODS[method].needs_key else {}
    np.testing.assert_array_equal(explanation.scores,
                                  attribution.METHODS[method].function(f, X, TARGET, mask=MASK, **options))
    np.testing.assert_array_equal(explanation.target, TARGET)
    np.testing.assert_array_equal(explanation.mask, MASK)
    np.testing.assert_allclose(explanation.output, np.asarray(f(jnp.asarray(X)))[np.arange(B), TARGET], rtol=1e-6)
    entry = attribution.METHODS[method]
    assert (explanation.baseline_output is None) == (not entry.uses_baseline)
    assert (explanation.completeness_error is None) == (not (entry.completeness or entry.efficiency))
    if explanation.completeness_error is not None:
        at_zero = np.asarray(f(jnp.where(MASK[..., None], 0.0, X)))[np.arange(B), TARGET]
        np.testing.assert_allclose(explanation.baseline_output, at_zero, rtol=1e-6)
        expected = _kernels.completeness_error(f, jnp.asarray(X), TARGET, explanation.scores,
                                               baseline=jnp.where(MASK[..., None], 0.0, X))
        np.testing.assert_allclose(explanation.completeness_error, expected, rtol=1e-4, atol=1e-7)
        assert float(np.max(explanation.completeness_error)) < (1e-2 if entry.completeness else 1e-5)
    assert explanation.method == method and explanation.options == ()


def test_several_targets_slicing_and_the_saved_file_read_back_equal(tmp_path):
    keys = jax.random.split(jax.random.key(1), B)
    explanation = attribution.attribute(f, X, np.stack([TARGET, (TARGET + 1) % 3], 1), method="kernel_shap", mask=MASK,
                                      key=keys, n_samples=16, tokens=TOKENS)
    assert explanation.scores.shape == (B, 2, T) and explanation.completeness_error.shape == (B, 2)
    one = explanation[2]
    assert len(one) == 1 and one.scores.shape == (1, 2, T) and one.tokens == (tuple(TOKENS[2]),)
    np.testing.assert_array_equal(jax.random.key_data(one.key), jax.random.key_data(keys[2:3]))
    picked = explanation[np.array([True, False, True, True])]
    np.testing.assert_array_equal(picked.scores, np.asarray(explanation.scores)[[0, 2, 3]])
    assert equal(explanation[1:3], explanation[[1, 2]])
    with pytest.raises(IndexError, match="index: 4 is outside the 4 examples"):
        explanation[4]
    for saved in (explanation, explanation[1:], attribution.attribute(
            f, X, TARGET, method="integrated_gradients", mask=MASK, n_steps=8, rule="gausslegendre"),
            attribution.attribute(f, X, TARGET, method="occlusion", groups=np.array([[0, 0, 1, 1, -1]] * B))):
        path = saved.save(tmp_path / "saved.jsonl")
        loaded = attribution.Explanation.load(path)
        assert equal(saved, loaded), saved.method
        assert loaded.options == saved.options and loaded.tokens == saved.tokens


def test_a_file_of_several_methods_needs_one_named_and_a_damaged_line_is_named(tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text('{"index": 0, "tokens": ["a", "b"], "explanations": [{"target": 1, "scores": '
                    '{"gradient": [0.5, 0.25], "lime": [1.0, -1.0]}}]}\n')
    with pytest.raises(ValueError, match=r"method: .*two.jsonl holds the scores of gradient, lime; name one"):
        attribution.Explanation.load(path)
    lime = attribution.Explanation.load(path, method="lime")
    np.testing.assert_array_equal(lime.scores, [[1.0, -1.0]])
    np.testing.assert_array_equal(lime.mask, [[True, True]])
    path.write_text(path.read_text() + '{"index": 1, "tok\n')
    with pytest.raises(ValueError, match=r"two.jsonl:2: not a JSON line of explanations"):
        attribution.Explanation.load(path, method="lime")


def test_it_passes_through_jit_and_explain_runs_under_jit():
    explanation = attribution.attribute(f, X, TARGET, method="integrated_gradients", mask=MASK, n_steps=16)
    assert equal(jax.jit(lambda e: e)(explanation), explanation)
    jitted = jax.jit(lambda x, t: attribution.attribute(f, x, t, method="integrated_gradients", mask=MASK, n_steps=16))
    again = jitted(X, TARGET)
    np.testing.assert_allclose(again.scores, explanation.scores, rtol=1e-5, atol=1e-6)
    assert again.method == "integrated_gradients" and again.options == (("n_steps", 16),)


def test_the_notebook_view_shows_each_examples_tokens_coloured():
    explanation = attribution.attribute(f, X, TARGET, method="occlusion", mask=MASK, tokens=TOKENS)
    page = explanation._repr_html_()
    assert page.count('class="tok"') == int(MASK.sum())
    assert html.escape("<b>cat</b>") in page and "<b>cat</b>" not in page
    assert page.count("occlusion of output") == B
    untitled = attribution.attribute(f, X, TARGET, method="occlusion", mask=MASK)._repr_html_()
    assert ">[0]</span>" in untitled and untitled.count('class="tok"') == int(MASK.sum())


def test_to_shap_gives_shaps_explanation_of_the_same_values():
    shap = pytest.importorskip("shap")
    explanation = attribution.attribute(f, X, TARGET, method="kernel_shap", mask=MASK, key=jax.random.key(0),
                                      tokens=TOKENS)
    converted = explanation.to_shap()
    assert isinstance(converted, shap.Explanation)
    np.testing.assert_array_equal(converted.values, explanation.scores)
    np.testing.assert_array_equal(converted.base_values, explanation.baseline_output)
    assert list(converted.data[1][:4]) == TOKENS[1]


def test_bad_arguments_are_one_line():
    with pytest.raises(ValueError, match="method: expected one of gradient, .*, got 'shap'"):
        attribution.attribute(f, X, TARGET, method="shap")
    with pytest.raises(ValueError, match="n_samples: not an option of integrated_gradients"):
        attribution.attribute(f, X, TARGET, method="integrated_gradients", n_samples=3)
    with pytest.raises(ValueError, match="tokens: expected 4 sequences of words"):
        attribution.attribute(f, X, TARGET, method="occlusion", tokens=TOKENS[:2])


def test_faithfulness_aggregate_and_the_report_take_several_outputs_and_true_labels(tmp_path):
    targets = np.stack([TARGET, (TARGET + 1) % 3], 1)
    explanation = attribution.attribute(f, X, targets, method="occlusion", mask=MASK, tokens=TOKENS)
    both = attribution.faithfulness(f, X, targets, explanation.scores, mask=MASK)
    for k in range(2):
        each = attribution.faithfulness(f, X, targets[:, k], explanation.scores[:, k], mask=MASK)
        for metric, values in each.items():
            np.testing.assert_allclose(both[metric][:, k], values, rtol=1e-6)
    with pytest.raises(ValueError, match=r"scores: expected \[B, K, T\] = \[4, 2, 5\]"):
        attribution.faithfulness(f, X, targets, explanation.scores[:, :1], mask=MASK)
    word_ids = np.where(MASK, np.array([0, 0, 1, 2, 2]), -1)
    words = attribution.aggregate(explanation.scores, word_ids)
    assert words.shape == (B, 2, T)
    np.testing.assert_allclose(words[:, 1], attribution.aggregate(explanation.scores[:, 1], word_ids), rtol=1e-6)
    names = [[f"class {t}" for t in row] for row in targets.tolist()]
    page = (tmp_path / "report.html")
    attribution.report.write_html(page, TOKENS, {"occlusion": explanation.scores}, targets=names,
                                  labels=["class 0", ["class 1", "class 2"], None, "class 1"],
                                  faithfulness={"occlusion": both})
    text = page.read_text()
    assert text.count('<div class="example">') == 2 * B
    assert "true: <b>class 1, class 2</b>" in text and text.count("true: <b>unlabelled</b>") == 2
    with pytest.raises(ValueError, match="targets: expected 4 sequences of 2"):
        attribution.report.write_html(page, TOKENS, {"occlusion": explanation.scores}, targets=[["a"]] * B)


def test_class_names_are_saved_beside_the_indices_and_needed_where_a_file_has_names_alone(tmp_path):
    names = ("world", "sports", "business")
    explanation = attribution.attribute(f, X, TARGET, method="occlusion", mask=MASK, classes=names)
    assert "of output business" in explanation._repr_html_()
    loaded = attribution.Explanation.load(explanation.save(tmp_path / "named.jsonl"))
    assert equal(loaded, explanation) and loaded.classes == names
    path = tmp_path / "names.jsonl"
    path.write_text('{"tokens": ["a"], "explanations": [{"target": "sports", "scores": {"lime": [0.5]}}]}\n')
    with pytest.raises(ValueError, match=r"classes: .*names.jsonl names the outputs it explains \('sports', \.\.\.\)"):
        attribution.Explanation.load(path)
    assert int(attribution.Explanation.load(path, classes=names).target[0]) == 1
    with pytest.raises(ValueError, match=r"classes: .*names.jsonl:1 explains 'sports', which is not among"):
        attribution.Explanation.load(path, classes=["world"])
