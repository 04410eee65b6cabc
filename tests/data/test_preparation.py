"""Opening a dataset before training: the catalogue's download check, the whole dataset's labels
checked up front, and no leftovers of a preparation that failed. No test touches the network."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time

import pytest

from jcaps.data import preparation
from jcaps.data.errors import DataError
from jcaps.errors import ConfigError, UserError
from jcaps.train import loop
from jcaps.train.config import base_config, load, series_config
from tests.data.test_pipeline import data_config, write

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def closed_port() -> int:
    """A local port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# A catalogue dataset that is not prepared and cannot be downloaded
# ---------------------------------------------------------------------------------------------


def test_an_unprepared_catalogue_dataset_offline_fails_fast_with_the_local_files_hint(tmp_path, monkeypatch):
    monkeypatch.setenv(preparation.DOWNLOAD_PROBE_ENV, f"127.0.0.1:{closed_port()}")
    config = base_config().data
    config.name, config.cache_dir = "ag_news_subset", str(tmp_path / "tfds")
    started = time.monotonic()
    with pytest.raises(UserError) as error:
        preparation.prepare_text_splits(config, seed=0)
    assert time.monotonic() - started < 10
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"the TFDS dataset 'ag_news_subset' is not prepared in {tmp_path / 'tfds'} and cannot "
                              "be downloaded: 127.0.0.1:")
    assert "--config.data.dir" in error.value.hint and "zhang_csv" in error.value.hint
    # Nothing was written where prepared datasets live.
    assert not (tmp_path / "tfds").exists() or not any(p.is_dir() for p in (tmp_path / "tfds").rglob("*"))


def test_a_config_without_a_catalogue_dataset_asks_for_local_files():
    config = base_config().data
    config.format = "jsonl"
    with pytest.raises(ConfigError, match=r"data\.name is empty") as error:
        preparation.prepare_text_splits(config, seed=0)
    assert "--config.data.dir" in error.value.hint


