"""Series datasets end to end: TFDS preparation of `.ts`, idx and box data, standardisation fitted on
training data only, masks and buckets, and the metadata a workdir keeps for inference."""
import gzip
import struct

import numpy as np
import pytest

from jcaps.data import boxes, datasets, series
from jcaps.data.errors import DataError
from jcaps.train.config import series_config

TRAIN = [  # (label, channel 0, channel 1): unequal lengths 3, 5, 2, 4
    ("a", [1, 2, 3], [0, 0, 1]),
    ("b", [4, 5, 6, 7, 8], [1, 1, 1, 1, 2]),
    ("a", [9, 8], [3, 3]),
    ("b", [1, 1, 1, 1], [0, 2, 0, 2]),
]
TEST = [("b", [2, 2, 2, 2, 2, 2], [1, 0, 1, 0, 1, 0]), ("a", [5, 4, 3], [2, 2, 2])]


def write_ts(path, examples, equal=False):
    header = ["@problemName Toy", "@timeStamps false", "@univariate false", "@dimensions 2",
              f"@equalLength {'true' if equal else 'false'}", "@classLabel true a b", "@data"]
    rows = [",".join(map(str, c0)) + ":" + ",".join(map(str, c1)) + ":" + label for label, c0, c1 in examples]
    path.write_text("\n".join(header + rows) + "\n")


@pytest.fixture
def ts_config(tmp_path):
    directory = tmp_path / "toy"
    directory.mkdir()
    write_ts(directory / "Toy_TRAIN.ts", TRAIN)
    write_ts(directory / "Toy_TEST.ts", TEST)
    config = series_config()
    config.data.update(format="ts", dir=str(directory), cache_dir=str(tmp_path / "cache"), normalize="feature",
                       validation_fraction=0.0)
    return config


def test_ts_splits_standardised_on_train_and_batched_with_masks(ts_config):
    dataset = datasets.load_dataset(ts_config.data, seed=0)
    assert {name: len(split.source) for name, split in dataset.splits.items()} == {"train": 4, "test": 2, "validation": 0}
    assert dataset.labels.names == ("a", "b") and dataset.num_features == 2
    steps = np.concatenate([np.stack([c0, c1], axis=1) for _, c0, c1 in TRAIN]).astype(np.float64)
    mean, std = steps.mean(axis=0), steps.std(axis=0)
    batch = next(iter(dataset.eval_batches("test", 4)))
    # Lengths 6 and 3 in a bucket of 8 (powers of two from 8 up to the longest series, 6).
    assert batch["series"].shape == (4, 6, 2) and batch["mask"].shape == (4, 6)
    np.testing.assert_array_equal(batch["mask"].sum(axis=1), [6, 3, 0, 0])
    expected = (np.stack([TEST[1][1], TEST[1][2]], axis=1) - mean) / std
    np.testing.assert_allclose(batch["series"][1, :3], expected, rtol=1e-5)
    assert not batch["series"][1, 3:].any() and not batch["series"][2:].any()
    np.testing.assert_array_equal(batch["label"][:2], [1, 0])
    np.testing.assert_array_equal(batch["weight"], [1, 1, 0, 0])


def test_metadata_round_trip_encodes_like_training(ts_config, tmp_path):
    dataset = datasets.load_dataset(ts_config.data, seed=0)
    saved = tmp_path / "saved"
    saved.mkdir()
    dataset.save_metadata(str(saved))
    restored = datasets.inference_dataset(ts_config.data, str(saved))
    assert restored.labels == dataset.labels and restored.num_features == 2 and not restored.splits
    raw = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(restored.encode_series(raw), dataset.encode_series(raw))
    with pytest.raises(DataError, match="expected a \\[steps, 2\\] series"):
        restored.encode_series(np.zeros((3, 5)))


def test_time_feature_standardisation_needs_equal_lengths(ts_config):
    ts_config.data.normalize = "time_feature"
    with pytest.raises(ValueError, match="one length.*normalize='feature'"):
        datasets.load_dataset(ts_config.data, seed=0)


