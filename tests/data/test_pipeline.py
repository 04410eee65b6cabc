"""TFDS builders and the grain pipeline on tiny generated files."""

from __future__ import annotations

import json
import time

import ml_collections
import numpy as np
import pytest

from jcaps.data import batching, builders, datasets, preparation
from jcaps.data.errors import DataError
from jcaps.train.config import base_config


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def zhang_dir(tmp_path):
    folder = tmp_path / "news"
    folder.mkdir()
    rows = [f'{1 + i % 2},"title {i}","alpha beta {"gamma" if i % 2 else "delta"} word{i}"' for i in range(40)]
    write(folder / "train.csv", "\n".join(rows) + "\n")
    write(folder / "test.csv", '1,"t","alpha onlyintest"\n2,"u","gamma"\n2,"v","gamma gamma"\n')
    write(folder / "classes.txt", "first\nsecond\n")
    return folder


def data_config(folder, cache, **overrides) -> ml_collections.ConfigDict:
    config = base_config().data
    config.dir, config.cache_dir = str(folder), str(cache)
    config.max_len = 64
    config.validation_fraction = 0.25
    for key, value in overrides.items():
        config[key] = value
    return config


def test_zhang_csv_builder_splits_vocabulary_and_labels(zhang_dir, tmp_path):
    dataset = datasets.load_dataset(data_config(zhang_dir, tmp_path / "cache"), seed=0)
    assert {k: len(v.source) for k, v in dataset.splits.items()} == {"train": 30, "validation": 10, "test": 3}
    assert dataset.labels.names == ("first", "second")
    # Vocabulary from train only: a test-only word is unknown.
    assert "onlyintest" not in dataset.vocab.tokens
    assert "gamma" in dataset.vocab.tokens
    encoded = dataset.encode_text("alpha onlyintest")
    assert encoded.tolist() == [dataset.vocab.encode(["alpha"])[0], 1]


def test_validation_is_seeded_and_disjoint(zhang_dir, tmp_path):
    def indices(seed):
        splits = datasets.load_dataset(data_config(zhang_dir, tmp_path / "cache"), seed).splits
        return tuple({int(s.source[i]["line"]) for i in range(len(s.source))} for s in (splits["train"], splits["validation"]))

    train, validation = indices(0)
    assert not train & validation and len(train | validation) == 40
    assert indices(0) == (train, validation)
    assert indices(1) != (train, validation)


def test_eval_batches_cover_each_example_once_with_zero_weight_padding(zhang_dir, tmp_path):
    dataset = datasets.load_dataset(data_config(zhang_dir, tmp_path / "cache"), seed=0)
    batches = list(dataset.eval_batches("validation", batch_size=4))
    assert [b["tokens"].shape[0] for b in batches] == [4, 4, 4]
    weights = np.concatenate([b["weight"] for b in batches])
    indices = np.concatenate([b["index"] for b in batches])
    assert weights.tolist() == [1.0] * 10 + [0.0] * 2
    assert sorted(indices[:10].tolist()) == list(range(10)) and indices[10:].tolist() == [-1, -1]
    # Padding examples are all PAD.
    assert not batches[-1]["tokens"][2:].any()


def test_batches_are_padded_to_bucket_lengths(zhang_dir, tmp_path):
    dataset = datasets.load_dataset(data_config(zhang_dir, tmp_path / "cache", bucket_boundaries=(4, 8)), seed=0)
    lengths = {b["tokens"].shape[1] for b in dataset.eval_batches("train", batch_size=8)}
    assert lengths <= {4, 8, 64}
    assert batching.bucket_length(5, (4, 8), 64) == 8
    assert batching.bucket_length(9, (4, 8), 64) == 64
    assert batching.default_boundaries(100) == (16, 32, 64, 100)


def test_train_iterator_reshuffles_each_epoch_and_resumes_from_its_state(zhang_dir, tmp_path):
    dataset = datasets.load_dataset(data_config(zhang_dir, tmp_path / "cache", validation_fraction=0.0), seed=0)
    iterator = dataset.train_iterator(batch_size=8, seed=3)
    epoch = [next(iterator)["index"] for _ in range(5)]
    order = np.concatenate(epoch)
    assert sorted(order.tolist()) == list(range(40))
    state = iterator.get_state()
    following = [next(iterator)["index"] for _ in range(5)]
    assert not np.array_equal(np.concatenate(following), order)  # epoch 2 is shuffled differently
    restored = dataset.train_iterator(batch_size=8, seed=3)
    restored.set_state(json.loads(json.dumps(state)))  # the state survives a JSON round trip
    np.testing.assert_array_equal(next(restored)["index"], following[0])


