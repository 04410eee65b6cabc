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
from jcaps.viz.html import word_heatmap_html, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CLASS_NAMES = ["World & <Politics>", "Sports"]


def _opacities(fragment):
    return [float(value) for value in re.findall(r"rgba\([^)]*, ([0-9.]+)\)", fragment)]


def test_word_heatmap_scales_by_largest_score_and_escapes():
    fragment = word_heatmap_html(["<b>bold</b>", "a&b", "plain"], [2.0, 4.0, 0.0])
    assert _opacities(fragment) == [0.5, 1.0, 0.0]
    assert "&lt;b&gt;bold&lt;/b&gt;" in fragment and "a&amp;b" in fragment
    assert "<b>" not in fragment


def test_word_heatmap_all_zero_scores_and_length_mismatch():
    assert _opacities(word_heatmap_html(["x", "y"], [0, 0])) == [0.0, 0.0]
    assert word_heatmap_html([], []) == ""
    with pytest.raises(ValueError, match="2 words but 1 scores"):
        word_heatmap_html(["x", "y"], [1.0])


def test_capsule_heatmap_png(tmp_path):
    path = plot_capsule_heatmap(np.array([[3, 0, 1], [0, 5, 0]]), CLASS_NAMES, tmp_path / "C.png", title="test")
    assert pathlib.Path(path).read_bytes()[:8] == PNG_SIGNATURE
    with pytest.raises(ValueError, match="class names"):
        plot_capsule_heatmap(np.zeros((3, 2)), CLASS_NAMES, tmp_path / "bad.png")


def test_report_is_self_contained_and_escaped(tmp_path):
    heatmap = plot_capsule_heatmap(np.array([[1, 0], [0, 1]]), CLASS_NAMES, tmp_path / "C.png")
    acc = GlobalInterpretation(num_classes=2, num_capsules=2)
    acc.update([0, 1], [0, 1], [["<ceasefire>", "talks"], ["goal", "&", "win"]])
    examples = [
        {
            "text": "Ceasefire <talks> & more",
            "words": ["ceasefire", "<talks>", "&", "more"],
            "word_scores": [1, 2, 1, 0],
            "label": "Sports",
            "prediction": CLASS_NAMES[0],
            "probabilities": {CLASS_NAMES[0]: 0.8, "Sports": 0.2},
            "capsules": [0, 1],
            "kgrams": [["ceasefire", "<talks>", "&"], ["<talks>", "&"]],
        },
        {
            "text": "late goal",
            "words": ["late", "goal"],
            "word_scores": [0, 1],
            "label": None,
            "prediction": "Sports",
            "probabilities": {CLASS_NAMES[0]: 0.1, "Sports": 0.9},
            "capsules": [1],
            "kgrams": [["late", "goal"]],
        },
    ]
    path = write_report(tmp_path / "report.html", examples, CLASS_NAMES, heatmap, acc.to_json(CLASS_NAMES))
    page = pathlib.Path(path).read_text(encoding="utf-8")

    encoded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page).group(1)
    assert base64.b64decode(encoded) == pathlib.Path(heatmap).read_bytes()
    assert "<script" not in page
    # Data text appears only escaped: words, raw text, K-grams, class names, cell words.
    for raw in ("<talks>", "<ceasefire>", "<Politics>", "<talks> & more"):
        assert raw not in page
    assert "&lt;talks&gt;" in page and "Ceasefire &lt;talks&gt; &amp; more" in page
    assert "ceasefire &lt;talks&gt; &amp;" in page  # a K-gram
    assert "&lt;ceasefire&gt; (1)" in page and "&amp; (1)" in page  # top words of cells
    assert "World &amp; &lt;Politics&gt;" in page
    assert "(wrong)" in page and "unlabelled" in page
    # Probabilities listed best first inside each example.
    assert page.index("0.900") < page.index("0.100")
    # Grouped by prediction in class order: the World example before the Sports one.
    assert page.index("Ceasefire &lt;talks&gt; &amp; more") < page.index("late goal")


def test_report_without_heatmap(tmp_path):
    path = write_report(
        tmp_path / "report.html", [], CLASS_NAMES, None, GlobalInterpretation(2, 2).to_json(CLASS_NAMES)
    )
    page = pathlib.Path(path).read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "data:image" not in page


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
