"""Report writers: the C heatmap PNG, word heatmaps and the self-contained HTML report."""

import base64
import pathlib
import re
import types

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from jcaps.interpret.capsules import GlobalInterpretation
from jcaps.data.vocab import LabelMap, Vocabulary
from jcaps.interpret.report import example_record
from jcaps.viz.figures import capsule_heatmap_figure, plot_capsule_heatmap
from jcaps.viz.html import MAX_SHOWN_TOKENS, capsule_global_html, signed_heatmap_html, write_explanation_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CLASS_NAMES = ["World & <Politics>", "Sports"]


def _opacities(fragment):
    return [float(value) for value in re.findall(r"rgba\([^)]*, ([0-9.]+)\)", fragment)]


def test_signed_heatmap_scales_by_largest_magnitude_colours_by_sign_and_escapes():
    fragment = signed_heatmap_html(["<b>bold</b>", "a&b", "plain"], [2.0, -4.0, 0.0])
    assert _opacities(fragment) == [0.5, 1.0, 0.0]
    assert "rgba(255, 140, 0, 0.500)" in fragment and "rgba(30, 120, 255, 1.000)" in fragment
    assert "&lt;b&gt;bold&lt;/b&gt;" in fragment and "a&amp;b" in fragment
    assert "<b>" not in fragment
    assert signed_heatmap_html(["a", "b"], [1, 1], joiner="").count("</span><span") == 1


def test_signed_heatmap_all_zero_scores_and_length_mismatch():
    assert _opacities(signed_heatmap_html(["x", "y"], [0, 0])) == [0.0, 0.0]
    assert signed_heatmap_html([], []) == ""
    with pytest.raises(ValueError, match="2 tokens but 1 scores"):
        signed_heatmap_html(["x", "y"], [1.0])


def test_capsule_heatmap_png(tmp_path):
    path = plot_capsule_heatmap(np.array([[3, 0, 1], [0, 5, 0]]), CLASS_NAMES, tmp_path / "C.png", title="test")
    assert pathlib.Path(path).read_bytes()[:8] == PNG_SIGNATURE
    with pytest.raises(ValueError, match="class names"):
        plot_capsule_heatmap(np.zeros((3, 2)), CLASS_NAMES, tmp_path / "bad.png")


def _faithfulness_entry(comprehensiveness):
    metrics = {"comprehensiveness": comprehensiveness, "sufficiency": 0.1, "deletion_auc": 0.2,
               "insertion_auc": 0.7}
    return {**metrics, "ci95": {k: [v - 0.01, v + 0.01] for k, v in metrics.items()}, "seconds_per_100": 1.5,
            "rows": 2}


def test_report_is_self_contained_escaped_and_has_a_method_selector(tmp_path):
    heatmap = plot_capsule_heatmap(np.array([[1, 0], [0, 1]]), CLASS_NAMES, tmp_path / "C.png")
    acc = GlobalInterpretation(num_classes=2, num_capsules=2)
    acc.update([0, 1], [0, 1], [["<ceasefire>", "talks"], ["goal", "win"]])
    entry = {"index": 3, "tokens": ["ceasefire", "<talks>", "&", "more"], "label": "Sports",
             "prediction": CLASS_NAMES[0], "target": CLASS_NAMES[0], "probability": 0.8,
             "scores": {"gradient": [1, 2, 1, 0], "random": [0.5, 0.1, 0.2, 0.3]}}
    long_entry = {**entry, "index": 4, "tokens": ["w"] * (MAX_SHOWN_TOKENS + 5),
                  "scores": {m: [1.0] * (MAX_SHOWN_TOKENS + 5) for m in ("gradient", "random")}}
    path = write_explanation_report(
        tmp_path / "report.html", title="fasttext <test>", methods=("gradient", "random"),
        groups={CLASS_NAMES[0]: [entry, long_entry]},
        faithfulness={"gradient": _faithfulness_entry(0.4), "random": _faithfulness_entry(0.1)},
        completeness={"integrated_gradients": 0.003}, extra_html=capsule_global_html(acc.to_json(CLASS_NAMES), heatmap),
    )
    page = pathlib.Path(path).read_text(encoding="utf-8")
    encoded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page).group(1)
    assert base64.b64decode(encoded) == pathlib.Path(heatmap).read_bytes()
    assert "<script" not in page and "http" not in page
    for raw in ("<talks>", "<ceasefire>", "<Politics>", "<test>"):
        assert raw not in page
    assert "&lt;talks&gt;" in page and "World &amp; &lt;Politics&gt;" in page
    # One radio button and one label per method; the first is checked.
    assert page.count('type="radio"') == 2 and 'id="method-gradient" checked' in page
    assert 'label for="method-random"' in page
    # Comprehensiveness minus random's, 0.4 - 0.1, with random's interval beside it.
    assert "+0.3000<br><small>random [0.0900, 0.1100]</small>" in page and "0.0030" in page
    assert f"showing the first {MAX_SHOWN_TOKENS} of {MAX_SHOWN_TOKENS + 5} tokens" in page
    assert "Shared capsules: none" in page