def test_each_process_reads_its_rows_of_the_same_global_batches(zhang_dir, tmp_path):
    dataset = datasets.load_dataset(data_config(zhang_dir, tmp_path / "cache"), seed=0)
    shards = [batching.Shard(index, 2) for index in range(2)]
    whole = dataset.train_iterator(batch_size=8, seed=3)
    parts = [dataset.train_iterator(batch_size=8, seed=3, shard=shard) for shard in shards]
    for _ in range(5):
        batch, halves = next(whole), [next(part) for part in parts]
        assert [half["index"].shape for half in halves] == [(4,), (4,)]
        np.testing.assert_array_equal(np.concatenate([half["index"] for half in halves]), batch["index"])
    evaluated = [list(dataset.eval_batches("validation", 4, shard=shard)) for shard in shards]
    for batch, *halves in zip(dataset.eval_batches("validation", 4), *evaluated):
        np.testing.assert_array_equal(np.concatenate([half["weight"] for half in halves]), batch["weight"])
        np.testing.assert_array_equal(np.concatenate([half["index"] for half in halves]), batch["index"])


@pytest.fixture
def varied_lengths_dir(tmp_path):
    folder = tmp_path / "varied"
    folder.mkdir()
    rng = np.random.default_rng(0)
    rows = [f'{1 + i % 2},"t","{" ".join(["w"] * int(n))}"' for i, n in enumerate(rng.integers(1, 60, 96))]
    write(folder / "train.csv", "\n".join(rows) + "\n")
    write(folder / "test.csv", '1,"t","w"\n')
    write(folder / "classes.txt", "first\nsecond\n")
    return folder


def test_length_grouping_pads_less_and_still_sees_each_example_once_an_epoch(varied_lengths_dir, tmp_path):
    config = data_config(varied_lengths_dir, tmp_path / "cache", validation_fraction=0.0, bucket_boundaries=(8, 16, 24, 32, 48))
    dataset = datasets.load_dataset(config, seed=0)
    lengths = dataset.example_lengths("train")

    def epochs(window, seed=3):
        iterator = dataset.train_iterator(batch_size=8, seed=seed, length_window=window)
        return [[next(iterator) for _ in range(12)] for _ in range(2)]

    plain, grouped = epochs(0), epochs(4)
    for epoch in grouped:
        assert sorted(np.concatenate([b["index"] for b in epoch]).tolist()) == list(range(96))
    # A grouped batch holds neighbouring lengths of its window of 4 batches, so batches pad to
    # far fewer positions than random batches do.
    def spread(run):
        return np.mean([np.ptp(lengths[b["index"]]) for epoch in run for b in epoch])

    assert spread(grouped) < 0.5 * spread(plain)
    padded = {name: sum(b["tokens"].size for b in run[0]) for name, run in (("plain", plain), ("grouped", grouped))}
    assert padded["grouped"] < 0.8 * padded["plain"]
    # Epochs differ, and a seed gives the same batches again.
    assert [b["index"].tolist() for b in grouped[0]] != [b["index"].tolist() for b in grouped[1]]
    assert [b["index"].tolist() for b in epochs(4)[1]] == [b["index"].tolist() for b in grouped[1]]


def test_length_grouped_iterator_resumes_from_its_state(varied_lengths_dir, tmp_path):
    config = data_config(varied_lengths_dir, tmp_path / "cache", validation_fraction=0.0)
    dataset = datasets.load_dataset(config, seed=0)
    iterator = dataset.train_iterator(batch_size=8, seed=1, length_window=3)
    for _ in range(17):  # into the second epoch
        next(iterator)
    state = json.loads(json.dumps(iterator.get_state()))
    following = [next(iterator)["index"] for _ in range(3)]
    restored = dataset.train_iterator(batch_size=8, seed=1, length_window=3)
    restored.set_state(state)
    for expected in following:
        np.testing.assert_array_equal(next(restored)["index"], expected)
    with pytest.raises(ValueError, match="length_grouping"):
        dataset.train_iterator(batch_size=8, seed=1, length_window=-1)


