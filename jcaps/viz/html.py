"""Self-contained HTML reports: the explanation report of every model, with iCapsNets' global
interpretation as a section of its own.

Everything a report needs is inside the one file (inline CSS, the heatmap PNG as a base64 data
URI, no scripts), so it can be mailed or archived as is. All text from the data is escaped:
tweets and news contain <, > and &.
"""

import base64
import html
import os
from collections.abc import Mapping, Sequence

from jcaps.files import replace_file

_STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 72em; }
.example { border: 1px solid #ccc; border-radius: 4px; padding: 0.8em; margin: 0.8em 0; }
.meta { color: #444; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
img { max-width: 100%; }
"""


def _escape(value: object) -> str:
    return html.escape(str(value), quote=True)


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


def information_text(normalized: float | None) -> str:
    """MI / H(class) for people: the number, or why there is none (one class predicted, H = 0)."""
    return "undefined (a single class is predicted)" if normalized is None else f"{normalized:.3f}"


def capsule_global_html(global_summary: Mapping, heatmap_png_path: str | os.PathLike | None) -> str:
    """iCapsNets' global interpretation as an HTML section: the C heatmap (embedded as a data
    URI; None leaves it out), the share of each class in its fullest cells, the information the
    selected capsule carries about the class (when the summary has it) and each cell's words.

    Args:
      global_summary: `GlobalInterpretation.to_json(...)`.
      heatmap_png_path: PNG of the C heatmap.
    """
    heatmap_html = ""
    if heatmap_png_path is not None:
        with open(heatmap_png_path, "rb") as png:
            encoded = base64.b64encode(png.read()).decode("ascii")
        heatmap_html = f'<img alt="class by capsule counts C" src="data:image/png;base64,{encoded}">'
    information = global_summary.get("class_capsule_information")
    information_html = (
        ""
        if information is None
        else (
            f"<p>Normalised mutual information between predicted class and selected capsule, "
            f"MI / H(class): {information_text(information['normalized'])} (0: the capsule says nothing about the "
            "class; 1: it determines it).</p>"
        )
    )
    shared = global_summary.get("shared_capsules")
    shared_html = (
        ""
        if shared is None
        else (
            "<p><strong>Shared capsules:</strong> "
            + "; ".join(
                f"capsule {_escape(entry['capsule'])} is the most selected of "
                + ", ".join(_escape(name) for name in entry["classes"])
                for entry in shared
            )
            + " (the capsule does not tell these classes apart).</p>"
            if shared
            else "<p>Shared capsules: none (every class has a most-selected capsule of its own).</p>"
        )
    )
    return (
        "<h2>Global: which capsules explain which classes</h2>"
        f"{heatmap_html}{information_html}{shared_html}{_global_html(global_summary)}"
    )


# ---------------------------------------------------------------------------------------------
# Explanation report: every method side by side, the faithfulness table on top.
# ---------------------------------------------------------------------------------------------

# Tokens shown per example; longer texts are cut with a visible note.
MAX_SHOWN_TOKENS = 300
_POSITIVE_RGB, _NEGATIVE_RGB = "255, 140, 0", "30, 120, 255"

_EXPLANATION_STYLE = """
.tok { padding: 0.05em 0.1em; border-radius: 3px; }
.scores { display: none; line-height: 1.9; }
.methods { position: sticky; top: 0; background: #fff; padding: 0.4em 0; border-bottom: 1px solid #ccc; }
.methods label { margin-right: 0.6em; padding: 0.15em 0.5em; border: 1px solid #999; border-radius: 4px;
  cursor: pointer; }
input[name="method"] { position: absolute; opacity: 0; }
.note { color: #a33; font-size: 0.85em; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
"""


def _method_id(method: str) -> str:
    return "method-" + "".join(c if c.isalnum() else "-" for c in method)


def signed_heatmap_html(tokens: Sequence[str], scores: Sequence[float], joiner: str = " ") -> str:
    """Tokens as spans coloured by sign (orange +, blue -) with opacity |score| / max |score|;
    escaped, each span's title holding its score."""
    if len(tokens) != len(scores):
        raise ValueError(f"{len(tokens)} tokens but {len(scores)} scores.")
    largest = max((abs(float(s)) for s in scores), default=0.0)
    spans = []
    for token, score in zip(tokens, scores):
        opacity = abs(float(score)) / largest if largest > 0 else 0.0
        rgb = _POSITIVE_RGB if float(score) >= 0 else _NEGATIVE_RGB
        spans.append(
            f'<span class="tok" title="{float(score):g}" '
            f'style="background-color: rgba({rgb}, {opacity:.3f})">{_escape(token)}</span>'
        )
    return joiner.join(spans)


def _number(value, spec: str) -> str:
    """`value` formatted, or "–" when it was not measured."""
    return "–" if value is None else format(value, spec)


def _faithfulness_table(faithfulness: Mapping, completeness: Mapping[str, float]) -> str:
    if not faithfulness:
        return "<p>Faithfulness was not measured (run with <code>--faithfulness</code>).</p>"
    # Beside each method, its comprehensiveness minus the random ranking's, with the random
    # ranking's own interval: a ratio to random divides by a baseline near zero, or negative.
    random = faithfulness.get("random")
    columns = ("comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc")
    header = "".join(f"<th>{name.replace('_', ' ')}</th>" for name in columns)
    rows = []
    for method, values in faithfulness.items():
        cells = "".join(
            f'<td class="number">{values[c]:.4f}<br><small>[{values["ci95"][c][0]:.4f}, '
            f"{values['ci95'][c][1]:.4f}]</small></td>"
            for c in columns
        )
        if random is None or method == "random":
            above_random = "–"
        else:
            low, high = random["ci95"]["comprehensiveness"]
            above_random = (
                f"{values['comprehensiveness'] - random['comprehensiveness']:+.4f}"
                f"<br><small>random [{low:.4f}, {high:.4f}]</small>"
            )
        rows.append(
            f'<tr><td>{_escape(method)}</td>{cells}<td class="number">{above_random}</td>'
            f'<td class="number">{_number(values.get("seconds_per_100"), ".3f")}</td>'
            f'<td class="number">{_number(values.get("rows"), "d")}</td></tr>'
        )
    completeness_html = "".join(
        f"<p>{_escape(method.replace('_', ' '))}: median completeness error |Σ attributions − (f(x) − f(x′))| / "
        f"|f(x) − f(x′)| {error:.4f}.</p>"
        for method, error in completeness.items()
    )
    return (
        '<table class="faithfulness"><tr><th>method</th>'
        f"{header}<th>comprehensiveness − random</th><th>s per 100</th><th>rows</th></tr>{''.join(rows)}</table>"
        "<p>Comprehensiveness and sufficiency: AOPC over the top 1, 5, 10, 20 and 50 % of each "
        "example's tokens removed (comprehensiveness, higher is better) or kept alone (sufficiency, "
        "lower is better); deletion AUC lower and insertion AUC higher is better. 95 % bootstrap "
        "intervals below each mean; random is the baseline ranking.</p>"
        f"{completeness_html}"
    )


def _explained_example_html(entry: Mapping, methods: Sequence[str], joiner: str) -> str:
    tokens = list(entry["tokens"])
    shown = min(len(tokens), MAX_SHOWN_TOKENS)
    note = f'<p class="note">showing the first {shown} of {len(tokens)} tokens</p>' if shown < len(tokens) else ""
    lines = "".join(
        f'<p class="scores s-{_method_id(method)}">'
        f"{signed_heatmap_html(tokens[:shown], entry['scores'][method][:shown], joiner)}</p>"
        for method in methods
    )
    label, prediction = entry.get("label"), entry.get("prediction")
    label_text = "unlabelled" if label is None else (", ".join(label) if isinstance(label, list) else label)
    prediction_text = ", ".join(prediction) if isinstance(prediction, list) else prediction
    probability = "" if entry.get("probability") is None else f" (p {float(entry['probability']):.3f})"
    return (
        f'<div class="example"><p class="meta">example {_escape(entry["index"])} · true: <b>{_escape(label_text)}</b>'
        f" · predicted: <b>{_escape(prediction_text)}</b> · explained: <b>{_escape(entry['target'])}</b>"
        f"{probability}</p>{lines}{note}</div>"
    )


def write_explanation_report(
    path: str | os.PathLike,
    *,
    title: str,
    methods: Sequence[str],
    groups: Mapping[str, Sequence[Mapping]],
    faithfulness: Mapping,
    completeness: Mapping[str, float] | None = None,
    degenerate: Mapping[str, float] | None = None,
    joiner: str = " ",
    extra_html: str = "",
    note: str = "",
) -> str:
    """Writes the explanation report: one self-contained HTML file without scripts.

    Args:
      path: where to write it.
      title: the page title.
      methods: the methods shown; a radio selector (pure CSS) picks the one highlighted, at first
        integrated gradients (or the first method).
      groups: explained class or label name -> entries, each with tokens, scores {method: one
        score per token}, probability, index, label, prediction and target.
      faithfulness: `faithfulness.json`'s content (tabulated on top; {} says it was not run).
      completeness: {method: its median completeness error}, for the methods that report one.
      degenerate: {method: the share of its explained predictions whose real tokens all got the
        same score}: a method above 0 is flagged beside its name and above the examples.
      joiner: what stands between tokens ("" for characters).
      extra_html: a model's own section (e.g. iCapsNets' global interpretation), placed after
        the table.
      note: a sentence about the model's explanations, shown under the title.

    Returns:
      `path` as a string.
    """
    # A CSS-only selector: hidden radio buttons before <main>, their labels in the sticky bar.
    selector_css = "".join(
        f"#{_method_id(m)}:checked ~ main .s-{_method_id(m)} {{ display: block; }}\n"
        f"#{_method_id(m)}:checked ~ nav label[for={_method_id(m)}] {{ background: #333; color: #fff; }}\n"
        for m in methods
    )
    # The page opens on integrated gradients where it ran (the axiomatic reference), else the first.
    opened = "integrated_gradients" if "integrated_gradients" in methods else methods[0]
    radios = "".join(
        f'<input type="radio" name="method" id="{_method_id(m)}"{" checked" if m == opened else ""}>' for m in methods
    )
    degenerate = {m: share for m, share in (degenerate or {}).items() if share > 0}
    labels = "".join(
        f'<label for="{_method_id(m)}">{_escape(m)}{" (degenerate)" if m in degenerate else ""}</label>'
        for m in methods
    )
    flags = "".join(
        f'<p class="note degenerate">{_escape(m)} is degenerate: it gives every token of an example the same score '
        f"in {share:.0%} of the explained predictions, a ranking of nothing.</p>"
        for m, share in degenerate.items()
    )
    sections = "".join(
        f"<h3>explained: {_escape(name)} ({len(entries)} shown)</h3>"
        + "".join(_explained_example_html(entry, methods, joiner) for entry in entries)
        for name, entries in groups.items()
    )
    note_html = f'<p class="meta">{_escape(note)}</p>' if note else ""
    document = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_escape(title)}</title><style>{_STYLE}{_EXPLANATION_STYLE}{selector_css}</style></head><body>"
        f"<h1>{_escape(title)}</h1>{note_html}"
        f"<h2>Faithfulness</h2>{_faithfulness_table(faithfulness, completeness or {})}"
        f"{extra_html}<h2>Examples, grouped by the prediction explained</h2>"
        "<p>Orange: the token raises the explained output; blue: it lowers it; stronger = larger |score| "
        "within the example.</p>"
        f"{flags}"
        f'{radios}<nav class="methods">method: {labels}</nav><main>{sections}</main></body></html>\n'
    )
    replace_file(path, document)
    return str(path)


def checks_markdown(summary: Mapping) -> str:
    """The sanity checks of `jcaps.interpret.checks` (its summary: {method: {check: value},
    "settings": ...}) as a Markdown table, a row per method; ⚑ marks a flagged check."""
    lines = [
        (
            "| method | randomisation ρ (all re-initialised) | max-sensitivity | entropy | sparseness | "
            "degenerate | pointing game | top-k hit |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def cell(value, flagged=False):
        text = "–" if value is None else f"{value:.3f}"
        return f"**{text}** ⚑" if flagged else text

    for method, r in summary.items():
        if method == "settings":
            continue
        correlations = list(r["randomisation_spearman"].values())
        full = correlations[-1] if correlations else None  # None: no randomised model was given
        lines.append(
            f"| {method} | {cell(full, r['randomisation_flagged'])} | {cell(r['max_sensitivity'])} | "
            f"{cell(r['entropy'])} | {cell(r['sparseness'])} | {cell(r['degenerate'], r['degenerate_flagged'])} "
            f"| {cell(r['pointing_game'])} | {cell(r['top_k_hit'])} |"
        )
    return "\n".join(lines) + "\n"
