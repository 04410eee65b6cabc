"""Sanity checks of explanation methods, beside faithfulness: do the attributions depend on the
model, are they stable, concentrated, and do they find known evidence? (The checks of Quantus and
ferret.)

Per method, over the explained predictions:

  * randomisation (Adebayo et al. 2018): the Spearman rank correlation between the attributions
    of the trained model and those of the same model with re-initialised parameters, cascading
    from the output down (the last parameter block, the last half, all of them). An explanation
    of the model should change: a mean correlation >= 0.5 with every block re-initialised flags
    the method (`RANDOMISATION_FLAG`).
  * max-sensitivity (Yeh et al. 2019): max over `samples` draws of ||A(e + d) - A(e)|| / ||A(e)||,
    d uniform in [-r, r] per vector entry with r = `radius` times the standard deviation of the
    example's input vectors; the model's own explanation and random are left out (they are not
    functions of the vectors here).
  * complexity: the entropy of |A| / sum |A| over the real positions, divided by log M (0: one
    position holds everything, 1: spread evenly; Bhatt et al. 2020), and sparseness, the Gini
    index of |A| (Chalasani et al. 2020).
  * degenerate: the share of predictions whose attributions are equal at every real position, so
    that their ranking is arbitrary (the gradient of fastText's mean of word vectors is the same
    for every word); >= 0.5 flags the method (`DEGENERATE_FLAG`).
  * localisation, where the data has known evidence (the generated data of the `:smoke` configs:
    the keywords of each class, `jcaps.data.synthetic.KEYWORDS`): the pointing game (the
    top-ranked position is evidence of the explained class) and the top-k hit rate (the share
    of the k top-ranked positions that are evidence, k the number of evidence positions).

The array functions are NumPy; `check_workdir` runs them on a trained workdir.
"""

from __future__ import annotations

import math
import re

import jax
import numpy as np

from jcaps.interpret.explain import Explainer, Options

RANDOMISATION_FLAG = 0.5
DEGENERATE_FLAG = 0.5
# Methods that are functions of the input vectors (max-sensitivity perturbs those).
_NOT_OF_VECTORS = ("random", "capsules", "attention")


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their ranks) of a 1-D array."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end - 1) / 2
            start = end
    return ranks