def test_bad_row_error_names_file_and_line_through_the_builder(zhang_dir, tmp_path):
    write(zhang_dir / "test.csv", '1,"ok","fine"\nx,"bad","label"\n')
    with pytest.raises(DataError, match=r"test\.csv:2: .*integer"):
        datasets.load_dataset(data_config(zhang_dir, tmp_path / "cache"), seed=0)


def test_missing_data_dir_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match=r"no such data directory"):
        datasets.load_dataset(data_config(tmp_path / "nowhere", tmp_path / "cache"), seed=0)


def test_unknown_test_label_names_file_and_line(tmp_path):
    folder = tmp_path / "j"
    folder.mkdir()
    write(folder / "train.jsonl", "".join(json.dumps({"text": f"w{i}", "label": "ab"[i % 2]}) + "\n" for i in range(6)))
    write(folder / "test.jsonl", json.dumps({"text": "x", "label": "a"}) + "\n" + json.dumps({"text": "y", "label": "zzz"}) + "\n")
    # When the dataset is opened, not when the test split is first evaluated (after training).
    with pytest.raises(DataError, match=r"test\.jsonl:2: unknown label 'zzz' \(not among the 2 training labels\)"):
        datasets.load_dataset(data_config(folder, tmp_path / "cache", format="jsonl"), seed=0)
    dataset = datasets.load_dataset(data_config(folder, tmp_path / "cache", format="jsonl", drop_bad_rows=True), 0)
    assert dataset.labels.names == ("a", "b")
    assert len(dataset.splits["test"].source) == 1 and dataset.text("test", 0) == "x"
    assert dataset.splits["test"].dropped["count"] == 1 and "test.jsonl:2" in dataset.splits["test"].dropped["first"][0]


