"""Numeric sequences (time series, images read row by row, the synthetic box data) as datasets.

Formats (`data.format`):
    ts      UEA/UCR `.ts` files in `data.dir`: `NAME_TRAIN.ts` / `NAME_TEST.ts` (or the stems
            `data.train_file` / `data.test_file`); equal or unequal lengths.
    idx     MNIST idx-ubyte(.gz) files in `data.dir`: `{stem}-images-idx3-ubyte[.gz]` and
            `{stem}-labels-idx1-ubyte[.gz]`, stems `train` and `t10k` by default; an image is
            a sequence of its rows (28 steps x 28 features).
    boxes   the input-cell attention paper's synthetic box data (`data.box`), generated from
            `data.generator_seed`: no files.

Like the text formats, each becomes a TFDS dataset (array_record, prepared once under
`data.cache_dir`, read without TensorFlow) whose examples keep the file order and carry their
1-based `line`. Series datasets are small, so the splits are then held in memory as float32
arrays. A batch is `series` [B, T, N] float32, `mask` [B, T] bool (True on real steps), `label`
[B] int32, `weight` [B] and `index` [B]; T is the batch's longest series rounded up to a bucket.

Standardisation (`data.normalize`), from the training part only and saved in the workdir:
`time_feature` (the paper's: mean and standard deviation of every (step, feature) cell over
the training series, which must then all have the same length), `feature` (per feature over
all valid steps: the choice for unequal lengths) or `none`.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
from collections.abc import Sequence

import numpy as np
import tensorflow_datasets as tfds

from jcaps.data import boxes, choices, formats
from jcaps.data.errors import DataError
from jcaps.data.pipeline import LABELS_FILE, ExampleDataset, Split, bucket_length, carve_validation, default_boundaries
from jcaps.data.vocab import LabelMap

SERIES_FORMATS = choices.SERIES_FORMATS
NORMALIZATIONS = choices.NORMALIZATIONS
STATS_FILE = "series_stats.npz"
FEATURES_FILE = "num_features.txt"


# ---------------------------------------------------------------------------------------------
# Reading each format: {split: (list of [T, N] arrays, label ids, lines, path)} and class names
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class RawSplit:
    series: list[np.ndarray]
    labels: np.ndarray  # [n] int32 class ids
    lines: np.ndarray  # [n] int32, 1-based position in the source file
    path: str


def _find(directory: str, pattern: str, what: str) -> str:
    matches = sorted(glob.glob(os.path.join(directory, pattern)))
    if not matches:
        raise DataError(os.path.join(directory, pattern), None, f"no {what} file matches (set --config.data.dir)")
    return matches[0]


def _read_ts_splits(data_config) -> tuple[dict[str, RawSplit], list[str]]:
    directory = os.path.abspath(os.path.expanduser(data_config.dir))
    if not os.path.isdir(directory):
        raise DataError(directory, None, "data directory does not exist (set --config.data.dir)")
    paths = {
        "train": _find(directory, f"{data_config.train_file}.ts" if data_config.train_file else "*_TRAIN.ts", "training"),
        "test": _find(directory, f"{data_config.test_file}.ts" if data_config.test_file else "*_TEST.ts", "test"),
    }
    files = {split: formats.read_ts(path) for split, path in paths.items()}
    names = list(files["train"].class_labels)
    if files["test"].num_channels != files["train"].num_channels:
        raise DataError(paths["test"], None, f"{files['test'].num_channels} channels, but the training file has "
                                             f"{files['train'].num_channels}")
    labels = LabelMap(names)
    splits = {}
    for split, ts in files.items():
        ids = [labels.encode(name, path=paths[split], line=line) for name, line in zip(ts.labels, ts.lines)]
        splits[split] = RawSplit(list(ts.series), np.asarray(ids, np.int32), np.asarray(ts.lines, np.int32), paths[split])
    return splits, names


def _read_idx_splits(data_config) -> tuple[dict[str, RawSplit], list[str]]:
    directory = os.path.abspath(os.path.expanduser(data_config.dir))
    if not os.path.isdir(directory):
        raise DataError(directory, None, "data directory does not exist (set --config.data.dir)")
    stems = {"train": data_config.train_file or "train", "test": data_config.test_file or "t10k"}
    if data_config.test_fraction > 0:
        # The test split is carved from the training files (e.g. only MNIST's t10k is at hand).
        stems.pop("test")
    splits = {}
    for split, stem in stems.items():
        images = _find(directory, f"{stem}-images-idx3-ubyte*", f"{split} images")
        labels = _find(directory, f"{stem}-labels-idx1-ubyte*", f"{split} labels")
        series, ids = formats.read_idx_images_as_sequences(images, labels)
        splits[split] = RawSplit(list(series), ids.astype(np.int32), np.arange(1, len(ids) + 1, dtype=np.int32), images)
    names = [str(i) for i in range(int(max(s.labels.max() for s in splits.values())) + 1)]
    return splits, names


def _generate_box_splits(data_config) -> tuple[dict[str, RawSplit], list[str]]:
    sizes = {"train": data_config.box_train_size, "test": data_config.box_test_size}
    splits = {}
    for split, size in sizes.items():
        data = boxes.generate_boxes(
            data_config.box,
            split,
            data_config.generator_seed,
            num_examples=size or None,
            time_steps=data_config.box_time_steps,
            num_features=data_config.box_features,
        )
        n = len(data.labels)
        splits[split] = RawSplit(list(data.series), data.labels.astype(np.int32), np.arange(1, n + 1, dtype=np.int32),
                                 f"boxes:{data_config.box}/{split}")
    return splits, ["y=-1", "y=+1"]


READERS = {"ts": _read_ts_splits, "idx": _read_idx_splits, "boxes": _generate_box_splits}


# ---------------------------------------------------------------------------------------------
# The TFDS builder: one for all series formats, keyed by a fingerprint of what it reads
# ---------------------------------------------------------------------------------------------


def _fingerprint(data_config) -> str:
    digest = hashlib.sha1(data_config.format.encode())
    if data_config.format == "boxes":
        keys = ("box", "generator_seed", "box_train_size", "box_test_size", "box_time_steps", "box_features")
        digest.update(repr([data_config[k] for k in keys]).encode())
    else:
        digest.update(repr([data_config.train_file, data_config.test_file, data_config.test_fraction]).encode())
        for path in sorted(glob.glob(os.path.join(os.path.abspath(os.path.expanduser(data_config.dir)), "*"))):
            stat = os.stat(path)
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:12]


class SeriesBuilder(tfds.core.GeneratorBasedBuilder):
    """Writes the splits of a series dataset as array_record, in file order."""

    VERSION = tfds.core.Version("1.0.0")

    def __init__(self, *, data_config, **kwargs):
        self._data_config = data_config
        self._raw: tuple[dict[str, RawSplit], list[str]] | None = None
        stem = data_config.box if data_config.format == "boxes" else os.path.basename(os.path.normpath(data_config.dir))
        config = tfds.core.BuilderConfig(
            name=f"{stem or 'data'}-{_fingerprint(data_config)}",
            description=f"{data_config.format} data" + (f" in {os.path.abspath(data_config.dir)}" if data_config.dir else ""),
        )
        super().__init__(config=config, file_format="array_record", **kwargs)

    @property
    def raw(self) -> tuple[dict[str, RawSplit], list[str]]:
        """The splits as read from the source files (only read when the dataset is prepared)."""
        if self._raw is None:
            self._raw = READERS[self._data_config.format](self._data_config)
        return self._raw

    def _info(self):
        # The feature shapes and class names come from the source, so it is read (a second or
        # two for these sizes) even when the prepared copy is reused.
        splits, names = self.raw
        num_features = int(splits["train"].series[0].shape[1])
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.builder_config.description,
            features=tfds.features.FeaturesDict(
                {
                    "series": tfds.features.Tensor(shape=(None, num_features), dtype=np.float32),
                    "label": tfds.features.ClassLabel(names=names),
                    "line": tfds.features.Scalar(np.int32),
                }
            ),
            disable_shuffling=True,  # keep file order: example i of a split is line i of its file
        )

    def _split_generators(self, dl_manager):
        del dl_manager
        splits, _ = self.raw
        return {name: self._generate_examples(split) for name, split in splits.items()}

    def _generate_examples(self, split: RawSplit):
        for i, (series, label, line) in enumerate(zip(split.series, split.labels, split.lines)):
            yield i, {"series": np.asarray(series, np.float32), "label": int(label), "line": int(line)}

    def source_path(self, split: str) -> str:
        splits, _ = self.raw
        return splits[split].path


# ---------------------------------------------------------------------------------------------
# Standardisation
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Standardizer:
    """`(x - mean) / std` with `mean`, `std` [T, N] (`time_feature`) or [1, N] (`feature`)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, series: Sequence[np.ndarray], kind: str, path: str) -> Standardizer | None:
        if kind not in NORMALIZATIONS:
            raise ValueError(f"data.normalize must be one of {', '.join(NORMALIZATIONS)}, not {kind!r}")
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
                raise DataError(path, line, f"series of {len(series)} steps is longer than the {self.mean.shape[0]} "
                                            "steps the per-step standardisation was fitted on")
            return (series - self.mean[: len(series)]) / self.std[: len(series)]
        return (series - self.mean) / self.std

    def save(self, path: str) -> None:
        np.savez(path, mean=self.mean, std=self.std)

    @classmethod
    def load(cls, path: str) -> Standardizer | None:
        if not os.path.isfile(path):
            return None
        with np.load(path) as stats:
            return cls(stats["mean"], stats["std"])


