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
  * box localisation (Ismail et al. 2019), for the maps [B, T, N] of a series model on the box
    data, whose class signal lives inside known boxes: with R the box mask (1 inside) and S the
    |map| min-max scaled to [0, 1] per example, the weighted Jaccard sum min(R, S) / sum max(R, S)
    (1 when S = R, higher is better), the Euclidean distance ||R - S||_2 / ||R||_2 (0 when S = R,
    1 when S = 0) and the ROC-AUC of S as a score for R (the Mann-Whitney U statistic, ties
    counted as 1/2); `box_metrics` averages them over a batch.

The array functions are NumPy; `sanity_checks` runs them on any model (the `f`, `x`, `args` and
`mask` of `jcaps.attribution.METHODS`), `jcaps.interpret.checks.check_workdir` on a trained
workdir; both return the summary `html_table` and the reports show.

Reference (box data and metrics): Ismail, Gunady, Pessoa, Corrada Bravo, Feizi. Input-Cell
Attention Reduces Vanishing Saliency of Recurrent Neural Networks. NeurIPS 2019, Sec. 5.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.attribution import _arguments as arguments
from jcaps.attribution.methods import METHODS
from jcaps.viz.html import checks_markdown

RANDOMISATION_FLAG = 0.5
DEGENERATE_FLAG = 0.5
# Methods that are functions of the input vectors (max-sensitivity perturbs those).


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
        out[r] = np.corrcoef(*_average_ranks(np.stack([x, y])))[0, 1]
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


def ranks_nothing(values) -> bool:
    """Whether one example's scores at its real positions (at least two) are all the same, to
    1e-6 of the largest."""
    values = np.asarray(values, np.float64)
    scale = max(float(np.abs(values).max(initial=0.0)), 1e-12)
    return len(values) >= 2 and float(np.ptp(values)) <= 1e-6 * scale


