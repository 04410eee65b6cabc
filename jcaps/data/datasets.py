"""One entry point from a data config to a dataset, text or series, new or saved in a workdir.

A workdir keeps what encodes new inputs exactly as in training (`save_metadata`): the
vocabulary and label names of a text dataset, the label names and standardisation of a series
dataset. A resumed run, evaluation and prediction read those back instead of rebuilding them.
"""

from __future__ import annotations

import os

from jcaps.data import series
from jcaps.data.pipeline import (
    LABELS_FILE,
    VOCAB_FILE,
    ExampleDataset,
    default_cache_dir,
    load_text_dataset,
    make_text_dataset,
)
from jcaps.data.vocab import LabelMap, Vocabulary


def is_series(data_config) -> bool:
    return data_config.format in series.SERIES_FORMATS


def has_metadata(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, LABELS_FILE))


def load_dataset(data_config, seed: int, saved_dir: str | None = None) -> ExampleDataset:
    """The dataset of `data_config` with its splits; encoded with the metadata saved in
    `saved_dir` when it holds some, else with metadata built from the training split."""
    saved = saved_dir if saved_dir and has_metadata(saved_dir) else None
    if is_series(data_config):
        return series.load_series_dataset(data_config, seed, default_cache_dir(data_config), saved)
    if saved is None:
        return load_text_dataset(data_config, seed)
    return load_text_dataset(data_config, seed, *_text_metadata(saved))


def inference_dataset(data_config, saved_dir: str) -> ExampleDataset:
    """A dataset without splits that encodes and batches new inputs as training did."""
    if not has_metadata(saved_dir):
        raise FileNotFoundError(f"{saved_dir} holds no {LABELS_FILE}: train the workdir first")
    if is_series(data_config):
        labels = LabelMap.load(os.path.join(saved_dir, LABELS_FILE))
        standardizer = series.Standardizer.load(os.path.join(saved_dir, series.STATS_FILE))
        num_features = _saved_num_features(saved_dir)
        return series.make_series_dataset(data_config, {}, labels, num_features, standardizer)
    return make_text_dataset(data_config, {}, *_text_metadata(saved_dir))


def _text_metadata(directory: str) -> tuple[Vocabulary, LabelMap]:
    return Vocabulary.load(os.path.join(directory, VOCAB_FILE)), LabelMap.load(os.path.join(directory, LABELS_FILE))


def _saved_num_features(directory: str) -> int:
    with open(os.path.join(directory, series.FEATURES_FILE), encoding="utf-8") as f:
        return int(f.read())