def test_the_download_check_address_comes_from_the_environment_or_the_https_proxy(monkeypatch):
    for name in ("https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(preparation.DOWNLOAD_PROBE_ENV, raising=False)
    assert preparation.download_probe_address() == ("storage.googleapis.com", 443)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert preparation.download_probe_address() == ("proxy.example", 3128)
    monkeypatch.setenv(preparation.DOWNLOAD_PROBE_ENV, "mirror.example:8443")
    assert preparation.download_probe_address() == ("mirror.example", 8443)
    monkeypatch.setenv(preparation.DOWNLOAD_PROBE_ENV, "off")
    assert preparation.download_probe_address() is None
    monkeypatch.setenv(preparation.DOWNLOAD_PROBE_ENV, "nowhere")
    with pytest.raises(ConfigError, match=preparation.DOWNLOAD_PROBE_ENV):
        preparation.download_probe_address()


def test_the_download_check_tells_a_listening_port_from_a_closed_one():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert preparation.download_unreachable(server.getsockname(), timeout=2.0) is None
    assert "refused" in preparation.download_unreachable(("127.0.0.1", closed_port()), timeout=2.0).lower()


# ---------------------------------------------------------------------------------------------
# A local preparation that fails leaves nothing behind
# ---------------------------------------------------------------------------------------------


def write_into(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    return write(path, text)


def directories(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir())


@pytest.mark.parametrize("drop_bad_rows", [False, True])
def test_a_failed_preparation_leaves_no_empty_or_partial_folders(tmp_path, drop_bad_rows):
    folder = tmp_path / "news"
    folder.mkdir()
    write(folder / "train.csv", "".join(f'{1 + i % 2},"t{i}","text {i}"\n' for i in range(8)) + 'x,"bad","row"\n')
    # A stray quote makes the rest of the test file unreadable: an error even with drop_bad_rows,
    # raised after the training split (and its dropped-rows record) was written.
    write(folder / "test.csv", '1,"ok","fine"\n2,"broken "quote","here"\n')
    write(folder / "classes.txt", "first\nsecond\n")
    cache = tmp_path / "cache"
    write_into(cache / "other" / "kept.txt", "not ours")  # what was there before stays
    (cache / "empty_before").mkdir()
    config = data_config(folder, cache, drop_bad_rows=drop_bad_rows)
    with pytest.raises(DataError, match=r"test\.csv:2: malformed CSV" if drop_bad_rows else r"train\.csv:9: "):
        preparation.prepare_text_splits(config, seed=0)
    assert directories(cache) == ["empty_before", "other"]
    assert (cache / "other" / "kept.txt").is_file()


def test_preparing_local_files_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    # TFDS' DatasetInfo makes a temporary folder for metadata from its bucket, which local
    # files never have, before it looks; a text and a series builder skip that.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    folder = tmp_path / "news"
    folder.mkdir()
    write(folder / "train.csv", "".join(f'{1 + i % 2},"t{i}","text {i}"\n' for i in range(8)))
    write(folder / "test.csv", '1,"ok","fine"\n2,"also","fine"\n')
    preparation.prepare_text_splits(data_config(folder, tmp_path / "cache"), seed=0)
    boxes = series_config().data
    boxes.update(format="boxes", cache_dir=str(tmp_path / "cache"), box_train_size=8, box_test_size=4,
                 box_time_steps=5, box_features=3)
    preparation.prepare_series_splits(boxes)
    assert list(temporary.iterdir()) == []


def test_removing_new_directories_keeps_what_holds_files_it_did_not_make(tmp_path):
    (tmp_path / "old").mkdir()
    before = preparation.directories_under(str(tmp_path))
    (tmp_path / "old" / "new_empty" / "deeper").mkdir(parents=True)
    write_into(tmp_path / "name" / "incomplete.AB12_1.0.0" / "shard", "partial")
    write_into(tmp_path / "made" / "file", "someone's")
    preparation.remove_new_directories(str(tmp_path), before)
    assert directories(tmp_path) == ["made", "old"]


# ---------------------------------------------------------------------------------------------
# The whole dataset is checked before the first training step
# ---------------------------------------------------------------------------------------------


def write_jsonl(path, records):
    write(path, "".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.slow
def test_an_unknown_multi_label_test_label_stops_training_before_its_first_step(tmp_path):
    folder = tmp_path / "reuters"
    folder.mkdir()
    write_jsonl(folder / "modapte_train.jsonl",
                [{"text": f"oil price {i}", "labels": ["crude"] if i % 2 else ["crude", "ship"]} for i in range(40)])
    write_jsonl(folder / "modapte_test.jsonl",
                [{"text": "oil", "labels": ["crude"]}, {"text": "grain ship", "labels": ["ship", "grain"]}])
    config = load(os.path.join(ROOT, "configs", "sgm_reuters.py:smoke"))
    config.data.source, config.data.dir, config.data.cache_dir = "local", str(folder), str(tmp_path / "tfds")
    config.data.drop_bad_rows = False  # the Reuters configs drop bad rows; here the error is the point
    config.train.progress = "none"
    workdir = tmp_path / "run"
    with pytest.raises(DataError, match=r"modapte_test\.jsonl:2: unknown label 'grain'"):
        loop.train_and_evaluate(config, str(workdir))
    checkpoints = workdir / "checkpoints"
    assert not checkpoints.exists() or not [p for p in checkpoints.iterdir() if p.name.isdigit()]
    metrics = workdir / "metrics.jsonl"
    assert not metrics.exists() or '"train"' not in metrics.read_text(encoding="utf-8")


PREPARE_AGAIN = """
import sys
from jcaps.data import preparation
from tests.data.test_pipeline import data_config
splits = preparation.prepare_text_splits(data_config(sys.argv[1], sys.argv[2]), seed=0)
print(sorted((name, [split.source[i]["text"] for i in range(len(split.source))]) for name, split in splits.splits.items()))
"""


def prepared_news(tmp_path):
    folder = tmp_path / "news"
    folder.mkdir()
    write(folder / "train.csv", "".join(f'{1 + i % 2},"t{i}","text {i}"\n' for i in range(8)))
    write(folder / "test.csv", '1,"ok","fine"\n2,"also","fine"\n')
    cache = tmp_path / "cache"
    preparation.prepare_text_splits(data_config(folder, cache), seed=0)
    (prepared,) = cache.glob("zhang_csv/*/1.0.0")
    return folder, cache, prepared


@pytest.mark.parametrize("damaged", ["dataset_info.json", "zhang_csv-test.array_record-00000-of-00001"])
def test_a_damaged_preparation_of_local_files_is_prepared_again_with_one_line(tmp_path, damaged):
    import subprocess
    import sys

    from tests.command_env import command_env

    folder, cache, prepared = prepared_news(tmp_path)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    intact = subprocess.run([sys.executable, "-c", PREPARE_AGAIN, str(folder), str(cache)], cwd=root,
                            capture_output=True, text=True, env=command_env(), timeout=120)
    path = prepared / damaged
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    # A new process: one that prepared the files may still hold them open.
    again = subprocess.run([sys.executable, "-c", PREPARE_AGAIN, str(folder), str(cache)], cwd=root,
                           capture_output=True, text=True, env=command_env(), timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == intact.stdout.splitlines()[-1]  # after a line saying it prepares
    warnings = [line for line in again.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: the prepared data in {prepared} is damaged (")
    assert "Traceback" not in again.stderr
