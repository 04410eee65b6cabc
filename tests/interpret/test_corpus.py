"""Explaining a whole split (`jcaps.interpret.corpus`): streamed, resumed after a crash to the
very file an uninterrupted run writes, finished runs left alone, one run at a time, and two
processes of two devices giving the file one process of four does."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from jcaps import attribution
from jcaps.errors import UserError
from jcaps.folder_lock import FolderInUse
from jcaps.interpret import corpus, explain
from jcaps.train.workdir import load_trained
from tests.command_env import command_env
from tests.workdir_flags import own_data_cache

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METHODS = ("gradient", "kernel_shap", "random")
OPTIONS = explain.Options(shap_samples=32)


class Crash(Exception):
    """What a `kill -9` between two writes leaves, simulated in-process."""


@pytest.fixture(scope="module")
def trained(trained_smoke_workdir):
    workdir, _ = trained_smoke_workdir("fasttext_ag_news.py")
    return load_trained(str(workdir), with_data=True)


def run(trained, out, **settings):
    return corpus.explain_workdir(trained, "test", str(out), methods=METHODS, limit=40, with_faithfulness=True,
                                  options=OPTIONS, batch_size=8, **settings)


def lines(out) -> list[str]:
    return (out / "attributions.jsonl").read_text(encoding="utf-8").splitlines()


def without_timing(summary: dict) -> dict:
    return {method: {k: v for k, v in values.items() if k != "seconds_per_100"} for method, values in summary.items()}


def test_a_run_that_crashed_resumes_to_the_file_of_an_uninterrupted_run(trained, tmp_path, monkeypatch):
    reference = run(trained, tmp_path / "whole")
    expected = lines(tmp_path / "whole")
    assert [json.loads(line)["index"] for line in expected] == list(range(40))  # each example once, in order
    assert all("faithfulness" in entry for line in expected for entry in json.loads(line)["explanations"])

    # Crashes after the lines of batches 0-2 are on disk but before batch 2 becomes final, with half
    # a line of batch 3 written: the rerun cuts both off and explains batch 2 again.
    out = tmp_path / "crashed"
    write_whole, writes = corpus._write_whole, []

    def crashing(path, text):
        if path.endswith(".progress.json"):
            writes.append(path)
            if len(writes) == 3:
                with open(path.replace(".progress.json", ".jsonl"), "a", encoding="utf-8") as part:
                    part.write('{"index": 24, "text": "half a li')
                raise Crash
        write_whole(path, text)

    monkeypatch.setattr(corpus, "_write_whole", crashing)
    with pytest.raises(Crash):
        run(trained, out)
    monkeypatch.setattr(corpus, "_write_whole", write_whole)
    assert not (out / "attributions.jsonl").exists()
    # Unfinished work of other settings is not thrown away: refused in one line naming them.
    with pytest.raises(UserError, match=r"^.* holds explanations made with other settings \(seed: 0 -> 1\)$"):
        run(trained, out, seed=1)
    resumed = run(trained, out)
    assert lines(out) == expected
    assert without_timing(resumed) == without_timing(reference)
    assert sorted(os.listdir(out)) == [".lock", "attributions.jsonl", "faithfulness.json", "report.html", "run.json"]

    # Finished: the same command does nothing and answers with the summary.
    def written():  # the lock names its holder each run
        return {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out) if name != ".lock"}

    before = written()
    assert run(trained, out) == resumed
    assert written() == before

    # A finished run of other settings is replaced by the new one.
    run(trained, out, seed=1)
    assert json.loads((out / "run.json").read_text())["settings"]["seed"] == 1
    assert lines(out) != expected and len(lines(out)) == 40  # random and KernelSHAP drew anew


def test_a_second_run_on_the_same_output_is_refused_with_the_locks_message(trained, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    with open(out / ".lock", "w") as lock:  # a run in progress holds the lock
        lock.write("pid 12345 on host\n")
        lock.flush()
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(FolderInUse, match=r"is in use by an explanation run \(pid 12345 on host\); wait for it"):
            run(trained, out)
    assert sorted(os.listdir(out)) == [".lock"]


def command(workdir, out, devices: int, *flags) -> tuple[list[str], dict]:
    args = [sys.executable, "-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir),
            "--out", str(out), "--limit", "24", "--batch_size", "8", "--methods", ",".join(METHODS),
            "--shap_samples", "32", "--faithfulness", "--progress", "none", *flags]
    return args, command_env(devices)


def test_two_processes_of_two_devices_write_what_one_process_of_four_does(trained_smoke_workdir, tmp_path):
    workdir, _ = trained_smoke_workdir("fasttext_ag_news.py")
    args, env = command(workdir, tmp_path / "single", 4)
    single = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stdout + single.stderr

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    processes = []
    for index in range(2):
        args, env = command(workdir, tmp_path / "two", 2, "--num_processes=2", f"--process_id={index}",
                            f"--coordinator_address=localhost:{port}")
        processes.append(subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
    assert lines(tmp_path / "two") == lines(tmp_path / "single")
    assert len(lines(tmp_path / "two")) == 24
    assert "explained 24 examples" in outputs[0] and "explained" not in outputs[1]  # process 0 reports


def test_a_runs_attributions_load_back_as_an_explanation(trained, tmp_path):
    corpus.explain_workdir(trained, "test", str(tmp_path), methods=METHODS, limit=8, with_faithfulness=False,
                           options=OPTIONS, batch_size=8)
    written = [json.loads(line) for line in lines(tmp_path)]
    loaded = attribution.Explanation.load(tmp_path / "attributions.jsonl", method="kernel_shap")
    assert len(loaded) == 8 and loaded.method == "kernel_shap"
    assert loaded.tokens == tuple(tuple(row["tokens"]) for row in written)
    for b, row in enumerate(written):
        length = len(row["tokens"])
        assert loaded.mask[b].sum() == length
        [entry] = row["explanations"]  # a single-label model: its predicted class
        assert int(loaded.target[b]) == entry["target_index"]
        np.testing.assert_array_equal(np.asarray(loaded.scores[b, :length]), np.float32(entry["scores"]["kernel_shap"]))
    with pytest.raises(ValueError, match="holds the scores of gradient, kernel_shap, random; name one"):
        attribution.Explanation.load(tmp_path / "attributions.jsonl")