def test_global_section_flags_a_capsule_two_classes_share():
    acc = GlobalInterpretation(num_classes=2, num_capsules=3)
    acc.update([0, 0, 1], [2, 2, 2], [[], [], []])
    section = capsule_global_html(acc.to_json(CLASS_NAMES), None)
    assert "capsule 2 is the most selected of World &amp; &lt;Politics&gt;, " + CLASS_NAMES[1] in section


def test_global_section_says_why_mi_over_h_is_undefined():
    """A model that predicts one class has H(class) = 0: the section says so, never 0.000."""
    acc = GlobalInterpretation(num_classes=2, num_capsules=3)
    acc.update([1, 1, 1], [0, 1, 2], [[], [], []])
    section = capsule_global_html(acc.to_json(CLASS_NAMES), None)
    assert "MI / H(class): undefined (a single class is predicted)" in section


def test_comparison_with_random_does_not_divide_by_its_near_zero_baseline(tmp_path):
    # A random ranking whose comprehensiveness is about 0 made a ratio read 274.5 (or -25.3 for
    # the best method): the difference stays on the metric's own scale.
    path = write_explanation_report(
        tmp_path / "report.html", title="t", methods=("kernel_shap", "random"), groups={},
        faithfulness={"kernel_shap": _faithfulness_entry(0.25), "random": _faithfulness_entry(-0.001)})
    page = pathlib.Path(path).read_text(encoding="utf-8")
    assert "+0.2510<br><small>random [-0.0110, 0.0090]</small>" in page and "-250" not in page


def test_report_without_faithfulness(tmp_path):
    path = write_explanation_report(tmp_path / "report.html", title="t", methods=("gradient",), groups={},
                                    faithfulness={})
    page = pathlib.Path(path).read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "not measured" in page


def test_heatmap_title_fits_inside_a_narrow_figure():
    title = "C on test: predicted class × most-coupled capsule, a title longer than the figure is wide"
    figure = capsule_heatmap_figure(np.ones((4, 3)), ["a", "b", "c", "d"], title)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    extent = figure.axes[0].title.get_window_extent(canvas.get_renderer())
    assert extent.x0 >= 0 and extent.x1 <= figure.bbox.width
    assert figure.axes[0].get_title().replace("\n", " ") == title


def test_example_record_lists_a_kgram_picked_by_two_capsules_once():
    words = ["oil", "prices", "rose", "sharply", "today"]
    vocab = Vocabulary.build([words])
    trained = types.SimpleNamespace(
        dataset=types.SimpleNamespace(vocab=vocab, labels=LabelMap(("world", "business")), nested=False)
    )
    tokens = np.append(vocab.encode(words), 0)
    result = {
        "predicted": np.int32(1),
        "probabilities": np.array([0.2, 0.8]),
        "capsules": np.array([4, 7, -1]),
        # Capsules 4 and 7 both attend to "oil prices rose"; capsule 7 also to "rose sharply today".
        "spans": np.array([[[0, 3], [0, 3]], [[0, 3], [2, 5]], [[0, 0], [0, 0]]]),
        "word_scores": np.array([3, 3, 4, 1, 1, 0]),
    }
    record = example_record(trained, "Oil prices rose sharply today", tokens, 1, result)
    assert record["kgrams"] == [["oil", "prices", "rose"], ["rose", "sharply", "today"]]
    assert record["capsules"] == [4, 7] and record["prediction"] == "business"
