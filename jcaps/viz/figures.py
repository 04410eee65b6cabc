"""Matplotlib figures written straight to files.

Figures are built with `matplotlib.figure.Figure`, which renders through the Agg backend without
touching pyplot's global state, so plotting works headless and from worker threads.
"""

import os
import textwrap
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from jcaps.files import replacing

# Above this many cells the numbers would overlap; the colour bar carries the scale instead.
_MAX_ANNOTATED_CELLS = 400


def plot_capsule_heatmap(
    C: np.ndarray,
    class_names: Sequence[str],
    path: str | os.PathLike,
    title: str = "Examples per (predicted class, most-coupled capsule)",
) -> str:
    """Writes the global-interpretation count matrix C as a PNG heatmap.

    Args:
      C: [J, I] counts: row j = predicted class, column i = primary capsule.
      class_names: J row labels.
      path: where to write the PNG.
      title: figure title.

    Returns:
      `path` as a string.
    """
    with replacing(path, "wb") as file:
        capsule_heatmap_figure(C, class_names, title).savefig(file, format="png", dpi=100)
    return str(path)


def capsule_heatmap_figure(C: np.ndarray, class_names: Sequence[str], title: str) -> Figure:
    """The heatmap of `plot_capsule_heatmap` as a matplotlib Figure."""
    counts = np.asarray(C)
    num_classes, num_capsules = counts.shape
    if len(class_names) != num_classes:
        raise ValueError(f"{len(class_names)} class names for {num_classes} rows of C.")

    figure = Figure(
        figsize=(max(4.0, 1.0 + 0.35 * num_capsules), max(2.5, 1.2 + 0.4 * num_classes)), layout="constrained"
    )
    axes = figure.add_subplot()
    image = axes.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    figure.colorbar(image, ax=axes, label="examples", ticks=MaxNLocator(integer=True))
    # A narrow figure (few capsules) would cut a one-line title off at both sides: wrap it to the
    # figure's width (about 9 characters of 10-point text per inch).
    axes.set_title(textwrap.fill(title, max(16, int(9 * figure.get_figwidth())), break_on_hyphens=False), fontsize=10)
    axes.set_xlabel("primary capsule i")
    axes.set_ylabel("predicted class j")
    axes.set_xticks(np.arange(num_capsules))
    axes.set_yticks(np.arange(num_classes), labels=list(class_names))
    if counts.size <= _MAX_ANNOTATED_CELLS:
        # Light text on the dark low end of viridis, dark text on the bright high end.
        threshold = counts.max() / 2 if counts.size else 0
        for (row, column), value in np.ndenumerate(counts):
            axes.text(
                column,
                row,
                f"{value:g}",
                ha="center",
                va="center",
                fontsize=7,
                color="black" if value > threshold else "white",
            )
    return figure


def plot_saliency_maps(
    series: np.ndarray,
    maps: dict[str, np.ndarray],
    path: str | os.PathLike,
    title: str = "",
    box: np.ndarray | None = None,
) -> str:
    """Writes one example's input and its saliency maps side by side as a PNG.

    Args:
      series: [T, N] the (standardised) input, time along the x axis.
      maps: name -> [T, N] attribution map (absolute values are shown, each on its own scale).
      path: where to write the PNG.
      title: figure title (e.g. the true and predicted class).
      box: optional [T, N] bool mask of the informative cells, outlined on every panel.

    Returns:
      `path` as a string.
    """
    panels = [("input", np.asarray(series), "RdBu_r")] + [(name, np.abs(m), "magma") for name, m in maps.items()]
    figure = Figure(figsize=(3.2 * len(panels), 3.0), layout="constrained")
    for k, (name, values, cmap) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), k + 1)
        image = axes.imshow(values.T, aspect="auto", origin="lower", cmap=cmap, interpolation="nearest")
        figure.colorbar(image, ax=axes, shrink=0.8)
        if box is not None and box.any():
            axes.contour(np.asarray(box, float).T, levels=[0.5], colors="cyan", linewidths=0.8)
        axes.set_title(name, fontsize=9)
        axes.set_xlabel("time step")
        if k == 0:
            axes.set_ylabel("feature")
    if title:
        figure.suptitle(title, fontsize=10)
    with replacing(path, "wb") as file:
        figure.savefig(file, format="png", dpi=90)
    return str(path)
