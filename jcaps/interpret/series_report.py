"""Saliency maps of a trained sequence model (the input-cell attention LSTM and its baselines).

`attribution_maps(trained, batch, method)` returns one [T, N] map per example of a batch, for
the true class; `saliency_report(trained, ...)` writes PNG figures of a few examples and
`saliency.json` with, per example, the true and predicted class and the share of the saliency
that falls in each tenth of the series: the quantity whose decay over time the input-cell
paper is about (an LSTM's saliency piles up on the last steps).

The maps are those of `jcaps.attribution.methods` with every cell (step, feature) of the series a
position: they explain the model's raw class scores, and a padded step keeps its values.
"""

from __future__ import annotations

import functools
import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np

from jcaps import strict_json
from jcaps.attribution.methods import METHODS
from jcaps.choices import check_choice
from jcaps.errors import UserError
from jcaps.files import replacing
from jcaps.train.workdir import TrainedModel
from jcaps.viz.figures import plot_saliency_maps

# The input-cell paper's name for the gradient map; every other name is one of `METHODS`.
ALIASES = {"saliency": "gradient"}


@functools.partial(jax.jit, static_argnames=("model", "method"))
def _maps(model, params, series, mask, target, key, method: str):
    """[B, T, N] |scores| of `METHODS[method]` with every cell (step, feature) a position."""
    batch, steps, features = series.shape

    def scores_of_cells(cells, step_mask):  # [R, T * N, 1] -> [R, C]
        return model.apply({"params": params}, cells.reshape(-1, steps, features), step_mask, train=False).scores

    cells = series.reshape(batch, steps * features, 1)
    cell_mask = jnp.repeat(mask, features, axis=1)
    scores = METHODS[method].function(scores_of_cells, cells, target, mask=cell_mask, args=(mask,), key=key)
    return jnp.abs(scores).reshape(batch, steps, features)


def attribution_maps(trained: TrainedModel, batch: dict, method: str = "saliency", seed: int = 0) -> np.ndarray:
    """[B, T, N] absolute attributions of each example's true class (zero on padded steps), by a
    method of `METHODS` (or an alias of `ALIASES`) with each cell of the series a position."""
    check_choice("--methods: method", method, [*ALIASES, *METHODS], UserError)
    name = ALIASES.get(method, method)
    return np.asarray(
        _maps(
            trained.model,
            trained.params,
            jnp.asarray(batch["series"]),
            jnp.asarray(batch["mask"]),
            jnp.asarray(batch["label"]),
            jax.random.key(seed),
            name,
        )
    )


def predictions(trained: TrainedModel, batch: dict) -> np.ndarray:
    return np.asarray(jnp.argmax(trained.apply(batch["series"], batch["mask"]).scores, axis=-1))


def saliency_by_time(maps: np.ndarray, mask: np.ndarray, bins: int = 10) -> np.ndarray:
    """[B, bins]: the share of each example's total |saliency| in each 1/bins of its valid steps."""
    shares = np.zeros((len(maps), bins))
    for b, (m, valid) in enumerate(zip(maps, mask)):
        per_step = np.abs(m[valid]).sum(axis=-1)
        edges = np.linspace(0, len(per_step), bins + 1).astype(int)
        sums = np.array([per_step[lo:hi].sum() for lo, hi in itertools.pairwise(edges)])
        shares[b] = sums / max(per_step.sum(), 1e-30)
    return shares


def saliency_report(
    trained: TrainedModel,
    split: str,
    out: str,
    limit: int = 8,
    methods: tuple[str, ...] = ("saliency", "integrated_gradients"),
) -> dict:
    """Figures and `saliency.json` of a trained series model (`load_trained(..., with_data=True)`)
    for the first `limit` examples of `split`, in `out`; returns the summary."""
    if trained.family.kind != "series":
        raise UserError(f"a {trained.config.model.name} model reads text: saliency maps are for series models")
    os.makedirs(out, exist_ok=True)
    names = trained.dataset.labels.names
    records = []
    for batch in trained.dataset.eval_batches(split, min(limit, 64), limit=limit):
        real = batch["weight"] > 0
        maps = {method: attribution_maps(trained, batch, method) for method in methods}
        predicted = predictions(trained, batch)
        shares = saliency_by_time(maps[methods[0]], batch["mask"])
        for b in np.flatnonzero(real):
            index = int(batch["index"][b])
            true, guess = names[batch["label"][b]], names[predicted[b]]
            steps = int(batch["mask"][b].sum())
            figure = plot_saliency_maps(
                batch["series"][b, :steps],
                {method: maps[method][b, :steps] for method in methods},
                os.path.join(out, f"{split}_{index}.png"),
                title=f"{split} example {index}: class {true}, predicted {guess}",
            )
            records.append(
                {
                    "index": index,
                    "label": true,
                    "predicted": guess,
                    "figure": os.path.basename(figure),
                    "saliency_share_by_tenth": shares[b].round(4).tolist(),
                }
            )
    summary = {
        "split": split,
        "methods": list(methods),
        "examples": records,
        "mean_share_by_tenth": np.mean([r["saliency_share_by_tenth"] for r in records], axis=0).round(4).tolist(),
    }
    with replacing(os.path.join(out, "saliency.json")) as f:
        strict_json.dump(summary, f, indent=2)
    return summary
