"""`python -m jcaps.interpret` on the session's iCapsNets `:smoke` workdirs (conftest.py) writes all five
files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.command_env import command_env, library_log_lines
from tests.workdir_flags import own_data_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args, timeout=300, **variables):
    env = command_env(**variables)
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not library_log_lines(result.stderr), result.stderr
    return result


@pytest.mark.parametrize("config", ["icapsnet_short_ag_news", "icapsnet_long_ag_news"])
def test_interpretation_of_a_smoke_workdir_writes_the_report(tmp_path, config, trained_smoke_workdir):
    workdir, out = trained_smoke_workdir(f"{config}.py")[0], tmp_path / "interp"
    result = run("-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir), "--split", "test",
        "--out", str(out), "--limit", "40", "--progress", "lines",
        "--methods", "capsules,random",  # every method of every model: tests/interpret/test_explain.py
        # A new matplotlib folder: its font list is built, as on a user's first run, and logged at INFO.
        MPLCONFIGDIR=str(tmp_path / "matplotlib"))
    # However few the batches, the last progress line has a rate and the time left.
    last = next(line for line in result.stdout.splitlines() if line.startswith("example 40/40 (100%)"))
    assert "? examples/s" not in last and last.endswith("examples/s | ETA 0:00:00"), result.stdout
    assert sorted(os.listdir(out)) == [".lock", "C.png", "attributions.jsonl", "global.json", "local.jsonl", "report.html",
                                       "run.json"]

    records = [json.loads(line) for line in (out / "local.jsonl").read_text().splitlines()]
    assert len(records) == 40
    record = records[0]
    assert set(record) >= {"text", "prediction", "probabilities", "capsules", "kgrams", "word_scores", "words"}
    assert len(record["word_scores"]) == len(record["words"])
    assert abs(sum(record["probabilities"].values()) - 1) < 1e-4
    # Every selected K-gram is a run of the example's own words.
    words = " ".join(record["words"])
    assert all(" ".join(kgram) in words for kgram in record["kgrams"])

    summary = json.loads((out / "global.json").read_text())
    assert sum(map(sum, summary["C"])) == 40
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and 'id="method-capsules"' in html
    assert "rgba(" in html and ", 1.000)" in html  # the top word of an example is fully highlighted
    assert (out / "C.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The smoke task is learnable: the keywords of each class dominate its capsules' words.
    accuracy = sum(r["label"] == r["prediction"] for r in records) / len(records)
    assert accuracy > 0.7
