"""From a data config to a dataset, text or series, new or with the metadata saved in a workdir.

A workdir keeps what encodes new inputs exactly as in training (`save_metadata`): the
vocabulary and label names of a text dataset, the label names and standardisation of a series
dataset. A resumed run, evaluation and prediction read those back instead of rebuilding them.
"""

from __future__ import annotations

import os
from typing import get_args

from jcaps.data import choices, preparation, series, text
from jcaps.data.batching import ExampleDataset
from jcaps.data.vocab import LABELS_FILE, VOCAB_FILE, LabelMap, Vocabulary
from jcaps.errors import writing


def is_series(data_config) -> bool:
    return data_config.format in get_args(choices.SeriesFormat)


def has_metadata(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, LABELS_FILE))


def load_dataset(data_config, seed: int, saved_dir: str | None = None) -> ExampleDataset:
    """The dataset of `data_config` with its splits; encoded with the metadata saved in
    `saved_dir` when it holds some, else with metadata built from the training split, each split
    once, into the prepared data's folder (`ExampleDataset.encoded`)."""
    dataset = _load_dataset(data_config, seed, saved_dir)
    dataset.encoded_root = preparation.default_cache_dir(data_config)
    dataset.encoding_settings = data_config.to_json(sort_keys=True)
    return dataset


def _load_dataset(data_config, seed: int, saved_dir: str | None) -> ExampleDataset:
    saved = saved_dir if saved_dir and has_metadata(saved_dir) else None
    # A preparation cut short by a full disk leaves nothing behind (`preparation.prepared_once`).
    with writing("the prepared data in", preparation.default_cache_dir(data_config), full_disk_only=True):
        if is_series(data_config):
            return series.series_dataset(data_config, preparation.prepare_series_splits(data_config), seed, saved)
        prepared = preparation.prepare_text_splits(data_config, seed)
    if saved is None:
        return text.text_dataset(data_config, prepared, seed)
    return text.text_dataset(data_config, prepared, seed, *text_metadata(saved))


def inference_dataset(data_config, saved_dir: str) -> ExampleDataset:
    """A dataset without splits that encodes and batches new inputs as training did."""
    if not has_metadata(saved_dir):
        raise FileNotFoundError(f"{saved_dir} holds no {LABELS_FILE}: train the workdir first")
    if is_series(data_config):
        labels = LabelMap.load(os.path.join(saved_dir, LABELS_FILE))
        standardizer = series.Standardizer.load(os.path.join(saved_dir, series.STATS_FILE))
        num_features = _saved_num_features(saved_dir)
        return series.make_series_dataset(data_config, {}, labels, num_features, standardizer)
    return text.make_text_dataset(data_config, {}, *text_metadata(saved_dir))


def text_metadata(directory: str) -> tuple[Vocabulary, LabelMap]:
    """The vocabulary and label map a workdir saved."""
    return Vocabulary.load(os.path.join(directory, VOCAB_FILE)), LabelMap.load(os.path.join(directory, LABELS_FILE))


def _saved_num_features(directory: str) -> int:
    with open(os.path.join(directory, series.FEATURES_FILE), encoding="utf-8") as f:
        return int(f.read())