def spearman(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[R] Spearman's rank correlation of each row of a and b [R, P] over its real positions.
    Two constant rows correlate 1 (neither ranks anything: nothing changed); one constant row
    correlates 0; rows of fewer than two positions 1."""
    out = np.ones(len(a))
    for r in range(len(a)):
        x, y = a[r][mask[r]], b[r][mask[r]]
        if len(x) < 2:
            continue
        flat_x, flat_y = np.ptp(x) == 0, np.ptp(y) == 0
        if flat_x or flat_y:
            out[r] = 1.0 if flat_x and flat_y else 0.0
            continue
        out[r] = np.corrcoef(_ranks(x), _ranks(y))[0, 1]
    return out


def complexity(scores: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """{"entropy": [R] normalised entropy of |A|, "sparseness": [R] Gini index of |A|} over the
    real positions (module docstring); a row with no mass gets entropy 1 and sparseness 0."""
    entropy, gini = np.ones(len(scores)), np.zeros(len(scores))
    for r in range(len(scores)):
        magnitude = np.abs(scores[r][mask[r]]).astype(np.float64)
        total, m = magnitude.sum(), len(magnitude)
        if total <= 0 or m < 2:
            continue
        p = magnitude / total
        entropy[r] = float(-np.sum(p[p > 0] * np.log(p[p > 0])) / math.log(m))
        ordered = np.sort(magnitude)
        gini[r] = float(np.sum((2 * np.arange(1, m + 1) - m - 1) * ordered) / (m * total))
    return {"entropy": entropy, "sparseness": gini}


def degenerate(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[R] True where the scores are the same at every real position (at least two of them)."""
    out = np.zeros(len(scores), bool)
    for r in range(len(scores)):
        values = scores[r][mask[r]]
        scale = max(float(np.abs(values).max(initial=0.0)), 1e-12)
        out[r] = len(values) >= 2 and float(np.ptp(values)) <= 1e-6 * scale
    return out


def localisation(scores: np.ndarray, mask: np.ndarray, evidence: np.ndarray) -> dict[str, np.ndarray]:
    """{"pointing_game": [R'] the top-ranked real position is evidence, "top_k_hit": [R'] share of
    the k top-ranked real positions that are evidence (k = evidence count)} for the R' rows with
    evidence (evidence [R, P] bool)."""
    pointing, hits = [], []
    for r in range(len(scores)):
        real = np.flatnonzero(mask[r])
        k = int(evidence[r][real].sum())
        if k == 0:
            continue
        ranked = real[np.argsort(-scores[r][real], kind="stable")]
        pointing.append(bool(evidence[r][ranked[0]]))
        hits.append(float(evidence[r][ranked[:k]].mean()))
    return {"pointing_game": np.array(pointing, bool), "top_k_hit": np.array(hits)}


def max_sensitivity(base: np.ndarray, perturbed: list[np.ndarray], mask: np.ndarray) -> np.ndarray:
    """[R] max over the perturbed attributions of ||A' - A|| / ||A|| over the real positions."""
    norm = np.maximum(np.linalg.norm(np.where(mask, base, 0.0), axis=-1), 1e-12)
    ratios = [np.linalg.norm(np.where(mask, p - base, 0.0), axis=-1) / norm for p in perturbed]
    return np.max(np.stack(ratios), axis=0)


# ---------------------------------------------------------------------------------------------
# On a trained workdir.
# ---------------------------------------------------------------------------------------------


def cascade(trained, seed: int) -> list[tuple[str, object]]:
    """[(what was re-initialised, parameters)]: the last top-level parameter block, the last half
    of them, all of them (in the order the model creates them, input first), from a fresh
    initialisation of the model with `seed`."""
    from jcaps.train.state import dummy_inputs

    inputs = dummy_inputs(trained.config, trained.dataset)
    key = jax.random.key(seed)
    fresh = trained.model.init({"params": key, "dropout": key}, *inputs, train=False)["params"]
    names = list(fresh)  # creation order (restored parameters come back sorted by name)
    stages = sorted({1, math.ceil(len(names) / 2), len(names)})
    out = []
    for count in stages:
        replaced = names[len(names) - count:]
        # On the devices of the trained parameters (replicated over the mesh), so that one
        # computation does not mix arrays of one device with arrays of several.
        params = {name: jax.tree.map(lambda new, old: jax.device_put(new, old.sharding), fresh[name],
                                     trained.params[name]) if name in replaced else trained.params[name]
                  for name in names}
        label = "all" if count == len(names) else f"last {count} of {len(names)} ({', '.join(replaced)})"
        out.append((label, params))
    return out


def evidence_positions(trained, rows, explainer_words, true_names) -> np.ndarray | None:
    """[R, P] True at the positions holding a keyword of the explained class when it is a true
    one (a correct prediction), for the generated data of the `:smoke` configs; None for any
    other data."""
    from jcaps.data import synthetic

    if trained.config.data.get("source") != "synthetic" or "tokens" not in trained.family.inputs:
        return None
    per_position = []
    for r, name in enumerate(rows.target_name):
        keywords = set(synthetic.KEYWORDS.get(name, ())) if name in true_names(r) else set()
        words = explainer_words(r)  # one per position, None at padding
        if trained.config.data.tokenizer.endswith("chars"):
            text = "".join(w or "" for w in words).lower()
            marked = np.zeros(len(words), bool)
            for keyword in keywords:
                for match in re.finditer(rf"\b{re.escape(keyword)}\b", text):
                    marked[match.start():match.end()] = True
            per_position.append(marked)
        else:
            per_position.append(np.array([w is not None and w.lower() in keywords for w in words]))
    return np.stack(per_position)


def check_workdir(trained, split: str, methods: tuple[str, ...], *, limit: int, options: Options = Options(),
                  batch_size: int = 32, seed: int = 0, radius: float = 0.05, samples: int = 4) -> dict:
    """Every check of `methods` on the first `limit` examples of `split` (module docstring):
    {method: {check: mean, ...}, "settings": {...}}."""
    from jcaps.interpret.explanations import true_labels, position_words

    explainer = Explainer(trained, options, seed=seed)
    stages = cascade(trained, seed + 1)
    rng = np.random.default_rng(seed)
    collected = {m: {"spearman": {label: [] for label, _ in stages}, "sensitivity": [], "entropy": [],
                     "sparseness": [], "degenerate": [], "pointing_game": [], "top_k_hit": []} for m in methods}
    is_text = "tokens" in trained.family.inputs
    for batch in trained.dataset.eval_batches(split, batch_size, limit=limit):
        rows = explainer.rows(batch)
        if rows is None:
            continue
        inputs = batch["tokens"] if is_text else batch["series"]

        def words(r):
            index = int(batch["index"][rows.example[r]])
            return position_words(trained, split, index, np.asarray(inputs[rows.example[r]]))

        def true_names(r):
            label = true_labels(trained, batch, rows.example[r])
            return label if isinstance(label, list) else [label]

        evidence = evidence_positions(trained, rows, words, true_names)
        vectors = explainer.vectors(rows)
        spread = np.std(vectors.reshape(len(vectors), -1), axis=-1)[:, None, None]
        shifts = [rng.uniform(-1.0, 1.0, vectors.shape).astype(np.float32) * radius * spread for _ in range(samples)]
        for method in methods:
            base = explainer.rows_scores(rows, method)
            record = collected[method]
            for label, params in stages:
                record["spearman"][label].append(spearman(base, explainer.rows_scores(rows, method, params=params),
                                                          rows.mask))
            if method not in _NOT_OF_VECTORS:
                perturbed = [explainer.rows_scores(rows, method, shift=shift) for shift in shifts]
                record["sensitivity"].append(max_sensitivity(base, perturbed, rows.mask))
            for key, values in complexity(base, rows.mask).items():
                record[key].append(values)
            record["degenerate"].append(degenerate(base, rows.mask))
            if evidence is not None:
                for key, values in localisation(base, rows.mask, evidence).items():
                    record[key].append(values)
    return _summarise(collected, stages, radius, samples, limit)


def _summarise(collected: dict, stages: list, radius: float, samples: int, limit: int) -> dict:
    def mean(parts):
        values = np.concatenate(parts) if parts else np.zeros(0)
        return round(float(np.mean(values)), 4) if values.size else None

    summary = {}
    for method, record in collected.items():
        correlations = {label: mean(parts) for label, parts in record["spearman"].items()}
        full = correlations[stages[-1][0]]
        degenerate_share = mean(record["degenerate"])
        summary[method] = {
            "randomisation_spearman": correlations,
            "randomisation_flagged": full is not None and full >= RANDOMISATION_FLAG,
            "max_sensitivity": mean(record["sensitivity"]),
            "entropy": mean(record["entropy"]),
            "sparseness": mean(record["sparseness"]),
            "degenerate": degenerate_share,
            "degenerate_flagged": degenerate_share is not None and degenerate_share >= DEGENERATE_FLAG,
            "pointing_game": mean(record["pointing_game"]),
            "top_k_hit": mean(record["top_k_hit"]),
            "rows": int(sum(len(p) for p in record["degenerate"])),
            "localised_rows": int(sum(len(p) for p in record["pointing_game"])),
        }
    summary["settings"] = {"randomisation_flag": RANDOMISATION_FLAG, "degenerate_flag": DEGENERATE_FLAG,
                           "sensitivity_radius": radius, "sensitivity_samples": samples, "limit": limit}
    return summary


def markdown(summary: dict) -> str:
    """The checks as a Markdown table, a row per method."""
    lines = ["| method | randomisation ρ (all re-initialised) | max-sensitivity | entropy | sparseness | "
             "degenerate | pointing game | top-k hit |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def cell(value, flagged=False):
        text = "–" if value is None else f"{value:.3f}"
        return f"**{text}** ⚑" if flagged else text

    for method, r in summary.items():
        if method == "settings":
            continue
        full = list(r["randomisation_spearman"].values())[-1]
        lines.append(f"| {method} | {cell(full, r['randomisation_flagged'])} | {cell(r['max_sensitivity'])} | "
                     f"{cell(r['entropy'])} | {cell(r['sparseness'])} | {cell(r['degenerate'], r['degenerate_flagged'])} "
                     f"| {cell(r['pointing_game'])} | {cell(r['top_k_hit'])} |")
    return "\n".join(lines) + "\n"


def html_table(summary: dict) -> str:
    """The checks as an HTML section for the report."""
    import html

    rows = markdown(summary).splitlines()
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c.strip()).replace('**', '')}</td>" for c in row.strip("|").split("|"))
        + "</tr>" for row in rows[2:])
    return (f"<h2>Sanity checks</h2><p>⚑: the randomisation correlation is at least {RANDOMISATION_FLAG} (the "
            f"attributions barely change when every parameter is re-initialised), or at least {DEGENERATE_FLAG:.0%} "
            "of the predictions get the same score at every position (an arbitrary ranking).</p><table><tr>"
            + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>" + body + "</table>")