def test_multi_label_jsonl_gives_multi_hot_targets(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    rows = [{"text": "a b", "labels": ["x", "y"]}, {"text": "c", "labels": ["y"]}, {"text": "d", "labels": ["z"]}]
    write(folder / "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write(folder / "test.jsonl", json.dumps(rows[0]) + "\n")
    config = data_config(folder, tmp_path / "cache", format="jsonl", label_key="labels", validation_fraction=0.0)
    dataset = datasets.load_dataset(config, seed=0)
    [batch] = list(dataset.eval_batches("test", batch_size=2))
    assert dataset.labels.names == ("x", "y", "z")
    np.testing.assert_array_equal(batch["labels"], [[1, 1, 0], [0, 0, 0]])


def test_text_labels_builder_reads_parallel_files(tmp_path):
    folder = tmp_path / "emoji"
    folder.mkdir()
    write(folder / "us_trial.text", "love it\nso sad\nhappy day\nrain again\n")
    write(folder / "us_trial.labels", "0\n1\n0\n1\n")
    write(folder / "us_test.text", "love\n")
    write(folder / "us_test.labels", "0\n")
    write(folder / "us_mapping.txt", "0\t❤\t_red_heart_\t\n1\t😢\t_crying_face_\t\n")
    config = data_config(folder, tmp_path / "cache", format="text_labels", train_file="us_trial", test_file="us_test",
                         tokenizer="chars", validation_fraction=0.0)
    dataset = datasets.load_dataset(config, seed=0)
    assert dataset.labels.names == ("red_heart", "crying_face")
    assert len(dataset.splits["train"].source) == 4


def test_sentences_tokenizer_gives_nested_batches(zhang_dir, tmp_path):
    config = data_config(zhang_dir, tmp_path / "cache", tokenizer="sentences", max_sentences=8, max_len=16)
    dataset = datasets.load_dataset(config, seed=0)
    [batch, *_] = list(dataset.eval_batches("test", batch_size=4))
    assert batch["tokens"].ndim == 3 and batch["tokens"].shape[0] == 4


def test_builder_cache_follows_file_changes(zhang_dir, tmp_path):
    cache = tmp_path / "cache"
    first = preparation.prepare_local_files("zhang_csv", str(zhang_dir), str(cache))
    write(zhang_dir / "test.csv", '1,"t","alpha"\n')
    second = preparation.prepare_local_files("zhang_csv", str(zhang_dir), str(cache))
    assert first.builder_config.name != second.builder_config.name
    assert len(second.as_data_source(split="test")) == 1


def test_a_run_waiting_on_another_runs_preparation_reads_the_prepared_splits(zhang_dir, tmp_path):
    # Two runs started together on the same files: the second waits on the cache lock while the
    # first prepares, then must see the prepared splits, not the empty info of before.
    import fcntl
    import threading

    cache = tmp_path / "cache"
    cache.mkdir()
    result = {}
    with open(cache / ".prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiting = threading.Thread(
            target=lambda: result.update(builder=preparation.prepare_local_files("zhang_csv", str(zhang_dir), str(cache)))
        )
        waiting.start()
        time.sleep(0.5)  # let it reach the lock
        builders.TEXT_BUILDERS["zhang_csv"](directory=str(zhang_dir), data_dir=str(cache)).download_and_prepare()
        fcntl.flock(lock, fcntl.LOCK_UN)
    waiting.join(timeout=60)
    assert set(result["builder"].info.splits) == {"train", "test"}


def test_catalogue_datasets_pass_through_tfds_data_source(tmp_path):
    import tensorflow_datasets as tfds

    class JcapsToyNews(tfds.core.GeneratorBasedBuilder):
        """A catalogue-style dataset: two text features and a ClassLabel, prepared offline."""

        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            features = {"title": tfds.features.Text(), "description": tfds.features.Text(),
                        "label": tfds.features.ClassLabel(names=["a", "b"])}
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(features))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(20), "test": self._generate_examples(4)}

        def _generate_examples(self, n):
            for i in range(n):
                yield str(i), {"title": ["alpha", "beta"][i % 2], "description": "body", "label": i % 2}

    config = base_config().data
    config.source, config.name, config.cache_dir = "tfds", "jcaps_toy_news", str(tmp_path)
    config.text_keys = ("title", "description")
    config.validation_fraction = 0.25
    dataset = datasets.load_dataset(config, seed=0)
    assert dataset.labels.names == ("a", "b")
    assert {k: len(v.source) for k, v in dataset.splits.items()} == {"train": 15, "validation": 5, "test": 4}
    assert {"alpha", "beta", "body"} <= set(dataset.vocab.tokens)
    assert dataset.splits["test"].path == "tfds:jcaps_toy_news/test"


def test_balanced_class_weights_equalise_the_classes(tmp_path):
    folder = tmp_path / "skewed"
    folder.mkdir()
    write(folder / "train.csv", "".join(f'{1 if i < 6 else 2},"w{i}"\n' for i in range(8)))  # 6 vs 2
    write(folder / "test.csv", '1,"a"\n')
    dataset = datasets.load_dataset(data_config(folder, tmp_path / "cache", validation_fraction=0.0), seed=0)
    weights = dataset.balanced_class_weights()
    np.testing.assert_allclose(weights, [8 / (2 * 6), 8 / (2 * 2)])
    batch = next(dataset.train_iterator(batch_size=8, seed=0, class_weights=weights))
    per_class = [batch["weight"][batch["label"] == c].sum() for c in (0, 1)]
    np.testing.assert_allclose(per_class, [4.0, 4.0])


def test_square_root_class_weights_sit_between_none_and_balanced(tmp_path):
    folder = tmp_path / "skewed"
    folder.mkdir()
    write(folder / "train.csv", "".join(f'{1 if i < 6 else 2},"w{i}"\n' for i in range(8)))  # 6 vs 2
    write(folder / "test.csv", '1,"a"\n')
    dataset = datasets.load_dataset(data_config(folder, tmp_path / "cache", validation_fraction=0.0), seed=0)
    weights = dataset.balanced_class_weights(power=0.5)
    # (8 / 12) ** 0.5 and (8 / 4) ** 0.5, scaled so that the 8 examples weigh 8 in all.
    raw = np.array([(8 / 12) ** 0.5, 2**0.5])
    np.testing.assert_allclose(weights, raw * 8 / (6 * raw[0] + 2 * raw[1]), rtol=1e-6)
    assert weights[1] / weights[0] == pytest.approx(3**0.5, rel=1e-6)  # balanced: 3
