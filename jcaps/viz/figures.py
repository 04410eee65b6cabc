"""Matplotlib figures written straight to files.

Figures are built with `matplotlib.figure.Figure`, which renders through the Agg backend without
touching pyplot's global state, so plotting works headless and from worker threads.
"""

import os
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

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
    axes.set_title(title)
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
    figure.savefig(path, format="png", dpi=100)
    return str(path)
