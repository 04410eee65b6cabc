"""`python -m benchmarks.vs_captum --tiny`: both sides run and agree (needs the `compare` extra)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("torch")
pytest.importorskip("captum")
pytest.importorskip("sklearn")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tiny_run_agrees_with_captum(tmp_path):
    subprocess.run([sys.executable, "-m", "benchmarks.vs_captum", "--tiny", "--out", str(tmp_path)],
                   check=True, capture_output=True, cwd=ROOT)
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        results = json.load(f)
    assert results["_run"]["tiny"]
    assert results["matmul_gflops"] > 0
    for model in ("fasttext", "icapsnet_short", "cccapsnet"):
        row = results[model]
        assert row["jcaps_parameters"] == row["torch_parameters"] > 0
        assert row["max_abs_score_difference"] < 1e-5
        forward = row["forward"]
        assert forward["jcaps_s"] > 0 and forward["torch_s"] > 0
        assert forward["ratio_min"] <= forward["ratio"] <= forward["ratio_max"]
        assert set(row["methods"]) == {"integrated_gradients", "gradient_x_input", "occlusion", "kernel_shap", "lime"}
        for method, timing in row["methods"].items():
            assert timing["jcaps_s"] > 0 and timing["torch_s"] > 0
            assert timing["ratio_min"] <= timing["ratio"] <= timing["ratio_max"]
            assert timing["jcaps_gflop"] > 0
            assert timing["floor_ratio"] == pytest.approx(
                timing["jcaps_gflop"] / results["matmul_gflops"] / timing["torch_s"])
            if method in ("integrated_gradients", "gradient_x_input", "occlusion"):
                assert timing["max_relative_difference"] < 1e-4, (model, method)
            else:
                assert -1.0 <= timing["spearman"] <= 1.0 and -1.0 <= timing["jcaps_reseeded_spearman"] <= 1.0