def test_time_feature_standardisation_is_per_cell(tmp_path):
    directory = tmp_path / "eq"
    directory.mkdir()
    examples = [("a", [1, 2], [0, 4]), ("b", [3, 6], [2, 4]), ("a", [5, 10], [4, 4])]
    write_ts(directory / "Eq_TRAIN.ts", examples, equal=True)
    write_ts(directory / "Eq_TEST.ts", examples[:1], equal=True)
    config = series_config()
    config.data.update(format="ts", dir=str(directory), cache_dir=str(tmp_path / "cache"), validation_fraction=0.0)
    dataset = datasets.load_dataset(config.data, seed=0)
    batch = next(iter(dataset.eval_batches("train", 3)))
    # Each (step, feature) cell has mean 0 and std 1 over the training series; the constant
    # cell (step 1, feature 1 is always 4) is only centred.
    np.testing.assert_allclose(batch["series"].mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(batch["series"].std(axis=0), [[1, 1], [1, 0]], atol=1e-6)
    assert batch["series"].shape == (3, 2, 2)  # equal lengths: one bucket, the length itself


def test_unknown_test_label_names_the_test_file_and_line(tmp_path):
    directory = tmp_path / "bad"
    directory.mkdir()
    write_ts(directory / "Bad_TRAIN.ts", TRAIN)
    (directory / "Bad_TEST.ts").write_text(
        "@problemName Toy\n@univariate false\n@dimensions 2\n@equalLength false\n@classLabel true a b z\n@data\n"
        "1,2:3,4:a\n1,2:3,4:z\n"
    )
    config = series_config()
    config.data.update(format="ts", dir=str(directory), cache_dir=str(tmp_path / "cache"), normalize="feature")
    with pytest.raises(DataError, match="Bad_TEST.ts:8: unknown label 'z'"):
        datasets.load_dataset(config.data, seed=0)


def write_idx(path, array, type_code=0x08):
    header = struct.pack(">HBB", 0, type_code, array.ndim) + struct.pack(f">{array.ndim}i", *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(">u1").tobytes())


def test_idx_images_as_row_sequences_with_a_carved_test_split(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(40, 3, 4)).astype(np.uint8)
    labels = (np.arange(40) % 3).astype(np.uint8)
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels)
    config = series_config()
    config.data.update(format="idx", dir=str(tmp_path), cache_dir=str(tmp_path / "cache"), train_file="t10k",
                       test_fraction=0.25, validation_fraction=0.1, normalize="none")
    dataset = datasets.load_dataset(config.data, seed=0)
    sizes = {name: len(split.source) for name, split in dataset.splits.items()}
    assert sizes == {"train": 27, "validation": 3, "test": 10}
    assert dataset.num_features == 4 and dataset.labels.names == ("0", "1", "2")
    seen = []
    for split in ("train", "validation", "test"):
        for batch in dataset.eval_batches(split, 8):
            for b in np.flatnonzero(batch["weight"]):
                row = batch["series"][b]
                match = [i for i in range(40) if np.allclose(images[i] / 255.0, row)]
                assert len(match) == 1 and labels[match[0]] == batch["label"][b]
                seen.append(match[0])
    assert sorted(seen) == list(range(40))  # the three splits partition the file


def test_missing_idx_file_is_named(tmp_path):
    config = series_config()
    config.data.update(format="idx", dir=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(DataError, match="train-images-idx3-ubyte"):
        datasets.load_dataset(config.data, seed=0)


def test_box_data_keeps_the_generators_order(tmp_path):
    config = series_config()
    config.data.update(format="boxes", box="middle", cache_dir=str(tmp_path / "cache"), normalize="none",
                       box_train_size=24, box_test_size=12, box_time_steps=10, box_features=10)
    dataset = datasets.load_dataset(config.data, seed=0)
    generated = boxes.generate_boxes("middle", "test", 0, num_examples=12, time_steps=10, num_features=10)
    batch = next(iter(dataset.eval_batches("test", 16)))
    np.testing.assert_array_equal(batch["series"][:12], generated.series)
    np.testing.assert_array_equal(batch["label"][:12], generated.labels)
    assert batch["mask"][:12].all()
    assert isinstance(dataset, series.SeriesDataset)


def test_saved_statistics_holding_a_pickled_object_are_one_line_and_never_run(tmp_path):
    from jcaps.data.errors import DataError
    from jcaps.data.series import Standardizer

    path = tmp_path / "series_stats.npz"
    np.savez(path, mean=np.array([print], dtype=object), std=np.ones(3, np.float32))
    with pytest.raises(DataError, match="series_stats.npz: not a saved standardisation: Object arrays cannot be loaded"):
        Standardizer.load(str(path))
    path.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(DataError, match="not a saved standardisation"):
        Standardizer.load(str(path))
