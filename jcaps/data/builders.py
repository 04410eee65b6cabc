"""TFDS builders of the local formats, written as `array_record` and read without TensorFlow:
one for each text format (`zhang_csv`, `jsonl`, `text_labels`) and one for every series format
(`ts`, `idx`, `boxes`).

Each builder turns a folder of local files (or generated box data) into a TFDS dataset cached
under `cache_dir`, at `cache_dir/<builder name>/<folder>-<fingerprint>/<version>`: the builder
name comes from its class name (`ZhangCsv` is `zhang_csv`, `SeriesBuilder` is `series_builder`),
the fingerprint from what it reads (path, size and modification time of the source files; the
generator's settings for box data), so edited files are prepared again. Every example carries the
1-based `line` of the file it came from, so that problems found later (an unknown label in the
test split) still name the file and line; examples keep the file order.

Bad rows of text files are errors, unless the builder is made with `drop_bad_rows=True`: then
they are left out, and how many (with the first problems) is written beside the prepared data,
so every later run that reads the cache can still say what was dropped (`dropped_rows`).

Series formats (`data.format`):
    ts      UEA/UCR `.ts` files in `data.dir`: `NAME_TRAIN.ts` / `NAME_TEST.ts` (or the stems
            `data.train_file` / `data.test_file`); equal or unequal lengths.
    idx     MNIST idx-ubyte(.gz) files in `data.dir`: `{stem}-images-idx3-ubyte[.gz]` and
            `{stem}-labels-idx1-ubyte[.gz]`, stems `train` and `t10k` by default; an image is
            a sequence of its rows (28 steps x 28 features).
    boxes   the input-cell attention paper's synthetic box data (`data.box`), generated from
            `data.generator_seed`: no files.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from jcaps.data import boxes
from jcaps.data.errors import DataError
from jcaps.data.readers import idx, jsonl, text_labels, ts, zhang_csv
from jcaps.data.vocab import LabelMap
from jcaps.errors import ConfigError


def _prepared_folder(builder_class, config: tfds.core.BuilderConfig, data_dir: str | None) -> str:
    """DATA_DIR/NAME/CONFIG/VERSION, where TFDS keeps what a builder of local files prepared."""
    root = os.path.expanduser(data_dir or os.path.join("~", "tensorflow_datasets"))
    return os.path.join(root, builder_class.name, config.name, str(builder_class.VERSION))


def discard_damaged(folder: str, problem: str) -> None:
    """Removes a prepared folder that does not read (jcaps prepares it again from the source
    files, which it was made from), saying so in one line on stderr."""
    print(f"warning: the prepared data in {folder} is damaged ({problem}); preparing it again", file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)


def construct_again_if_damaged(builder, config: tfds.core.BuilderConfig, construct, data_dir: str | None) -> None:
    """Runs the TFDS constructor `construct` of a builder of local files; where the folder it had
    prepared has a `dataset_info.json` that does not read (truncated, changed), the folder is
    discarded (`discard_damaged`) and the builder made again, to be prepared again."""
    try:
        construct()
    except Exception:  # protobuf's ParseError, among others
        folder = _prepared_folder(type(builder), config, data_dir)
        problem = _unreadable_json(os.path.join(folder, "dataset_info.json"))
        if problem is None:  # the folder reads: the failure is another one
            raise
        discard_damaged(folder, f"dataset_info.json: {problem}")
        construct()


def _unreadable_json(path: str) -> str | None:
    """Why the JSON file `path` does not read; None when it reads or is not there."""
    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        return str(error)
    return None


class _LocalDatasetInfo(tfds.core.DatasetInfo):
    """The `DatasetInfo` of a builder of local files: TFDS' bucket holds no metadata of theirs,
    and the base class makes a temporary folder for it before it finds none, which it never
    removes (one empty `/tmp/tmp*tfds` each time a dataset is prepared)."""

    def initialize_from_bucket(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# Text formats: the files of each split, the class names, one builder a format
# ---------------------------------------------------------------------------------------------


def _source_directory(directory: str) -> str:
    """`directory` as an absolute path; raises `DataError` when it does not exist."""
    directory = os.path.abspath(os.path.expanduser(directory))
    if not os.path.isdir(directory):
        raise DataError(directory, None, "no such data directory (--config.data.dir)")
    return directory


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """The files of one split: `text` (and `labels` for the parallel-file format)."""

    text: str
    labels: str = ""


def _files_fingerprint(files: dict[str, SplitFiles]) -> str:
    digest = hashlib.sha1()
    for split in sorted(files):
        for path in (files[split].text, files[split].labels):
            if path:
                stat = os.stat(path)
                digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:12]


class TextFilesBuilder(tfds.core.GeneratorBasedBuilder):
    """Shared plumbing: a builder configured with a source folder, cached by fingerprint. Each
    format is a subclass (`TEXT_BUILDERS`) that says where its splits live (`split_stems`,
    `split_files`), what its classes are called (`class_names`) and how its rows are read
    (`_generate_examples`)."""

    VERSION = tfds.core.Version("1.0.0")
    # Whether the format's records may carry a group field besides text and label (`data.group_key`).
    GROUPED = False

    def __init__(
        self, *, directory, train_file="", test_file="", multi_label=False, drop_bad_rows=False, group_key="", **kwargs
    ):
        if group_key and not self.GROUPED:
            grouped = ", ".join(name for name, builder in TEXT_BUILDERS.items() if builder.GROUPED)
            raise ConfigError(
                f"data.group_key: {self.name} files have no field besides the text and label; "
                f"a group is read from {grouped} files (or set data.group_key='')"
            )
        directory = _source_directory(directory)
        self._files = self.split_files(directory, train_file or "train", test_file or "test")
        for split in self._files.values():
            for path in (split.text, split.labels):
                if path and not os.path.isfile(path):
                    expected = ", ".join(
                        sorted(os.path.basename(f) for s in self._files.values() for f in (s.text, s.labels) if f)
                    )
                    raise DataError(
                        path, None, f"file not found: {self.name} files in --config.data.dir are {expected}"
                    )
        self._names = self.class_names(directory, self._files)
        self._multi_label = multi_label
        self._drop_bad_rows = drop_bad_rows
        self._group_key = group_key
        self._cache_root = os.path.expanduser(kwargs.get("data_dir") or os.path.join("~", "tensorflow_datasets"))
        config = tfds.core.BuilderConfig(
            name=f"{Path(directory).name or 'data'}-{_files_fingerprint(self._files)}"
            + ("-dropbad" if drop_bad_rows else "")
            + (f"-group-{group_key}" if group_key else ""),
            description=f"{self.name} files in {directory}",
        )
        construct_again_if_damaged(
            self,
            config,
            lambda: super(TextFilesBuilder, self).__init__(config=config, file_format="array_record", **kwargs),
            kwargs.get("data_dir"),
        )

    @classmethod
    def split_files(cls, directory: str, train_stem: str, test_stem: str) -> dict[str, SplitFiles]:
        """The files of each split in `directory`, from the stems of the training and test files."""
        raise NotImplementedError

    @classmethod
    def class_names(cls, directory: str, files: dict[str, SplitFiles]) -> list[str] | None:
        """The names of the classes where the format fixes them (integer labels); None where
        the labels are strings."""
        return None

    def _split_generators(self, dl_manager):
        del dl_manager
        return {split: self._generate_split(split, files) for split, files in self._files.items()}

    def _dropped_path(self, split: str) -> str:
        # Outside the folders TFDS manages (it prepares in a temporary folder, then renames).
        root = os.path.join(self._cache_root, "jcaps_dropped", self.name, self.builder_config.name)
        return os.path.join(root, f"{self.version}-{split}.json")

    def _generate_split(self, split: str, files: SplitFiles):
        dropped: list[DataError] | None = [] if self._drop_bad_rows else None
        yield from self._generate_examples(files, dropped)
        if dropped is not None:
            record = {"file": files.text, "count": len(dropped), "first": [str(e) for e in dropped[:5]]}
            os.makedirs(os.path.dirname(self._dropped_path(split)), exist_ok=True)
            with open(self._dropped_path(split), "w", encoding="utf-8") as f:
                json.dump(record, f, indent=1)

    def dropped_rows(self) -> dict[str, dict]:
        """`{split: {"file", "count", "first": [problems]}}` for the splits that lost bad rows."""
        out = {}
        for split in self._files:
            path = self._dropped_path(split)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    record = json.load(f)
                if record["count"]:
                    out[split] = record
        return out

    def _label_feature(self):
        if self._names is not None:
            return tfds.features.ClassLabel(names=self._names)
        if self._multi_label:
            return tfds.features.Sequence(tfds.features.Text())
        return tfds.features.Text()

    def _info(self):
        label_key = "labels" if self._multi_label else "label"
        features = {
            "text": tfds.features.Text(),
            label_key: self._label_feature(),
            "line": tfds.features.Scalar(np.int32),
        }
        if self._group_key:
            features[self._group_key] = tfds.features.Text()
        return _LocalDatasetInfo(
            builder=self, description=self.builder_config.description, features=tfds.features.FeaturesDict(features)
        )

    def source_path(self, split: str) -> str:
        return self._files[split].text


class ZhangCsv(TextFilesBuilder):
    """`train.csv` / `test.csv` with the class index 1..J first (Zhang et al. 2015); class names
    from `classes.txt`, else the indices."""

    @classmethod
    def split_files(cls, directory, train_stem, test_stem):
        # The format fixes the names, whatever the config's stems.
        return {split: SplitFiles(os.path.join(directory, f"{split}.csv")) for split in ("train", "test")}

    @classmethod
    def class_names(cls, directory, files):
        classes = os.path.join(directory, "classes.txt")
        if os.path.isfile(classes):
            return zhang_csv.read_classes(classes)
        return [str(i + 1) for i in range(zhang_csv.zhang_csv_num_classes(directory))]

    def _generate_examples(self, files: SplitFiles, dropped: list[DataError] | None):
        for key, example in zhang_csv.read_zhang_csv(files.text, num_classes=len(self._names), dropped=dropped):
            yield key, {**example, "line": int(key)}


class Jsonl(TextFilesBuilder):
    """One JSON object a line, with `label` (single-label) or `labels` (multi-label): `STEM.jsonl`;
    string labels."""

    GROUPED = True

    @classmethod
    def split_files(cls, directory, train_stem, test_stem):
        return {
            split: SplitFiles(os.path.join(directory, f"{stem}.jsonl"))
            for split, stem in (("train", train_stem), ("test", test_stem))
        }

    def _generate_examples(self, files: SplitFiles, dropped: list[DataError] | None):
        label_key = "labels" if self._multi_label else "label"
        for key, example in jsonl.read_jsonl(
            files.text, label_key=label_key, group_key=self._group_key, dropped=dropped
        ):
            yield key, {**example, "line": int(key)}


class TextLabels(TextFilesBuilder):
    """Parallel `NAME.text` / `NAME.labels` files, one example a line (SemEval-2018 emoji); class
    names from `PREFIX_mapping.txt` beside them, else the label ids."""

    @classmethod
    def split_files(cls, directory, train_stem, test_stem):
        return {
            split: SplitFiles(os.path.join(directory, f"{stem}.text"), os.path.join(directory, f"{stem}.labels"))
            for split, stem in (("train", train_stem), ("test", test_stem))
        }

    @classmethod
    def class_names(cls, directory, files):
        mappings = sorted(Path(directory).glob(Path(files["train"].text).stem.split("_")[0] + "_mapping.txt"))
        if mappings:
            return text_labels.read_emoji_mapping(str(mappings[0]))
        num_classes = 1 + max(
            ex["label"] for _, ex in text_labels.read_text_labels(files["train"].text, files["train"].labels)
        )
        return [str(i) for i in range(num_classes)]

    def _generate_examples(self, files: SplitFiles, dropped: list[DataError] | None):
        for key, example in text_labels.read_text_labels(
            files.text, files.labels, num_classes=len(self._names), dropped=dropped
        ):
            yield key, {**example, "line": int(key)}


# The text formats (`data.format`): one builder each, as `SERIES_READERS` has one reader a series format.
TEXT_BUILDERS = {"zhang_csv": ZhangCsv, "jsonl": Jsonl, "text_labels": TextLabels}


# ---------------------------------------------------------------------------------------------
# Series formats: {split: (list of [T, N] arrays, label ids, lines, path)} and class names
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
        raise DataError(os.path.join(directory, pattern), None, f"no {what} file matches (--config.data.dir)")
    return matches[0]


def _read_ts_splits(data_config) -> tuple[dict[str, RawSplit], list[str]]:
    directory = _source_directory(data_config.dir)
    paths = {
        "train": _find(
            directory, f"{data_config.train_file}.ts" if data_config.train_file else "*_TRAIN.ts", "training"
        ),
        "test": _find(directory, f"{data_config.test_file}.ts" if data_config.test_file else "*_TEST.ts", "test"),
    }
    files = {split: ts.read_ts(path) for split, path in paths.items()}
    names = list(files["train"].class_labels)
    if files["test"].num_channels != files["train"].num_channels:
        raise DataError(
            paths["test"],
            None,
            f"{files['test'].num_channels} channels, but the training file has {files['train'].num_channels}",
        )
    labels = LabelMap(tuple(names))
    splits = {}
    for split, ts_file in files.items():
        ids = [labels.encode(name, path=paths[split], line=line) for name, line in zip(ts_file.labels, ts_file.lines)]
        splits[split] = RawSplit(
            list(ts_file.series), np.asarray(ids, np.int32), np.asarray(ts_file.lines, np.int32), paths[split]
        )
    return splits, names


def _read_idx_splits(data_config) -> tuple[dict[str, RawSplit], list[str]]:
    directory = _source_directory(data_config.dir)
    stems = {"train": data_config.train_file or "train", "test": data_config.test_file or "t10k"}
    if data_config.test_fraction > 0:
        # The test split is carved from the training files (e.g. only MNIST's t10k is at hand).
        stems.pop("test")
    splits = {}
    for split, stem in stems.items():
        images = _find(directory, f"{stem}-images-idx3-ubyte*", f"{split} images")
        labels = _find(directory, f"{stem}-labels-idx1-ubyte*", f"{split} labels")
        series, ids = idx.read_idx_images_as_sequences(images, labels)
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
        splits[split] = RawSplit(
            list(data.series),
            data.labels.astype(np.int32),
            np.arange(1, n + 1, dtype=np.int32),
            f"boxes:{data_config.box}/{split}",
        )
    return splits, ["y=-1", "y=+1"]


SERIES_READERS = {"ts": _read_ts_splits, "idx": _read_idx_splits, "boxes": _generate_box_splits}


def _series_fingerprint(data_config) -> str:
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
            name=f"{stem or 'data'}-{_series_fingerprint(data_config)}",
            description=f"{data_config.format} data"
            + (f" in {os.path.abspath(data_config.dir)}" if data_config.dir else ""),
        )
        construct_again_if_damaged(
            self,
            config,
            lambda: super(SeriesBuilder, self).__init__(config=config, file_format="array_record", **kwargs),
            kwargs.get("data_dir"),
        )

    @property
    def raw(self) -> tuple[dict[str, RawSplit], list[str]]:
        """The splits as read from the source files (only read when the dataset is prepared)."""
        if self._raw is None:
            self._raw = SERIES_READERS[self._data_config.format](self._data_config)
        return self._raw

    def _info(self):
        # The feature shapes and class names come from the source, so it is read (a second or
        # two for these sizes) even when the prepared copy is reused.
        splits, names = self.raw
        num_features = int(splits["train"].series[0].shape[1])
        return _LocalDatasetInfo(
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
