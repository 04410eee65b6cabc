"""Splits as random-access sources: what preparation opens and the datasets encode.

A split's `source[i]` is a dict like a TFDS example: the features of its format and the 1-based
`line` of the file it came from, so that a problem found later still names the file and line.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np


@dataclasses.dataclass
class Split:
    """One split: a random-access source and the file its examples came from (for errors),
    with what `data.drop_bad_rows` left out of that file (`{"file", "count", "first"}`).

    `key` names the examples of `source` for the split's encoded rows on disk
    (`jcaps.data.encoded`): the prepared folder and split they were read from, and the indices of
    a part carved out of them; '' for a source of unknown origin, which is encoded in memory."""

    source: Any
    path: str
    dropped: dict | None = None
    key: str = ""

    def subset(self, indices: np.ndarray, dropped: dict | None = None) -> Split:
        """The examples `indices` of this split, as a split of their own."""
        indices = np.asarray(indices, np.int64)
        key = f"{self.key}[{hashlib.sha256(indices.tobytes()).hexdigest()[:16]}]" if self.key else ""
        return Split(Subset(self.source, indices), self.path, dropped, key)


@dataclasses.dataclass
class PreparedSplits:
    """The splits of a prepared source, before validation is carved.

    Attributes:
        splits: by name (`train`, `test`, and `validation` when the source has one).
        class_names: when the source fixes the classes (integer labels); None for string labels.
        text_keys: the features whose texts, joined by a space, are an example's text (text only).
    """

    splits: dict[str, Split]
    class_names: list[str] | None
    text_keys: tuple[str, ...] = ()


class Subset:
    """A random-access view of `source` restricted to `indices` (validation carving)."""

    def __init__(self, source, indices: np.ndarray):
        self._source = source
        self._indices = np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i: int):
        return self._source[int(self._indices[i])]


class InMemorySplit:
    """Random access to a series split loaded once: `[i]` is a dict like the TFDS example."""

    def __init__(self, series: list[np.ndarray], labels: np.ndarray, lines: np.ndarray):
        self.series, self.labels, self.lines = series, labels, lines

    @classmethod
    def read(cls, source) -> InMemorySplit:
        examples = [source[i] for i in range(len(source))]
        return cls(
            [np.asarray(e["series"], np.float32) for e in examples],
            np.asarray([e["label"] for e in examples], np.int32),
            np.asarray([e["line"] for e in examples], np.int32),
        )

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"series": self.series[i], "label": self.labels[i], "line": self.lines[i]}


def carve_validation(train: Split, fraction: float, seed: int, group_key: str = "") -> dict[str, Split]:
    """Splits `train` into train and validation by a seeded permutation: of its examples, or,
    with `group_key`, of its groups (the values of that feature), so that examples of one group
    (sibling packages with near-identical descriptions, say) never fall on both sides.

    By groups, whole groups are taken in the permuted order until `fraction` of the examples is
    reached: the validation part holds at least that many examples, and at most one group more.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"data.validation_fraction must be in [0, 1), not {fraction}")
    rng = np.random.default_rng(seed)
    num_validation = round(fraction * len(train.source))
    if group_key:
        validation = _whole_groups(group_ids(train.source, group_key), num_validation, rng)
    else:
        validation = np.zeros((len(train.source),), bool)
        validation[rng.permutation(len(train.source))[:num_validation]] = True
    return {
        "train": train.subset(np.flatnonzero(~validation), train.dropped),
        "validation": train.subset(np.flatnonzero(validation)),
    }


def group_ids(source, group_key: str) -> np.ndarray:
    """[n] int64: the group of each example of `source`, numbered in order of first appearance."""
    names = (source[i][group_key] for i in range(len(source)))
    numbering: dict = {}
    return np.fromiter((numbering.setdefault(name, len(numbering)) for name in names), np.int64, len(source))


def _whole_groups(groups: np.ndarray, num_validation: int, rng: np.random.Generator) -> np.ndarray:
    """[n] bool: the examples of whole groups, in a random order of groups, until at least
    `num_validation` examples are taken."""
    if num_validation == 0:
        return np.zeros(groups.shape, bool)
    sizes = np.bincount(groups)
    order = rng.permutation(len(sizes))
    taken = order[: int(np.searchsorted(np.cumsum(sizes[order]), num_validation)) + 1]
    return np.isin(groups, taken)
