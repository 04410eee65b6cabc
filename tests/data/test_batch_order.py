"""The batches a seed gives, pinned: their order and contents must not change when the data code
changes (a resumed run, and a run repeated with the same seed, see the same batches)."""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest

from jcaps.data import datasets
from jcaps.train.config import base_config, series_config


def digest(batches) -> str:
    """A fingerprint of a list of batches: every array's name, dtype, shape and bytes."""
    sha = hashlib.sha256()
    for batch in batches:
        for key in sorted(batch):
            array = np.ascontiguousarray(batch[key])
            sha.update(f"{key}:{array.dtype.str}:{array.shape};".encode())
            sha.update(array.tobytes())
    return sha.hexdigest()[:16]


@pytest.fixture(scope="module")
def text_config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("order")
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(30)]
    rows = [{"text": " ".join(rng.choice(words, size=int(rng.integers(1, 40)))), "labels": sorted(
        set(rng.choice(["x", "y", "z"], size=int(rng.integers(1, 3)))))} for _ in range(60)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:50]), encoding="utf-8")
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[50:]), encoding="utf-8")
    config = base_config().data
    config.update(dir=str(folder), cache_dir=str(folder / "cache"), format="jsonl", max_len=64,
                  validation_fraction=0.2, bucket_boundaries=(8, 16, 32))
    return config


def single_label_copy(directory: str) -> str:
    """A copy of the files of `directory` with each example's first label as its one `label`."""
    source, target = pathlib.Path(directory), pathlib.Path(directory) / "single"
    target.mkdir(exist_ok=True)
    for name in ("train.jsonl", "test.jsonl"):
        records = [json.loads(line) for line in (source / name).read_text(encoding="utf-8").splitlines()]
        (target / name).write_text("".join(json.dumps({"text": r["text"], "label": r["labels"][0]}) + "\n"
                                           for r in records), encoding="utf-8")
    return str(target)


@pytest.mark.parametrize("label_key, window, expected", [
    ("label", 0, "21c4d5e0bdf04c01"), ("label", 2, "e201a5c9c3dd9621"), ("labels", 0, "0b95d138e05078c2"),
])
def test_text_train_batches_of_a_seed(text_config, label_key, window, expected):
    config = text_config.copy_and_resolve_references()
    config.label_key = label_key
    if label_key == "label":
        config.dir = single_label_copy(text_config.dir)
    dataset = datasets.load_dataset(config, seed=1)
    iterator = dataset.train_iterator(8, seed=5, length_window=window)
    batches = [next(iterator) for _ in range(12)]  # into the third epoch (5 batches an epoch)
    assert digest(batches) == expected


def test_text_eval_batches_and_class_weights_of_a_seed(text_config):
    config = text_config.copy_and_resolve_references()
    config.label_key, config.dir = "label", single_label_copy(text_config.dir)
    dataset = datasets.load_dataset(config, seed=2)
    evaluated = [batch for split in ("validation", "test") for batch in dataset.eval_batches(split, 4)]
    weights = dataset.balanced_class_weights(0.5)
    iterator = dataset.train_iterator(8, seed=0, class_weights=weights)
    assert digest(evaluated) == "274511004cdcfd81"
    assert digest([next(iterator) for _ in range(3)]) == "8b96539576364436"


def test_series_batches_of_a_seed(tmp_path):
    config = series_config()
    config.data.update(format="boxes", box="mixed", cache_dir=str(tmp_path / "cache"), normalize="feature",
                       box_train_size=40, box_test_size=12, box_time_steps=10, box_features=6,
                       validation_fraction=0.25)
    dataset = datasets.load_dataset(config.data, seed=3)
    iterator = dataset.train_iterator(6, seed=4)
    assert digest([next(iterator) for _ in range(8)]) == "7429b50922f9ccee"
    assert digest([b for split in ("validation", "test") for b in dataset.eval_batches(split, 8)]) == "3194c90aa85621b2"


@pytest.mark.parametrize("size, seed", [(size, seed) for size in (1, 2, 3, 7, 100, 1013, 4096, 10116)
                                         for seed in (0, 5, 2**32 - 1)] + [(65537, 1)])  # 17 bits: 16-bit blocks
def test_the_seeded_permutation_is_grains_shuffle(size, seed):
    """Computed whole in NumPy, the order grain's `shuffle` gives one index at a time."""
    import grain

    from jcaps.data.batching import seeded_permutation

    shuffled = grain.MapDataset.range(size).shuffle(seed=seed)
    np.testing.assert_array_equal(seeded_permutation(size, seed), [shuffled[i] for i in range(size)])


def test_the_training_batches_cross_epochs_as_grains_repeated_shuffle_does():
    import grain

    from jcaps.data.batching import _shuffled_batches

    size, batch, seed = 37, 8, 3
    grains = grain.MapDataset.range(size).shuffle(seed=seed).repeat().batch(batch, drop_remainder=True)
    ours = _shuffled_batches(size, batch, seed)
    for k in range(30):  # six epochs
        np.testing.assert_array_equal(ours[k], grains[k])
    # The iterators' states are the same: a checkpoint of either resumes the other.
    unthreaded = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    theirs, mine = iter(grains.to_iter_dataset(unthreaded)), iter(ours.to_iter_dataset(unthreaded))
    for _ in range(7):
        next(theirs), next(mine)
    assert mine.get_state() == theirs.get_state()
    mine.set_state(theirs.get_state())
    np.testing.assert_array_equal(next(mine), next(theirs))
