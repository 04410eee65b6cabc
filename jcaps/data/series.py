"""Numeric sequence datasets (time series, images read row by row, the synthetic box data):
splits held in memory as float32 arrays, standardised, and padded to buckets.

A batch is `series` [B, T, N] float32, `mask` [B, T] bool (True on real steps), `label` [B]
int32, `weight` [B] and `index` [B]; T is the batch's longest series rounded up to a bucket.

Standardisation (`data.normalize`), from the training part only and saved in the workdir:
`time_feature` (the paper's: mean and standard deviation of every (step, feature) cell over
the training series, which must then all have the same length), `feature` (per feature over
all valid steps: the choice for unequal lengths) or `none`.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from collections.abc import Sequence

import numpy as np

from jcaps.choices import check_choice
from jcaps.data import choices
from jcaps.data.batching import ExampleDataset, bucket_length, default_boundaries
from jcaps.data.encoded import EncodedRows
from jcaps.data.errors import DataError
from jcaps.data.splits import PreparedSplits, Split, carve_validation
from jcaps.data.vocab import LABELS_FILE, LabelMap
from jcaps.files import replace_file, replacing

STATS_FILE = "series_stats.npz"
FEATURES_FILE = "num_features.txt"


@dataclasses.dataclass(frozen=True)
class Standardizer:
    """`(x - mean) / std` with `mean`, `std` [T, N] (`time_feature`) or [1, N] (`feature`)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, series: Sequence[np.ndarray], kind: choices.Normalization, path: str) -> Standardizer | None:
        check_choice("data.normalize", kind, choices.Normalization)
        if kind == "none":
            return None
        if kind == "time_feature":
            lengths = {len(s) for s in series}
            if len(lengths) > 1:
                raise ValueError(
                    f"data.normalize='time_feature' needs training series of one length; {path} has lengths "
                    f"{min(lengths)}..{max(lengths)}: use data.normalize='feature'"
                )
            stacked = np.stack(series).astype(np.float64)
            mean, std = stacked.mean(axis=0), stacked.std(axis=0)
        else:
            steps = np.concatenate(series).astype(np.float64)
            mean, std = steps.mean(axis=0, keepdims=True), steps.std(axis=0, keepdims=True)
        # A constant cell (e.g. MNIST's border pixels) is only centred, not divided by zero.
        return cls(mean.astype(np.float32), np.where(std > 1e-8, std, 1.0).astype(np.float32))

    def __call__(self, series: np.ndarray, path: str, line: int) -> np.ndarray:
        if self.mean.shape[0] > 1:
            if len(series) > self.mean.shape[0]:
                raise DataError(
                    path,
                    line,
                    f"series of {len(series)} steps is longer than the {self.mean.shape[0]} "
                    "steps the per-step standardisation was fitted on",
                )
            return (series - self.mean[: len(series)]) / self.std[: len(series)]
        return (series - self.mean) / self.std

    def save(self, path: str) -> None:
        with replacing(path, "wb") as f:
            np.savez(f, mean=self.mean, std=self.std)

    @classmethod
    def load(cls, path: str) -> Standardizer | None:
        if not os.path.isfile(path):
            return None
        try:  # arrays only: a pickled object in the file is refused, never run
            with np.load(path, allow_pickle=False) as stats:
                return cls(np.asarray(stats["mean"], np.float32), np.asarray(stats["std"], np.float32))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise DataError(path, None, f"not a saved standardisation: {error}") from None


