"""`python -m studies.icapsnet_global.icapsnet_global --seeds` at its tiny size: one-epoch smoke
runs trained through train.py, resumed (not retrained) when the command runs again, and summarised per seed."""

from __future__ import annotations

import json
import os

import pytest

from tests.tiny_runs import assert_run_metadata, run_tiny

pytestmark = pytest.mark.slow


def test_seed_study_trains_summarises_and_resumes(tmp_path):
    args = ("--seeds", "2", "--out", str(tmp_path), "--set", "model.num_capsules=6",
            "--set", "model.routing_similarity=dot", "--cache_dir", str(tmp_path / "cache"))
    run_tiny("studies.icapsnet_global.icapsnet_global", *args)
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        results = json.load(f)
    assert_run_metadata(results["_run"])
    assert results["settings"]["set"] == ["model.num_capsules=6", "model.routing_similarity=dot"] and results["settings"]["config"].endswith(":smoke")
    assert sorted(results["runs"]) == ["seed2"]
    for name, run in results["runs"].items():
        assert run["seed"] == int(name[len("seed"):])
        assert 0 <= run["accuracy"] <= 1 and 0 <= run["mi_over_h"] <= 1 and 0 < run["top3_share"] <= 1
        assert set(run["most_selected"].values()) <= set(range(6))  # the override reached the model
        for entry in run["shared_capsules"]:
            assert len(entry["classes"]) > 1 and all(run["most_selected"][c] == entry["capsule"] for c in entry["classes"])
        assert run["steps"] > 0
        assert run["knobs"]["routing_similarity"] == "dot" and run["knobs"]["routing"] == "kmeans"
        rule_figure = {"coupling": run["mi_over_h_coupling"], "contribution": run["mi_over_h_contribution"]}
        assert run["mi_over_h"] == rule_figure[run["selection"]]
    summary = results["summary"]["accuracy"]
    assert summary["min"] == summary["max"] == summary["mean"] == results["runs"]["seed2"]["accuracy"]
    assert summary["std"] == 0

    # A finished study is not trained again: the logs keep one training each.
    logs = {name: (tmp_path / "runs" / name / "train.log").read_text() for name in results["runs"]}
    run_tiny("studies.icapsnet_global.icapsnet_global", *args)
    assert {name: (tmp_path / "runs" / name / "train.log").read_text() for name in results["runs"]} == logs
    assert os.path.isfile(tmp_path / "results.json")
