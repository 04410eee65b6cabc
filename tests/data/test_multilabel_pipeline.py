"""Multi-label data: label-sequence targets, label order, and dropping bad rows on request."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jcaps.data import datasets
from jcaps.data.errors import DataError
from jcaps.data.vocab import EOS, NUM_SPECIAL
from tests.data.test_pipeline import data_config


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def multilabel_dir(tmp_path):
    """Label counts in train: c 6, a 4, b 2 (alphabetical order a, b, c; frequency c, a, b)."""
    folder = tmp_path / "ml"
    folder.mkdir()
    train = [{"text": "one c", "labels": ["c"]}] * 3 + [{"text": "two a b c", "labels": ["b", "a", "c"]}] * 2
    train += [{"text": "three a c", "labels": ["a", "c"]}] * 1 + [{"text": "four a", "labels": ["a"]}]
    write_jsonl(folder / "train.jsonl", train)
    write_jsonl(folder / "test.jsonl", [{"text": "b then a", "labels": ["b", "a"]}])
    return folder


def sequences(folder, tmp_path, order):
    config = data_config(folder, tmp_path / "cache", format="jsonl", label_key="labels", label_order=order,
                         validation_fraction=0.0)
    dataset = datasets.load_dataset(config, seed=0)
    batch = next(dataset.eval_batches("train", 8))
    return dataset, batch


def ids(dataset, *names):
    return [dataset.labels.names.index(n) + NUM_SPECIAL for n in names]


@pytest.mark.parametrize(
    "order, expected",
    [("frequency", ("c", "a", "b")), ("alphabetical", ("a", "b", "c")), ("given", ("b", "a", "c"))],
)
def test_label_sequences_follow_the_configured_order_then_eos_then_pad(multilabel_dir, tmp_path, order, expected):
    dataset, batch = sequences(multilabel_dir, tmp_path, order)
    sequence = batch["label_sequence"]
    assert sequence.shape == (8, 4)  # longest 3 labels + EOS, rounded up to a power of two
    texts = [dataset.text("train", int(i)) for i in batch["index"][:7]]
    # The "a b c" documents (given order b, a, c) and the "c" ones.
    assert sequence[texts.index("two a b c")].tolist() == ids(dataset, *expected) + [EOS]
    assert sequence[texts.index("one c")].tolist() == ids(dataset, "c") + [EOS, 0, 0]
    # Padding rows: all PAD; multi-hot targets agree with the sequences.
    assert not sequence[7].any()
    for row in range(7):
        real = sequence[row][sequence[row] >= NUM_SPECIAL] - NUM_SPECIAL
        assert sorted(real.tolist()) == np.flatnonzero(batch["labels"][row]).tolist()


def test_bad_rows_are_errors_unless_dropped_and_then_counted(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    records = [{"text": f"doc {i}", "labels": ["x" if i % 2 else "y"]} for i in range(10)]
    records[4] = {"text": "  ", "labels": ["x"]}
    write_jsonl(folder / "train.jsonl", records)
    write_jsonl(folder / "test.jsonl", [{"text": "", "labels": ["x"]}, {"text": "ok", "labels": ["y"]}])
    with pytest.raises(DataError, match=r"train.jsonl:5: empty text"):
        datasets.load_dataset(data_config(folder, tmp_path / "cache", format="jsonl", label_key="labels"), 0)
    config = data_config(folder, tmp_path / "cache", format="jsonl", label_key="labels", drop_bad_rows=True)
    for _ in range(2):  # prepared, then read back from the cache: the record survives
        splits = datasets.load_dataset(config, 0).splits
        assert len(splits["train"].source) + len(splits["validation"].source) == 9
        assert splits["train"].dropped["count"] == 1 and "train.jsonl:5" in splits["train"].dropped["first"][0]
        assert splits["test"].dropped["count"] == 1 and len(splits["test"].source) == 1
        assert splits["validation"].dropped is None


def test_unknown_test_label_is_an_error_naming_file_and_line_when_the_dataset_opens(multilabel_dir, tmp_path):
    write_jsonl(multilabel_dir / "test.jsonl", [{"text": "x", "labels": ["a"]}, {"text": "y", "labels": ["b", "zz"]}])
    with pytest.raises(DataError, match=r"test\.jsonl:2: unknown label 'zz'"):
        sequences(multilabel_dir, tmp_path, "frequency")


def test_unknown_test_labels_are_dropped_and_counted_on_request(multilabel_dir, tmp_path):
    records = [{"text": "x", "labels": ["a"]}, {"text": "", "labels": ["a"]}, {"text": "y", "labels": ["b", "zz"]},
               {"text": "z", "labels": ["c"]}]
    write_jsonl(multilabel_dir / "test.jsonl", records)
    config = data_config(multilabel_dir, tmp_path / "cache", format="jsonl", label_key="labels", drop_bad_rows=True)
    dataset = datasets.load_dataset(config, seed=0)
    test = dataset.splits["test"]
    assert [dataset.text("test", i) for i in range(len(test.source))] == ["x", "z"]
    # The empty text (dropped while reading) and the unknown label, counted together.
    assert test.dropped["count"] == 2
    assert "test.jsonl:2: empty text" in test.dropped["first"][0] and "test.jsonl:3: unknown label 'zz'" in test.dropped["first"][1]
    assert len(list(dataset.eval_batches("test", 4))) == 1


def test_a_label_seen_only_in_the_carved_validation_part_is_still_a_label(tmp_path):
    folder = tmp_path / "rare"
    folder.mkdir()
    records = [{"text": f"doc {i}", "labels": ["common"]} for i in range(20)]
    records[7]["labels"] = ["common", "rare"]
    write_jsonl(folder / "train.jsonl", records)
    write_jsonl(folder / "test.jsonl", [{"text": "x", "labels": ["rare"]}])
    for seed in range(4):  # whichever part the rare example lands in
        config = data_config(folder, tmp_path / "cache", format="jsonl", label_key="labels", validation_fraction=0.5)
        dataset = datasets.load_dataset(config, seed=seed)
        assert dataset.labels.names == ("common", "rare")
        for split in ("train", "validation", "test"):
            list(dataset.eval_batches(split, 8))
