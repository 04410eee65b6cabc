"""The synthetic box data of the input-cell attention paper (Ismail et al., 2019).

An example is a map of T x N = 100 x 100 cells (time steps x features) of N(0, 1) noise with a
label y in {-1, +1}, each with probability 1/2. The cells inside the example's box(es) are drawn
from N(y, 1) instead: the label can be read only there, so the boxes are the ground truth an
attribution method should find. Labels are returned as classes {0, 1} (y = -1 -> 0, +1 -> 1).

Boxes are [start, end) in time and in features, at T x N = 100 x 100:

    earlier        t 0-30,  f 10-90
    middle         t 20-80, f 20-80
    latter         t 70-100, f 10-90
    three_earlier  t 0-40,  f 0-30, 35-65 and 70-100 (three boxes at the same times)
    three_middle   t 25-65, the same three feature ranges
    mixed          one of 7 boxes of 60 x 60, chosen uniformly per example: t 5-65 or t 35-95
                   with f 5-65, 35-95 or 20-80, or t 20-80 with f 20-80
    moving         t s-(s+60), f 20-80, for s in 0, 10, 20, 30, 40, the same number of
                   examples at each start

A map of another size (e.g. 20 x 20 for quick tests) scales every coordinate by T / 100 or
N / 100, rounded to the nearest integer (halves up).

Train and test sets have 1000 and 300 examples, except mixed (8000 and 1000) and moving (1000 and
200 per start: 5000 and 1000).
"""

import dataclasses

import numpy as np

from jcaps.choices import check_choice

BOX_NAMES = ("earlier", "middle", "latter", "mixed", "three_earlier", "three_middle", "moving")
SPLITS = ("train", "test")

# The layouts of each dataset at 100 x 100: a layout is a list of boxes, a box a pair of
# [start, end) ranges (time, features). An example has one layout, drawn uniformly for mixed and
# in equal shares for moving.
_SIZE = 100
_THREE_FEATURE_RANGES = ((0, 30), (35, 65), (70, 100))
_LAYOUTS = {
    "earlier": [[((0, 30), (10, 90))]],
    "middle": [[((20, 80), (20, 80))]],
    "latter": [[((70, 100), (10, 90))]],
    "three_earlier": [[((0, 40), features) for features in _THREE_FEATURE_RANGES]],
    "three_middle": [[((25, 65), features) for features in _THREE_FEATURE_RANGES]],
    "mixed": [[(times, features)] for times in ((5, 65), (35, 95)) for features in ((5, 65), (35, 95), (20, 80))]
    + [[((20, 80), (20, 80))]],
    "moving": [[((start, start + 60), (20, 80))] for start in (0, 10, 20, 30, 40)],
}
_DEFAULT_NUM_EXAMPLES = {
    "mixed": {"train": 8000, "test": 1000},
    "moving": {"train": 5000, "test": 1000},
}
_STANDARD_NUM_EXAMPLES = {"train": 1000, "test": 300}


@dataclasses.dataclass
class BoxData:
    """Examples of one box dataset.

    Attributes:
        series: float32 [n, T, N], time-major.
        labels: int32 [n], classes 0 (y = -1) and 1 (y = +1).
        masks: bool [n, T, N], True inside each example's own box(es).
        layouts: int32 [n], each example's index into `box_regions(name, T, N)`.
    """

    series: np.ndarray
    labels: np.ndarray
    masks: np.ndarray
    layouts: np.ndarray


def _check_name(name: str) -> None:
    if name not in BOX_NAMES:
        raise ValueError(f"unknown box dataset {name!r}; known: {', '.join(BOX_NAMES)}")


def _scale(coordinate: int, size: int) -> int:
    """A coordinate on the 100-cell axis moved to a `size`-cell axis, rounded half up."""
    # Integer arithmetic: float rounding would turn e.g. 65 * 0.2 into 13.000000000000002.
    return (coordinate * size + _SIZE // 2) // _SIZE


def box_regions(name: str, time_steps: int = 100, num_features: int = 100) -> list[list[tuple[slice, slice]]]:
    """The possible box layouts of a dataset: each a list of `(time slice, feature slice)` boxes.

    Mixed has 7 layouts, moving 5 (in order of start), the others one, of one or three boxes.

    Raises:
        ValueError: an unknown name, or a map so small that a box would be empty.
    """
    _check_name(name)
    layouts = []
    for layout in _LAYOUTS[name]:
        boxes = []
        for (time_start, time_end), (feature_start, feature_end) in layout:
            times = slice(_scale(time_start, time_steps), _scale(time_end, time_steps))
            features = slice(_scale(feature_start, num_features), _scale(feature_end, num_features))
            if times.start == times.stop or features.start == features.stop:
                raise ValueError(f"a {time_steps} x {num_features} map is too small for the {name!r} boxes")
            boxes.append((times, features))
        layouts.append(boxes)
    return layouts


def default_num_examples(name: str, split: str) -> int:
    """The number of examples of a dataset's split (e.g. 1000 for `("earlier", "train")`)."""
    _check_name(name)
    check_choice("split", split, SPLITS)
    return _DEFAULT_NUM_EXAMPLES.get(name, _STANDARD_NUM_EXAMPLES)[split]


def generate_boxes(
    name: str,
    split: str,
    seed: int,
    *,
    num_examples: int | None = None,
    time_steps: int = 100,
    num_features: int = 100,
) -> BoxData:
    """Draws a split of a box dataset; the same arguments give the same data.

    Args:
        name: one of `BOX_NAMES`.
        split: "train" or "test"; they are drawn independently for one seed.
        seed: the random seed.
        num_examples: n, by default `default_num_examples(name, split)`. For moving, the layouts are
            shared out as evenly as n allows.
        time_steps: T; other sizes than 100 scale the boxes (see the module's docstring).
        num_features: N, likewise.

    Raises:
        ValueError: an unknown name or split, n < 1, a map too small for the boxes.
    """
    layouts = box_regions(name, time_steps, num_features)
    if num_examples is None:
        num_examples = default_num_examples(name, split)
    check_choice("split", split, SPLITS)
    if num_examples < 1:
        raise ValueError(f"num_examples must be positive, not {num_examples}")
    # One stream per (dataset, split): train and test, and different datasets, never share draws.
    spawn_key = (BOX_NAMES.index(name), SPLITS.index(split))
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=spawn_key))

    layout_masks = np.zeros((len(layouts), time_steps, num_features), dtype=bool)
    for mask, layout in zip(layout_masks, layouts):
        for times, features in layout:
            mask[times, features] = True
    if name == "moving":
        layout_indices = rng.permutation(np.arange(num_examples) % len(layouts))
    else:
        layout_indices = rng.integers(len(layouts), size=num_examples)
    labels = rng.integers(2, size=num_examples)
    masks = layout_masks[layout_indices]
    series = rng.standard_normal((num_examples, time_steps, num_features), dtype=np.float32)
    shifts = (2 * labels - 1).astype(np.float32)  # y in {-1, +1}
    # In place where the mask is set: a product with the mask would need a second full-size array.
    np.add(series, shifts[:, None, None], out=series, where=masks)
    return BoxData(
        series=series,
        labels=labels.astype(np.int32),
        masks=masks,
        layouts=layout_indices.astype(np.int32),
    )