# ---------------------------------------------------------------------------------------------
# The dataset
# ---------------------------------------------------------------------------------------------


class InMemorySplit:
    """Random access to a TFDS split loaded once: `[i]` is a dict like the TFDS example."""

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
        self.labels.save(os.path.join(directory, LABELS_FILE))
        with open(os.path.join(directory, FEATURES_FILE), "w", encoding="utf-8") as f:
            f.write(str(self.num_features))
        if self.standardizer is not None:
            self.standardizer.save(os.path.join(directory, STATS_FILE))

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

    def example_length(self, encoded: dict) -> int:
        return len(encoded["series"])

    def pad_batch(self, examples: Sequence[dict], batch_size: int) -> dict:
        longest = max((len(e["series"]) for e in examples), default=1) or 1
        steps = bucket_length(longest, self.boundaries, self.max_len or longest)
        series = np.zeros((batch_size, steps, self.num_features), np.float32)
        mask = np.zeros((batch_size, steps), bool)
        for i, example in enumerate(examples):
            series[i, : len(example["series"])] = example["series"]
            mask[i, : len(example["series"])] = True
        padding = batch_size - len(examples)
        return {
            "series": series,
            "mask": mask,
            "label": np.array([e["label"] for e in examples] + [0] * padding, np.int32),
            "weight": np.array([1.0] * len(examples) + [0.0] * padding, np.float32),
            "index": np.array([e["index"] for e in examples] + [-1] * padding, np.int32),
        }


