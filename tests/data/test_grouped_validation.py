"""`data.group_key`: validation carved by whole groups (sibling packages never on both sides)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jcaps.data import datasets
from jcaps.data.errors import DataError
from jcaps.data.readers.jsonl import read_jsonl
from jcaps.data.splits import Split, carve_validation, group_ids
from jcaps.errors import ConfigError
from jcaps.train.config import base_config, from_json, series_config, to_json, validate


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def grouped_records(num_groups: int, seed: int = 0) -> list[dict]:
    """Groups of 1 to 5 records; every record of group g has label `g % 3` and text `word{g}`."""
    rng = np.random.default_rng(seed)
    records = []
    for group in range(num_groups):
        for member in range(int(rng.integers(1, 6))):
            records.append({"text": f"word{group} member{member}", "labels": [f"tag{group % 3}"],
                            "source": f"pkg{group}"})
    return records


def test_reader_keeps_the_group_and_names_the_line_that_lacks_it(tmp_path):
    path = tmp_path / "train.jsonl"
    write_jsonl(path, [{"text": "a", "labels": ["x"], "source": "foo"}, {"text": "b", "labels": ["y"], "source": 7}])
    examples = [example for _, example in read_jsonl(str(path), "labels", group_key="source")]
    assert [e["source"] for e in examples] == ["foo", "7"]
    assert "source" not in dict(read_jsonl(str(path), "labels"))["1"]

    write_jsonl(path, [{"text": "a", "labels": ["x"], "source": "foo"}, {"text": "b", "labels": ["y"]}])
    with pytest.raises(DataError, match=r"train.jsonl:2: missing key 'source'"):
        list(read_jsonl(str(path), "labels", group_key="source"))
    write_jsonl(path, [{"text": "a", "labels": ["x"], "source": True}])
    with pytest.raises(DataError, match=r"train.jsonl:1: group 'source' must be a string or an integer"):
        list(read_jsonl(str(path), "labels", group_key="source"))


class ListSource(list):
    """A list of example dicts is a random-access source."""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_group_falls_on_both_sides(seed):
    records = grouped_records(200, seed)
    train = Split(ListSource(records), "train.jsonl")
    carved = carve_validation(train, 0.1, seed, group_key="source")
    sides = [{carved[part].source[i]["source"] for i in range(len(carved[part].source))}
             for part in ("train", "validation")]
    assert not sides[0] & sides[1]
    assert len(carved["train"].source) + len(carved["validation"].source) == len(records)
    # At least the fraction asked for, and at most one group (5 records) more.
    assert round(0.1 * len(records)) <= len(carved["validation"].source) <= round(0.1 * len(records)) + 5
    again = carve_validation(train, 0.1, seed, group_key="source")
    assert list(again["validation"].source._indices) == list(carved["validation"].source._indices)


def test_rows_carving_splits_groups_and_groups_carving_does_not():
    # The row carving, for contrast: with groups of up to 5 records it does split some groups.
    records = grouped_records(200)
    train = Split(ListSource(records), "train.jsonl")
    by_rows = carve_validation(train, 0.2, 0)
    sides = [{by_rows[p].source[i]["source"] for i in range(len(by_rows[p].source))} for p in ("train", "validation")]
    assert sides[0] & sides[1]
    assert len(carve_validation(train, 0.0, 0, group_key="source")["validation"].source) == 0


def test_group_ids_number_groups_in_order_of_first_appearance():
    source = ListSource([{"g": "b"}, {"g": "a"}, {"g": "b"}, {"g": "c"}])
    np.testing.assert_array_equal(group_ids(source, "g"), [0, 1, 0, 2])


def test_grouped_dataset_end_to_end(tmp_path):
    folder = tmp_path / "tags"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", grouped_records(60))
    write_jsonl(folder / "test.jsonl", grouped_records(5, seed=9))
    config = base_config().data
    config.update(dir=str(folder), cache_dir=str(tmp_path / "cache"), format="jsonl", label_key="labels",
                  validation_fraction=0.25, group_key="source", max_len=16)
    dataset = datasets.load_dataset(config, seed=3)
    groups = [{dataset.splits[p].source[i]["source"] for i in range(len(dataset.splits[p].source))}
              for p in ("train", "validation")]
    assert groups[0] and groups[1] and not groups[0] & groups[1]
    # The prepared data keeps the group, so the same files without it are prepared apart.
    config.group_key = ""
    plain = datasets.load_dataset(config, seed=3)
    assert "source" not in plain.splits["train"].source[0]


def test_group_key_of_a_format_without_groups_is_refused(tmp_path):
    folder = tmp_path / "news"
    folder.mkdir()
    (folder / "train.csv").write_text('1,"t","a b"\n2,"u","c d"\n', encoding="utf-8")
    (folder / "test.csv").write_text('1,"t","a b"\n', encoding="utf-8")
    config = base_config().data
    config.update(dir=str(folder), cache_dir=str(tmp_path / "cache"), group_key="source")
    with pytest.raises(ConfigError, match=r"data.group_key: zhang_csv files have no field besides"):
        datasets.load_dataset(config, seed=0)


@pytest.mark.parametrize("make, value, message", [
    (base_config, "text", r"data.group_key must be a feature besides the text and labels"),
    (base_config, "label", r"data.group_key must be a feature besides the text and labels"),
    (series_config, "source", r"series formats have no group field"),
])
def test_config_refuses_bad_group_keys(make, value, message):
    config = make()
    config.model.name = "fasttext"
    config.data.group_key = value
    with pytest.raises(ConfigError, match=message):
        validate(config)


def test_configs_saved_before_the_key_existed_carve_by_rows():
    config = base_config()
    saved = json.loads(to_json(config))
    del saved["data"]["group_key"]
    assert from_json(json.dumps(saved)).data.group_key == ""
