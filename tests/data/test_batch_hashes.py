"""The batches of every shipped config's `:smoke` form are those the earlier per-example pipeline
made: the first train batches of its seed (with its class weights and length grouping, as
training draws them) and the first evaluation batches of each split hash as recorded in
`batch_hashes.json`, so that a workdir trained before resumes with the same data order.

`python -m tests.data.test_batch_hashes --write` records them again (only when a change to the
data is meant).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HASHES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "batch_hashes.json")
CONFIGS = sorted(name.removesuffix(".py") for name in os.listdir(os.path.join(ROOT, "configs"))
                 if name.endswith(".py") and not name.startswith("_"))
TRAIN_BATCHES = 3
EVAL_BATCHES = 2


def digest(batch: dict) -> str:
    """SHA-256 of a batch's arrays: each name, dtype, shape and bytes, by name."""
    h = hashlib.sha256()
    for name in sorted(batch):
        value = np.ascontiguousarray(batch[name])
        h.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
        h.update(value.tobytes())
    return h.hexdigest()


def batch_digests(name: str, cache_dir: str) -> dict[str, list[str]]:
    """{"train_iterator": [...], SPLIT: [...]}: the digests of configs/NAME.py:smoke's first
    training batches and of the first evaluation batches of each split."""
    from jcaps.data import datasets
    from jcaps.train.config import class_weight_power, load

    config = load(os.path.join(ROOT, "configs", f"{name}.py") + ":smoke")
    config.data.cache_dir = cache_dir
    dataset = datasets.load_dataset(config.data, config.train.seed)
    power = class_weight_power(config.train.class_weights)
    weights = None if power is None else dataset.balanced_class_weights(power)
    train = dataset.train_iterator(config.train.batch_size, config.train.seed, weights, config.data.length_grouping)
    digests = {"train_iterator": [digest(next(train)) for _ in range(TRAIN_BATCHES)]}
    for split in sorted(dataset.splits):
        batches = dataset.eval_batches(split, config.train.batch_size)
        digests[split] = [digest(batch) for _, batch in zip(range(EVAL_BATCHES), batches)]
    return digests


@pytest.fixture(scope="module")
def recorded() -> dict:
    with open(HASHES, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_the_first_batches_of_every_smoke_config_are_as_recorded(name, recorded, cache_dir):
    assert batch_digests(name, str(cache_dir)) == recorded[name]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    with tempfile.TemporaryDirectory() as cache:
        table = {name: batch_digests(name, cache) for name in CONFIGS}
    with open(HASHES, "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")