def prepare(data_config, cache_dir: str) -> SeriesBuilder:
    """Prepares (once) and returns the TFDS builder of a series dataset."""
    from jcaps.data.builders import prepared_once

    return prepared_once(lambda: SeriesBuilder(data_config=data_config, data_dir=cache_dir), cache_dir)


def load_series_dataset(data_config, seed: int, cache_dir: str, saved_dir: str | None = None) -> SeriesDataset:
    """Opens (preparing once) the splits, carves validation (and test, with `data.test_fraction`)
    from train, and fits the standardisation on the training part, or reads it and the labels
    from `saved_dir` (a directory that holds saved metadata)."""
    if data_config.format not in SERIES_FORMATS:
        raise ValueError(f"{data_config.format!r} is not a series format ({', '.join(SERIES_FORMATS)})")
    builder = prepare(data_config, cache_dir)
    splits = {
        name: Split(InMemorySplit.read(builder.as_data_source(split=name)), builder.source_path(name))
        for name in builder.info.splits
    }
    if "test" not in splits:
        carved = carve_validation(splits["train"], data_config.test_fraction, seed + 1)
        splits.update(train=carved["train"], test=carved["validation"])
    splits.update(carve_validation(splits["train"], data_config.validation_fraction, seed))
    train = splits["train"].source
    if saved_dir:
        labels = LabelMap.load(os.path.join(saved_dir, LABELS_FILE))
        standardizer = Standardizer.load(os.path.join(saved_dir, STATS_FILE))
    else:
        labels = LabelMap(builder.info.features["label"].names)
        standardizer = Standardizer.fit([train[i]["series"] for i in range(len(train))],
                                        data_config.normalize, splits["train"].path)
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
