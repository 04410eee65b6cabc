"""The sanity checks of `jcaps.attribution.checks` on a trained workdir (`check_workdir`): the
cascade of re-initialised parameters, the known evidence of the generated data, and every
method of the workdir's explainer, summarised as `sanity_checks` summarises them.
`sanity_checks` and `html_table` are `jcaps.attribution.checks`'s, named here too."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import jax
import numpy as np

from jcaps.attribution.checks import (
    _summarise,
    complexity,
    degenerate,
    html_table,
    localisation,
    max_sensitivity,
    sanity_checks,
    spearman,
)
from jcaps.attribution.methods import METHODS
from jcaps.interpret.explain import Explainer, position_words, true_labels
from jcaps.interpret.options import Options

__all__ = ["check_workdir", "html_table", "sanity_checks"]


def _of_inputs(method: str) -> bool:
    """Whether `method`'s scores are a function of the input vectors (max-sensitivity perturbs
    them): a method of the table that says so (`Method.of_inputs`); a model's own explanation
    reads its parameters and tokens, not the vectors."""
    return method in METHODS and METHODS[method].of_inputs


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
    out: list[tuple[str, object]] = []
    for count in stages:
        replaced = names[len(names) - count :]
        # On the devices of the trained parameters (replicated over the mesh), so that one
        # computation does not mix arrays of one device with arrays of several.
        params = {
            name: jax.tree.map(lambda new, old: jax.device_put(new, old.sharding), fresh[name], trained.params[name])
            if name in replaced
            else trained.params[name]
            for name in names
        }
        label = "all" if count == len(names) else f"last {count} of {len(names)} ({', '.join(replaced)})"
        out.append((label, params))
    return out


def evidence_positions(trained, rows, explainer_words, true_names) -> np.ndarray | None:
    """[R, P] True at the positions holding a keyword of the explained class when it is a true
    one (a correct prediction), for the generated data of the `:smoke` configs; None for any
    other data."""
    from jcaps.data import synthetic

    if trained.config.data.get("source") != "synthetic" or trained.family.kind != "text":
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
                    marked[match.start() : match.end()] = True
            per_position.append(marked)
        else:
            per_position.append(np.array([w is not None and w.lower() in keywords for w in words]))
    return np.stack(per_position)


def _row_words(trained, split: str, batch: dict, rows, inputs, r: int):
    """The words at the positions of explained row `r` of `batch`."""
    index = int(batch["index"][rows.example[r]])
    return position_words(trained, split, index, np.asarray(inputs[rows.example[r]]))


def _row_true_names(trained, batch: dict, rows, r: int) -> list:
    """The true class name(s) of explained row `r` of `batch`, as a list."""
    label = true_labels(trained, batch, rows.example[r])
    return label if isinstance(label, list) else [label]


def check_workdir(
    trained,
    split: str,
    methods: tuple[str, ...],
    *,
    limit: int,
    options: Options = Options(),
    batch_size: int = 32,
    seed: int = 0,
    radius: float = 0.05,
    samples: int = 4,
) -> dict:
    """Every check of `methods` on the first `limit` examples of `split` (module docstring):
    {method: {check: mean, ...}, "settings": {...}}."""
    explainer = Explainer(trained, options, seed=seed)
    stages = cascade(trained, seed + 1)
    rng = np.random.default_rng(seed)
    collected: dict[str, dict[str, Any]] = {
        m: {
            "spearman": {label: [] for label, _ in stages},
            "sensitivity": [],
            "entropy": [],
            "sparseness": [],
            "degenerate": [],
            "pointing_game": [],
            "top_k_hit": [],
            "localised_class": [],
        }
        for m in methods
    }
    is_text = trained.family.kind == "text"
    for batch in trained.dataset.eval_batches(split, batch_size, limit=limit):
        rows = explainer.rows(batch)
        if rows is None:
            continue
        inputs = batch["tokens"] if is_text else batch["series"]
        evidence = evidence_positions(
            trained,
            rows,
            functools.partial(_row_words, trained, split, batch, rows, inputs),
            functools.partial(_row_true_names, trained, batch, rows),
        )
        vectors = explainer.vectors(rows)
        spread = np.std(vectors.reshape(len(vectors), -1), axis=-1)[:, None, None]
        shifts = [rng.uniform(-1.0, 1.0, vectors.shape).astype(np.float32) * radius * spread for _ in range(samples)]
        for method in methods:
            # A method of the input vectors scores them unshifted with a zero shift (the vectors
            # + 0 are the vectors): the perturbed calls below then reuse that call's compilation.
            unshifted = {} if not _of_inputs(method) else {"shift": np.zeros_like(shifts[0] if shifts else vectors)}
            base = explainer.rows_scores(rows, method, **unshifted)
            record = collected[method]
            for label, params in stages:
                record["spearman"][label].append(
                    spearman(base, explainer.rows_scores(rows, method, params=params, **unshifted), rows.mask)
                )
            if _of_inputs(method):
                perturbed = [explainer.rows_scores(rows, method, shift=shift) for shift in shifts]
                record["sensitivity"].append(max_sensitivity(base, perturbed, rows.mask))
            for key, values in complexity(base, rows.mask).items():
                record[key].append(values)
            record["degenerate"].append(degenerate(base, rows.mask))
            if evidence is not None:
                for key, values in localisation(base, rows.mask, evidence).items():
                    record[key].append(values)
                # The explained class of each localised row (those with evidence, in order).
                record["localised_class"].append(
                    np.array([rows.target_name[r] for r in range(len(base)) if evidence[r][rows.mask[r]].any()], object)
                )
    return _summarise(collected, stages, radius, samples, limit)
