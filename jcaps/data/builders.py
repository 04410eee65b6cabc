"""TFDS builders for jcaps' local formats, written as `array_record` and read without TensorFlow.

Each builder turns a folder of local files into a TFDS dataset cached under `cache_dir`; the
cache key is a fingerprint of the source files (path, size, modification time), so edited files
are prepared again. Every example carries the 1-based `line` of the file it came from, so that
problems found later (an unknown label in the test split) still name the file and line.

Bad rows are errors, unless the builder is made with `drop_bad_rows=True`: then they are left
out, and how many (with the first problems) is written beside the prepared data, so every later
run that reads the cache can still say what was dropped (`dropped_rows`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from jcaps.data import choices, formats
from jcaps.data.errors import DataError
from jcaps.errors import ConfigError

FORMATS = choices.TEXT_FORMATS


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """The files of one split: `text` (and `labels` for the parallel-file format)."""

    text: str
    labels: str = ""


def split_files(data_format: str, directory: str, train_file: str = "", test_file: str = "") -> dict[str, SplitFiles]:
    """Where each split of a local dataset lives; raises `DataError` for a missing file."""
    directory = os.path.abspath(os.path.expanduser(directory))
    if not os.path.isdir(directory):
        raise DataError(directory, None, "data directory does not exist (set --config.data.dir)")
    if data_format == "zhang_csv":
        files = {s: SplitFiles(os.path.join(directory, f"{s}.csv")) for s in ("train", "test")}
    elif data_format == "jsonl":
        files = {
            "train": SplitFiles(os.path.join(directory, (train_file or "train") + ".jsonl")),
            "test": SplitFiles(os.path.join(directory, (test_file or "test") + ".jsonl")),
        }
    elif data_format == "text_labels":
        stems = {"train": train_file or "train", "test": test_file or "test"}
        files = {
            s: SplitFiles(os.path.join(directory, f"{stem}.text"), os.path.join(directory, f"{stem}.labels"))
            for s, stem in stems.items()
        }
    else:
        raise ConfigError(f"data.format must be one of {', '.join(FORMATS)}, not {data_format!r}")
    for split in files.values():
        for path in (split.text, split.labels):
            if path and not os.path.isfile(path):
                raise DataError(path, None, "file not found")
    return files


def class_names(data_format: str, directory: str, files: dict[str, SplitFiles]) -> list[str] | None:
    """Names of the classes when the format fixes them (integer labels); None for string labels."""
    if data_format == "zhang_csv":
        classes = os.path.join(directory, "classes.txt")
        if os.path.isfile(classes):
            return formats.read_classes(classes)
        return [str(i + 1) for i in range(formats.zhang_csv_num_classes(directory))]
    if data_format == "text_labels":
        mappings = sorted(Path(directory).glob(Path(files["train"].text).stem.split("_")[0] + "_mapping.txt"))
        if mappings:
            return formats.read_emoji_mapping(str(mappings[0]))
        num_classes = 1 + max(ex["label"] for _, ex in formats.read_text_labels(files["train"].text, files["train"].labels))
        return [str(i) for i in range(num_classes)]
    return None


def _fingerprint(files: dict[str, SplitFiles]) -> str:
    digest = hashlib.sha1()
    for split in sorted(files):
        for path in (files[split].text, files[split].labels):
            if path:
                stat = os.stat(path)
                digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:12]


class _LocalBuilder(tfds.core.GeneratorBasedBuilder):
    """Shared plumbing: a builder configured with a source folder, cached by fingerprint."""

    VERSION = tfds.core.Version("1.0.0")

    def __init__(
        self, *, data_format, directory, train_file="", test_file="", multi_label=False, drop_bad_rows=False, **kwargs
    ):
        self._files = split_files(data_format, directory, train_file, test_file)
        self._names = class_names(data_format, directory, self._files)
        self._multi_label = multi_label
        self._drop_bad_rows = drop_bad_rows
        self._cache_root = os.path.expanduser(kwargs.get("data_dir") or os.path.join("~", "tensorflow_datasets"))
        config = tfds.core.BuilderConfig(
            name=f"{Path(directory).name or 'data'}-{_fingerprint(self._files)}" + ("-dropbad" if drop_bad_rows else ""),
            description=f"{data_format} files in {os.path.abspath(directory)}",
        )
        super().__init__(config=config, file_format="array_record", **kwargs)

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
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.builder_config.description,
            features=tfds.features.FeaturesDict(
                {"text": tfds.features.Text(), label_key: self._label_feature(), "line": tfds.features.Scalar(np.int32)}
            ),
        )

    def source_path(self, split: str) -> str:
        return self._files[split].text


class ZhangCsv(_LocalBuilder):
    """`train.csv` / `test.csv` with the class index 1..J first (Zhang et al. 2015)."""

    def _generate_examples(self, files: SplitFiles, dropped: list[DataError] | None):
        for key, example in formats.read_zhang_csv(files.text, num_classes=len(self._names), dropped=dropped):
            yield key, {**example, "line": int(key)}


class Jsonl(_LocalBuilder):
    """One JSON object a line, with `label` (single-label) or `labels` (multi-label)."""

    def _generate_examples(self, files: SplitFiles, dropped: list[DataError] | None):
        label_key = "labels" if self._multi_label else "label"
        for key, example in formats.read_jsonl(files.text, label_key=label_key, dropped=dropped):
            yield key, {"text": example["text"], label_key: example[label_key], "line": int(key)}


class TextLabels(_LocalBuilder):
    """Parallel `NAME.text` / `NAME.labels` files, one example a line (SemEval-2018 emoji)."""

    def _generate_examples(self, files: SplitFiles, dropped: list[DataError] | None):
        for key, example in formats.read_text_labels(
            files.text, files.labels, num_classes=len(self._names), dropped=dropped
        ):
            yield key, {**example, "line": int(key)}


BUILDERS = {"zhang_csv": ZhangCsv, "jsonl": Jsonl, "text_labels": TextLabels}


def prepare_local(data_format: str, directory: str, cache_dir: str, **kwargs) -> _LocalBuilder:
    """Prepares (once) and returns the builder of a local dataset."""
    if data_format not in BUILDERS:
        raise ConfigError(f"data.format must be one of {', '.join(FORMATS)}, not {data_format!r}")
    builder_class = BUILDERS[data_format]
    return prepared_once(
        lambda: builder_class(data_format=data_format, directory=directory, data_dir=cache_dir, **kwargs),
        cache_dir,
    )


def prepared_once(make_builder: Callable[[], tfds.core.DatasetBuilder], cache_dir: str) -> tfds.core.DatasetBuilder:
    """A builder from `make_builder()` after `download_and_prepare`, serialised across processes
    by a file lock. A preparation that fails leaves no empty or half-written folders behind
    (`remove_new_directories`)."""
    # Several runs started at once on the same files (an ablation sweep) would race to rename
    # the same prepared folder into place; one prepares while the others wait, then reuse it.
    # The builder is made under the lock: one made before another process finished preparing
    # would keep the unprepared (split-less) info it read at construction.
    os.makedirs(cache_dir, exist_ok=True)
    with open(os.path.join(cache_dir, ".prepare.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = directories_under(cache_dir)
        try:
            builder = make_builder()
            if not builder.is_prepared():
                # TFDS would print "Downloading and preparing dataset Unknown size ..." and
                # "... downloaded and prepared" for files that are already local.
                builder._log_download_bytes = builder._log_download_done = lambda: None
                print(f"preparing {builder.builder_config.description} into {builder.data_dir} (once)", flush=True)
            builder.download_and_prepare()
        except BaseException:
            remove_new_directories(cache_dir, before)
            raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return builder


def directories_under(root: str) -> set[str]:
    """Every directory under `root`, `root` included."""
    return {path for path, _, _ in os.walk(root)}


def _is_scratch(path: str, root: str) -> bool:
    """A folder only a preparation in progress writes: TFDS' temporary ones (`incomplete.<id>_1.0.0`,
    `....tmp.<hex>`) and jcaps' record of the rows dropped from each split."""
    name = os.path.basename(path)
    if name.startswith("incomplete.") or ".incomplete" in name or ".tmp." in name:
        return True
    return os.path.relpath(path, root).startswith("jcaps_dropped" + os.sep)


def remove_new_directories(root: str, before: set[str]) -> None:
    """Removes what a failed preparation left under `root`: each directory not in `before` that
    is empty (once its own leftovers are gone) or a scratch folder; others are kept."""
    for path, _, _ in os.walk(root, topdown=False):
        if path in before or path == root:
            continue
        if _is_scratch(path, root):
            shutil.rmtree(path, ignore_errors=True)
            continue
        try:
            os.rmdir(path)
        except OSError:  # not empty: it holds something this preparation did not make
            pass


@contextlib.contextmanager
def no_leftover_directories(root: str):
    """Runs a preparation into `root`; when it fails, `remove_new_directories`."""
    before = directories_under(root)
    try:
        yield
    except BaseException:
        remove_new_directories(root, before)
        raise
