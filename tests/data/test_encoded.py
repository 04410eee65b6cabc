"""Splits encoded once (`jcaps.data.encoded`): rows equal to the examples, chunks that change
nothing, a folder read back instead of encoded again, a damaged one encoded again, and a batch
that is a gather of rows equal to the batch of the examples."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from jcaps.data import datasets, encoded
from jcaps.train.config import base_config


def example(i: int) -> dict:
    """An encoded example whose arrays differ in length and rank by index."""
    return {
        "tokens": np.arange(1, i % 5 + 1, dtype=np.int32) + i,
        "grid": np.full((i % 3 + 1, i % 2 + 1), i, np.float32),
        "label": np.int32(i % 4),
    }


def test_rows_hold_each_example_zero_padded_with_its_own_shape():
    rows = encoded.encode_rows(example, 11)
    assert rows.fields["tokens"].shape == (11, 4) and rows.fields["grid"].shape == (11, 3, 2)
    np.testing.assert_array_equal(rows.fields["label"], np.arange(11) % 4)
    for i in range(11):
        want = example(i)
        for name in ("tokens", "grid"):
            shape = tuple(rows.sizes[name][i])
            assert shape == want[name].shape
            got = rows.fields[name][i]
            np.testing.assert_array_equal(got[tuple(slice(0, n) for n in shape)], want[name])
            assert got.sum() == want[name].sum()  # zeros beyond the example's own shape
    taken = rows.take(np.array([7, 2, 7]))
    np.testing.assert_array_equal(taken.fields["tokens"], rows.fields["tokens"][[7, 2, 7]])
    np.testing.assert_array_equal(taken.sizes["grid"], rows.sizes["grid"][[7, 2, 7]])


def test_a_folder_is_written_in_chunks_read_memory_mapped_and_not_encoded_again(tmp_path, monkeypatch):
    in_memory = encoded.encode_rows(example, 23)
    monkeypatch.setattr(encoded, "CHUNK", 5)  # five chunks, the widest only in some
    calls = []

    def counted(i):
        calls.append(i)
        return example(i)

    folder = str(tmp_path / "split")
    written = encoded.encode_rows(counted, 23, folder)
    assert calls == list(range(23))
    assert sorted(os.listdir(folder)) == ["complete", "grid.npy", "grid.sizes.npy", "label.npy", "tokens.npy",
                                          "tokens.sizes.npy"]
    assert not [name for name in os.listdir(tmp_path) if ".tmp-" in name]
    again = encoded.encode_rows(counted, 23, folder)
    assert calls == list(range(23))  # read, not encoded again
    for rows in (written, again):
        assert isinstance(rows.fields["tokens"], np.memmap)
        for name, value in in_memory.fields.items():
            np.testing.assert_array_equal(rows.fields[name], value)
        for name, value in in_memory.sizes.items():
            np.testing.assert_array_equal(rows.sizes[name], value)


@pytest.mark.parametrize("damage", ["truncated", "pickled", "other_size"])
def test_a_damaged_folder_is_encoded_again(tmp_path, damage):
    folder = str(tmp_path / "split")
    encoded.encode_rows(example, 9, folder)
    path = os.path.join(folder, "tokens.npy")
    if damage == "truncated":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif damage == "pickled":
        np.save(path, np.array([object()] * 9, dtype=object), allow_pickle=True)
    rows = encoded.encode_rows(example, 10 if damage == "other_size" else 9, folder)
    size = 10 if damage == "other_size" else 9
    np.testing.assert_array_equal(rows.fields["label"], np.arange(size) % 4)
    assert rows.fields["tokens"].dtype == np.int32


def test_a_folder_another_process_completed_first_is_used(tmp_path, monkeypatch):
    """Two processes encoding one split at once: the second to finish finds the first's folder in
    place, and reads it."""
    folder = str(tmp_path / "split")
    real_rename = os.rename

    def rename_after_the_other(source, target):
        if target == folder and not os.path.exists(folder):
            monkeypatch.setattr(os, "rename", real_rename)
            encoded.encode_rows(example, 9, folder)  # the other process, done first
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", rename_after_the_other)
    rows = encoded.encode_rows(example, 9, folder)
    np.testing.assert_array_equal(rows.fields["label"], np.arange(9) % 4)
    assert not [name for name in os.listdir(tmp_path) if ".tmp-" in name]


@pytest.fixture()
def text_files(tmp_path):
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(20)]
    rows = [{"text": " ".join(rng.choice(words, size=int(rng.integers(1, 30)))), "label": str(rng.choice(["a", "b"]))}
            for _ in range(40)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:30]), encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[30:]), encoding="utf-8")
    config = base_config().data
    config.update(dir=str(tmp_path), cache_dir=str(tmp_path / "cache"), format="jsonl", max_len=32,
                  validation_fraction=0.2)
    return config


def test_a_dataset_keeps_each_split_encoded_beside_its_prepared_data_and_batches_by_gathering(text_files):
    dataset = datasets.load_dataset(text_files, seed=0)
    batch = next(iter(dataset.eval_batches("test", 4)))
    folders = os.listdir(os.path.join(text_files.cache_dir, "jcaps_encoded"))
    assert len(folders) == 1  # the test split's; train and validation not yet asked for
    source = dataset.splits["test"].source
    by_examples = dataset.pad_batch([dataset.encode("test", i, source[i]) for i in range(4)], 4)
    assert batch.keys() == by_examples.keys()
    for name in batch:
        np.testing.assert_array_equal(batch[name], by_examples[name])

    # Another vocabulary (here: a larger maximum length) is another encoding, in a folder of its own.
    text_files.max_len = 16
    other = datasets.load_dataset(text_files, seed=0)
    next(iter(other.eval_batches("test", 4)))
    assert len(os.listdir(os.path.join(text_files.cache_dir, "jcaps_encoded"))) == 2
    # The carved splits are encoded by their own examples: another seed carves other ones.
    carved = [datasets.load_dataset(text_files, seed=seed).encoded("validation").fields["index"] for seed in (0, 1)]
    assert len(carved[0]) == len(carved[1]) == 6
