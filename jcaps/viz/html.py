"""Self-contained HTML reports: word heatmaps and the iCapsNets interpretation report.

Everything a report needs is inside the one file (inline CSS, the heatmap PNG as a base64 data
URI, no scripts), so it can be mailed or archived as is. All text from the data is escaped:
tweets and news contain <, > and &.
"""

import base64
import html
import os
from collections.abc import Mapping, Sequence

_HIGHLIGHT_RGB = "255, 140, 0"

_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 72em; }
.example { border: 1px solid #ccc; border-radius: 4px; padding: 0.8em; margin: 0.8em 0; }
.wrong { border-color: #c33; }
.text { line-height: 1.9; }
.word { padding: 0.1em 0.15em; border-radius: 3px; }
.meta { color: #444; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
img { max-width: 100%; }
.columns { display: flex; gap: 2em; align-items: flex-start; }
pre { white-space: pre-wrap; }
"""


def _escape(value: object) -> str:
    return html.escape(str(value), quote=True)


def word_heatmap_html(words: Sequence[str], scores: Sequence[float]) -> str:
    """Words as spans whose background opacity is the score divided by the largest score.

    Args:
      words: the words of a text, in order.
      scores: one non-negative score per word.

    Returns:
      An HTML fragment; words are escaped, and each span's title holds its score.
    """
    if len(words) != len(scores):
        raise ValueError(f"{len(words)} words but {len(scores)} scores.")
    largest = max((float(score) for score in scores), default=0.0)
    spans = []
    for word, score in zip(words, scores):
        opacity = float(score) / largest if largest > 0 else 0.0
        spans.append(
            f'<span class="word" title="{float(score):g}" '
            f'style="background-color: rgba({_HIGHLIGHT_RGB}, {opacity:.3f})">{_escape(word)}</span>'
        )
    return " ".join(spans)


def _probability_table(probabilities: Mapping[str, float]) -> str:
    rows = "".join(
        f"<tr><td>{_escape(name)}</td><td>{float(p):.3f}</td></tr>"
        for name, p in sorted(probabilities.items(), key=lambda item: -float(item[1]))
    )
    return f"<table><tr><th>class</th><th>probability</th></tr>{rows}</table>"


def _example_html(example: Mapping) -> str:
    label, prediction = example.get("label"), example["prediction"]
    verdict = "" if label is None else (" (correct)" if label == prediction else " (wrong)")
    box_class = "example wrong" if verdict == " (wrong)" else "example"
    kgrams = "".join(f"<li>{_escape(' '.join(kgram))}</li>" for kgram in example["kgrams"])
    capsules = ", ".join(_escape(capsule) for capsule in example["capsules"])
    return (
        f'<div class="{box_class}">'
        f'<p class="meta">true label: <b>{_escape("unlabelled" if label is None else label)}</b>'
        f" · prediction: <b>{_escape(prediction)}</b>{verdict}"
        f" · selected capsules: {capsules}</p>"
        f'<p class="text">{word_heatmap_html(example["words"], example["word_scores"])}</p>'
        f'<div class="columns">{_probability_table(example["probabilities"])}'
        f"<div>selected K-grams:<ol>{kgrams}</ol></div></div>"
        f"<details><summary>raw text</summary><pre>{_escape(example['text'])}</pre></details>"
        "</div>"
    )


def _global_html(global_summary: Mapping) -> str:
    rows = "".join(
        f"<tr><td>{_escape(cell['class'])}</td><td>{_escape(cell['capsule'])}</td>"
        f"<td>{_escape(cell['count'])}</td><td>"
        + ", ".join(f"{_escape(word)} ({_escape(count)})" for word, count in cell["top_words"])
        + "</td></tr>"
        for cell in global_summary.get("cells", [])
    )
    sparsity = global_summary.get("sparsity")
    sparsity_html = ""
    if sparsity and sparsity.get("overall") is not None:
        per_class = ", ".join(
            f"{_escape(name)}: {'—' if value is None else f'{value:.2f}'}"
            for name, value in sparsity["per_class"].items()
        )
        sparsity_html = (
            f"<p>Fraction of each class's examples in its top-{_escape(sparsity['top'])} cells "
            f"(1 = explained by few capsules): overall {sparsity['overall']:.2f}; {per_class}.</p>"
        )
    return (
        f"{sparsity_html}<table><tr><th>class</th><th>capsule</th><th>count</th>"
        f"<th>most frequent K-gram words</th></tr>{rows}</table>"
    )


def write_report(
    path: str | os.PathLike,
    examples: Sequence[Mapping],
    class_names: Sequence[str],
    heatmap_png_path: str | os.PathLike | None,
    global_summary: Mapping,
) -> str:
    """Writes the iCapsNets interpretation report as one self-contained HTML file.

    Args:
      path: where to write `report.html`.
      examples: dicts with keys text (str), words (list of str), word_scores (one per word),
        label (class name or None), prediction (class name), probabilities ({name: p}),
        capsules (selected capsule indices), kgrams (list of word lists). Shown grouped by
        predicted class, in `class_names` order.
      class_names: all class names.
      heatmap_png_path: PNG of the C heatmap, embedded as a data URI; None leaves it out.
      global_summary: `GlobalInterpretation.to_json(...)`: its cells (top words per
        (class, capsule)) and sparsity are tabulated.

    Returns:
      `path` as a string.
    """
    heatmap_html = ""
    if heatmap_png_path is not None:
        with open(heatmap_png_path, "rb") as png:
            encoded = base64.b64encode(png.read()).decode("ascii")
        heatmap_html = f'<img alt="class by capsule counts C" src="data:image/png;base64,{encoded}">'

    # Class order first; a prediction outside class_names still gets its own group.
    group_names = list(dict.fromkeys([*class_names, *(e["prediction"] for e in examples)]))
    sections = []
    for name in group_names:
        group = [example for example in examples if example["prediction"] == name]
        if group:
            sections.append(
                f"<h3>predicted {_escape(name)} ({len(group)})</h3>"
                + "".join(_example_html(example) for example in group)
            )

    document = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>iCapsNets interpretation</title><style>{_STYLE}</style></head><body>"
        "<h1>iCapsNets interpretation</h1>"
        "<h2>Global: which capsules explain which classes</h2>"
        f"{heatmap_html}{_global_html(global_summary)}"
        f"<h2>Local: examples ({len(examples)})</h2>"
        "<p>Highlight strength = how many of the selected K-grams contain the word.</p>"
        f"{''.join(sections)}</body></html>\n"
    )
    with open(path, "w", encoding="utf-8") as out:
        out.write(document)
    return str(path)