def degenerate(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[R] True where the scores are the same at every real position (at least two of them)."""
    return np.array([ranks_nothing(scores[r][mask[r]]) for r in range(len(scores))], bool)


def degenerate_shares(rows_by_method: Mapping[str, Sequence[Sequence[float]]]) -> dict[str, float]:
    """{method: the share of its rows (one example's scores at its real positions each) that rank
    nothing (`ranks_nothing`)}, among the rows of at least two positions (0 when there are none)."""
    shares = {}
    for method, rows in rows_by_method.items():
        counted = [ranks_nothing(row) for row in rows if len(row) >= 2]
        shares[method] = float(np.mean(counted)) if counted else 0.0
    return shares


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


# ---------------------------------------------------------------------------------------------
# Box localisation (Ismail et al. 2019)
# ---------------------------------------------------------------------------------------------


def _flat_scaled_maps_and_boxes(maps: np.ndarray, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Min-max scaled |maps| S and box masks R, flattened per example.

    Args:
      maps: [B, T, N] saliency maps (any sign).
      boxes: [T, N] or [B, T, N], 1 inside the boxes and 0 elsewhere.

    Returns:
      scaled: [B, T * N] float64 in [0, 1]; all zeros for a constant |map|.
      boxes: [B, T * N] float64.
    """
    magnitudes = np.abs(np.asarray(maps, dtype=np.float64))
    boxes = np.asarray(boxes, dtype=np.float64)
    if boxes.shape not in (magnitudes.shape, magnitudes.shape[1:]):
        raise ValueError(f"boxes must be shaped {magnitudes.shape[1:]} or {magnitudes.shape}, got {boxes.shape}.")
    boxes = np.broadcast_to(boxes, magnitudes.shape).reshape(magnitudes.shape[0], -1)
    magnitudes = magnitudes.reshape(boxes.shape)
    if not np.all(boxes.any(axis=1)):
        raise ValueError("every example needs a non-empty box mask.")
    low = magnitudes.min(axis=1, keepdims=True)
    value_range = magnitudes.max(axis=1, keepdims=True) - low
    # A constant map carries no location: it scales to zeros rather than 0 / 0.
    scaled = np.where(value_range > 0, (magnitudes - low) / np.where(value_range > 0, value_range, 1), 0.0)
    return scaled, boxes


def weighted_jaccard(maps: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Weighted Jaccard similarity sum min(R, S) / sum max(R, S) per example.

    Args:
      maps: [B, T, N] saliency maps; S is |map| min-max scaled per example.
      boxes: R, [T, N] or [B, T, N], 1 inside the boxes and 0 elsewhere; never all zero.

    Returns:
      [B] float64 in [0, 1]; 1 when S = R.
    """
    scaled, boxes = _flat_scaled_maps_and_boxes(maps, boxes)
    return np.minimum(boxes, scaled).sum(axis=1) / np.maximum(boxes, scaled).sum(axis=1)


def euclidean_distance(maps: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Relative Euclidean distance ||R - S||_2 / ||R||_2 per example.

    Args:
      maps: [B, T, N] saliency maps; S is |map| min-max scaled per example.
      boxes: R, [T, N] or [B, T, N], 1 inside the boxes and 0 elsewhere; never all zero.

    Returns:
      [B] float64, non-negative; 0 when S = R and 1 when S = 0.
    """
    scaled, boxes = _flat_scaled_maps_and_boxes(maps, boxes)
    return np.linalg.norm(boxes - scaled, axis=1) / np.linalg.norm(boxes, axis=1)


def _average_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks of each row's entries, tied entries sharing the mean of their ranks.

    Args:
      scores: [B, D].

    Returns:
      [B, D] float64 ranks.
    """
    order = np.argsort(scores, axis=1, kind="stable")
    ordered = np.take_along_axis(scores, order, axis=1)
    position = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    differs_from_next = ordered[:, 1:] != ordered[:, :-1]
    first_of_group = np.concatenate([np.ones_like(differs_from_next[:, :1]), differs_from_next], axis=1)
    last_of_group = np.concatenate([differs_from_next, np.ones_like(differs_from_next[:, :1])], axis=1)
    # The first (last) position of each sorted entry's tie group: a running max from the left
    # over group starts, a running min from the right over group ends.
    group_start = np.maximum.accumulate(np.where(first_of_group, position, 0), axis=1)
    group_end = np.minimum.accumulate(np.where(last_of_group, position, scores.shape[1])[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(scores.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, (group_start + group_end) / 2 + 1, axis=1)
    return ranks


def roc_auc(maps: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """ROC-AUC of S as a score for the cells inside the boxes, per example.

    The Mann-Whitney form: the probability that a random cell inside the boxes scores above a
    random cell outside, ties counting 1/2, from the average ranks of the scores (O(D log D) for
    D = T * N cells, where pairwise comparison would take D^2).

    Args:
      maps: [B, T, N] saliency maps; S is |map| min-max scaled per example.
      boxes: R, [T, N] or [B, T, N], 1 (nonzero) inside the boxes and 0 elsewhere; every example
        needs cells both inside and outside.

    Returns:
      [B] float64 in [0, 1]; 1 when every box cell outscores every other cell, 0.5 for a
      constant map.
    """
    scaled, boxes = _flat_scaled_maps_and_boxes(maps, boxes)
    inside = boxes != 0
    n_inside = inside.sum(axis=1)
    n_outside = inside.shape[1] - n_inside
    if not np.all(n_outside > 0):
        raise ValueError("roc_auc needs cells outside the boxes in every example.")
    rank_sum_inside = np.where(inside, _average_ranks(scaled), 0.0).sum(axis=1)
    u_statistic = rank_sum_inside - n_inside * (n_inside + 1) / 2
    return u_statistic / (n_inside * n_outside)


def box_metrics(maps: np.ndarray, boxes: np.ndarray) -> dict[str, float]:
    """The three box metrics averaged over the batch.

    Args:
      maps: [B, T, N] saliency maps.
      boxes: [T, N] or [B, T, N] box masks, 1 inside the boxes.

    Returns:
      {"wjac": weighted Jaccard, "euclidean": relative Euclidean distance, "auc": ROC-AUC}.
    """
    return {
        "wjac": float(np.mean(weighted_jaccard(maps, boxes))),
        "euclidean": float(np.mean(euclidean_distance(maps, boxes))),
        "auc": float(np.mean(roc_auc(maps, boxes))),
    }


def max_sensitivity(base: np.ndarray, perturbed: list[np.ndarray], mask: np.ndarray) -> np.ndarray:
    """[R] max over the perturbed attributions of ||A' - A|| / ||A|| over the real positions."""
    norm = np.maximum(np.linalg.norm(np.where(mask, base, 0.0), axis=-1), 1e-12)
    ratios = [np.linalg.norm(np.where(mask, p - base, 0.0), axis=-1) / norm for p in perturbed]
    return np.max(np.stack(ratios), axis=0)


# ---------------------------------------------------------------------------------------------
# On any model.
# ---------------------------------------------------------------------------------------------


def sanity_checks(
    f: Callable[..., jax.Array],
    x,
    target,
    *,
    methods: Sequence[str],
    mask=None,
    args=(),
    key=None,
    baseline=None,
    randomised: Sequence[tuple[str, Callable[..., jax.Array]]] = (),
    evidence=None,
    radius: float = 0.05,
    samples: int = 4,
    seed: int = 0,
    method_options: Mapping[str, Mapping] | None = None,
) -> dict:
    """Every check of `methods` (names in `jcaps.interpret.METHODS`) on the batch x [B, T, ...]
    of the model f(x, *args) -> [B, C], explaining `target` ([B] ints, or one).

    `randomised`: ((label, f_randomised), ...), the model with its parameters re-initialised
    from the output down, the last with all of them (the randomisation check; none: skipped).
    `evidence`: [B, T] bool, the positions known to carry the evidence of each example's target
    (the localisation check; None: skipped). Max-sensitivity draws `samples` uniform shifts of
    `radius` times each example's standard deviation (NumPy, from `seed`). `key`, `baseline` and
    `method_options` ({method: options}) are passed to the methods. Returns
    {method: {check: mean, ...}, "settings": {...}}, as `check_workdir` does."""
    arguments.checked_model(f)
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"x: expected inputs [B, T, ...] (T positions), got shape {x.shape}")
    batch, length = x.shape[:2]
    target = jnp.broadcast_to(arguments.checked_target(target, batch, several=False), (batch,))
    mask = arguments.checked_mask(mask, batch, length)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods: expected names in interpret.METHODS ({', '.join(METHODS)}), got {list(methods)}")
    for label, model in randomised:
        if not callable(model):
            raise TypeError(f"randomised: expected (label, model) pairs, got {label!r} with {type(model).__name__}")
    if evidence is not None:
        evidence = np.asarray(evidence)
        if evidence.shape != (batch, length) or evidence.dtype != bool:
            raise ValueError(
                f"evidence: expected bool [B, T] = [{batch}, {length}], got {evidence.dtype} {evidence.shape}"
            )
    options = dict(method_options or {})

    def scores(method: str, model, inputs) -> np.ndarray:
        run = METHODS[method].function
        return np.asarray(
            run(model, inputs, target, mask=mask, args=args, key=key, baseline=baseline, **options.get(method, {}))
        )

    rng = np.random.default_rng(seed)
    spread = np.std(np.asarray(x, np.float32).reshape(batch, -1), axis=-1).reshape((batch,) + (1,) * (x.ndim - 1))
    shifts = [rng.uniform(-1.0, 1.0, x.shape).astype(np.float32) * radius * spread for _ in range(samples)]
    real = np.asarray(mask)
    collected: dict[str, dict[str, Any]] = {}
    for method in methods:
        base = scores(method, f, x)
        record: dict[str, Any] = {
            "spearman": {label: [spearman(base, scores(method, model, x), real)] for label, model in randomised},
            "sensitivity": [],
            "degenerate": [degenerate(base, real)],
            "pointing_game": [],
            "top_k_hit": [],
            "localised_class": [],
            **{check: [values] for check, values in complexity(base, real).items()},
        }
        if METHODS[method].of_inputs:
            perturbed = [scores(method, f, x + jnp.asarray(shift, x.dtype)) for shift in shifts]
            record["sensitivity"].append(max_sensitivity(base, perturbed, real))
        if evidence is not None:
            for check, values in localisation(base, real, evidence).items():
                record[check].append(values)
            targets = np.asarray(target)
            record["localised_class"].append(
                np.array([str(targets[r]) for r in range(batch) if evidence[r][real[r]].any()], object)
            )
        collected[method] = record
    return _summarise(collected, list(randomised), radius, samples, batch)


def pointing_per_class(pointing: list[np.ndarray], classes: list[np.ndarray]) -> dict[str, float]:
    """{class: share of its localised rows whose top-ranked position is evidence}, from the
    per-batch pointing-game values and the explained class of each of those rows."""
    if not pointing:
        return {}
    hits, names = np.concatenate(pointing), np.concatenate(classes)
    return {str(name): round(float(np.mean(hits[names == name])), 4) for name in sorted(set(names.tolist()))}


def _summarise(collected: dict, stages: list, radius: float, samples: int, limit: int) -> dict:
    def mean(parts):
        values = np.concatenate(parts) if parts else np.zeros(0)
        return round(float(np.mean(values)), 4) if values.size else None

    summary = {}
    for method, record in collected.items():
        correlations = {label: mean(parts) for label, parts in record["spearman"].items()}
        full = correlations[stages[-1][0]] if stages else None
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
            # A model can be right about a class without its evidence (e.g. by the absence of the
            # other classes' keywords): a per-class pointing game shows it where the mean hides it.
            "pointing_game_per_class": pointing_per_class(record["pointing_game"], record["localised_class"]),
        }
    summary["settings"] = {
        "randomisation_flag": RANDOMISATION_FLAG,
        "degenerate_flag": DEGENERATE_FLAG,
        "sensitivity_radius": radius,
        "sensitivity_samples": samples,
        "limit": limit,
    }
    return summary


def html_table(summary: dict) -> str:
    """The checks as an HTML section for the report."""
    import html

    rows = checks_markdown(summary).splitlines()
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(c.strip()).replace('**', '')}</td>" for c in row.strip("|").split("|"))
        + "</tr>"
        for row in rows[2:]
    )
    return (
        f"<h2>Sanity checks</h2><p>⚑: the randomisation correlation is at least {RANDOMISATION_FLAG} (the "
        f"attributions barely change when every parameter is re-initialised), or at least {DEGENERATE_FLAG:.0%} "
        "of the predictions get the same score at every position (an arbitrary ranking).</p><table><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in header)
        + "</tr>"
        + body
        + "</table>"
    )