@dataclasses.dataclass
class SeriesDataset(ExampleDataset):
    """Splits of [T, N] float series with their labels and standardisation, ready to batch."""

    splits: dict[str, Split]
    labels: LabelMap
    num_features: int
    standardizer: Standardizer | None
    boundaries: tuple[int, ...]
    max_len: int  # 0: no limit

    @property
    def inputs_description(self) -> str:
        return f"{self.num_features} features"

    @property
    def model_input_size(self) -> int:
        return self.num_features

    def dummy_batch(self) -> dict[str, np.ndarray]:
        """A tiny batch of the right ranks for `model.init` (parameters do not depend on length)."""
        return {"series": np.zeros((1, 4, self.num_features), np.float32), "mask": np.ones((1, 4), bool)}

    def save_metadata(self, directory: str) -> None:
        replace_file(os.path.join(directory, FEATURES_FILE), str(self.num_features))
        if self.standardizer is not None:
            self.standardizer.save(os.path.join(directory, STATS_FILE))
        self.labels.save(os.path.join(directory, LABELS_FILE))  # last: it says the metadata is saved

    def encode_series(self, series: np.ndarray, path: str = "input", line: int = 1) -> np.ndarray:
        series = np.asarray(series, np.float32)
        if series.ndim != 2 or series.shape[1] != self.num_features:
            raise DataError(path, line, f"expected a [steps, {self.num_features}] series, got shape {series.shape}")
        if self.max_len and len(series) > self.max_len:
            raise DataError(path, line, f"series of {len(series)} steps is longer than data.max_len {self.max_len}")
        return self.standardizer(series, path, line) if self.standardizer is not None else series

    def encode(self, split: str, index: int, example: dict) -> dict:
        path = self.splits[split].path if split in self.splits else "input"
        series = self.encode_series(example["series"], path, int(example.get("line", index + 1)))
        return {"series": series, "label": np.int32(example["label"]), "index": np.int32(index)}

    def lengths(self, rows: EncodedRows) -> np.ndarray:
        return rows.sizes["series"][:, 0]

    def assemble(self, rows: EncodedRows, batch_size: int) -> dict:
        n = len(rows)
        lengths = self.lengths(rows) if n else np.zeros((0,), np.int32)
        longest = max(int(lengths.max(initial=0)), 1)
        steps = bucket_length(longest, self.boundaries, self.max_len or longest)
        series = np.zeros((batch_size, steps, self.num_features), np.float32)
        if n:
            kept = min(steps, rows.fields["series"].shape[1])
            series[:n, :kept] = rows.fields["series"][:, :kept]
        mask = np.arange(steps) < np.concatenate([lengths, np.zeros((batch_size - n,), lengths.dtype)])[:, None]
        padding = np.zeros((batch_size - n,), np.int32)
        return {
            "series": series,
            "mask": mask,
            "label": np.concatenate([rows.fields["label"] if n else padding[:0], padding]).astype(np.int32),
            "weight": np.concatenate([np.ones((n,), np.float32), np.zeros((batch_size - n,), np.float32)]),
            "index": np.concatenate([rows.fields["index"] if n else padding[:0], padding - 1]).astype(np.int32),
        }


def series_dataset(data_config, prepared: PreparedSplits, seed: int, saved_dir: str | None = None) -> SeriesDataset:
    """A `SeriesDataset` over the `prepared` splits: validation (and test, with
    `data.test_fraction`) carved from train, and the standardisation fitted on the training part,
    or read with the labels from `saved_dir` (a directory that holds saved metadata)."""
    splits = dict(prepared.splits)
    if "test" not in splits:
        carved = carve_validation(splits["train"], data_config.test_fraction, seed + 1)
        splits.update(train=carved["train"], test=carved["validation"])
    splits.update(carve_validation(splits["train"], data_config.validation_fraction, seed))
    train = splits["train"].source
    if saved_dir:
        labels = LabelMap.load(os.path.join(saved_dir, LABELS_FILE))
        standardizer = Standardizer.load(os.path.join(saved_dir, STATS_FILE))
    else:
        labels = LabelMap(tuple(prepared.class_names or ()))
        standardizer = Standardizer.fit(
            [train[i]["series"] for i in range(len(train))], data_config.normalize, splits["train"].path
        )
    lengths = [len(split.source[i]["series"]) for split in splits.values() for i in range(len(split.source))]
    return make_series_dataset(data_config, splits, labels, int(train[0]["series"].shape[1]), standardizer, lengths)


def make_series_dataset(data_config, splits, labels, num_features, standardizer, lengths=()) -> SeriesDataset:
    """A `SeriesDataset` over `splits`; without `lengths` (inference from a workdir, no splits)
    and without `data.max_len`, any length is accepted and padded to powers of two from 8."""
    max_len = data_config.max_len or max(lengths, default=0)
    if data_config.bucket_boundaries:
        boundaries = tuple(sorted(data_config.bucket_boundaries))
    elif lengths and len(set(lengths)) == 1:
        boundaries = (max_len,)  # equal lengths: one shape, no padding
    else:
        boundaries = default_boundaries(max_len or 2**20, smallest=8)
    return SeriesDataset(splits, labels, num_features, standardizer, boundaries, max_len)
