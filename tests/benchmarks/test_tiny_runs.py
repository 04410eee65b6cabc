"""Every runnable script of benchmarks/ at its tiny size (`--tiny`, seconds each, in a
subprocess on one CPU device): it runs, and its results.json has the keys it documents, the
run's provenance under "_run", finite positive timings, and the shapes it timed are the tiny
ones asked for.

The scripts that read a trained workdir share `:smoke` workdirs trained here for one epoch.
`vs_pytorch.py` runs where PyTorch is installed; `vs_captum.py` has its own test
(tests/test_vs_captum.py); `device_check.sh` needs a GPU. Two scripts run elsewhere, where their
results are checked against more: `checkpoint_integrity.py --tiny` in
tests/train/test_checkpoint_faults.py, `sgm_sequences.py` against `evaluate` in
tests/train/test_text_model_configs.py.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import subprocess
import sys

import pytest

from jcaps.train import loop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_KEYS = {"commit", "dirty", "date", "cores", "device", "load_average_before", "idle", "tiny"}


def run_tiny(script: str, *args: str) -> None:
    """`python benchmarks/SCRIPT --tiny ARGS` on one CPU device; fails with its output."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), "--tiny", *args], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def tiny_results(script: str, out, *args: str) -> dict:
    """results.json of `run_tiny(script, "--out", out, *args)`, its "_run" checked."""
    run_tiny(script, "--out", str(out), *args)
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    assert_run_metadata(results["_run"])
    return results


def assert_run_metadata(run: dict) -> None:
    assert RUN_KEYS <= set(run)
    assert run["tiny"] is True
    assert re.fullmatch(r"[0-9a-f]{4,40}", run["commit"]) and isinstance(run["dirty"], bool)
    datetime.date.fromisoformat(run["date"])
    assert run["cores"] == os.cpu_count() and run["device"]
    assert run["load_average_before"] >= 0 and run["idle"] == (run["load_average_before"] < 0.5)


def assert_positive(row: dict, *keys: str) -> None:
    """Each of `keys` is a finite number above 0."""
    for key in keys:
        assert isinstance(row[key], (int, float)) and math.isfinite(row[key]) and row[key] > 0, (key, row[key])


@pytest.fixture(scope="module")
def smoke_workdir(tmp_path_factory, cache_dir, config_file):
    """`smoke_workdir(NAME)`: configs/NAME.py:smoke trained for one epoch, once a module."""
    workdirs = {}

    def trained(name: str) -> str:
        if name not in workdirs:
            config = config_file(f"{name}.py", "smoke", cache_dir)
            config.train.num_epochs = 1
            workdirs[name] = str(tmp_path_factory.mktemp(name))
            loop.train_and_evaluate(config, workdirs[name])
        return workdirs[name]

    return trained


# ---------------------------------------------------------------------------------------------
# Timings on random inputs
# ---------------------------------------------------------------------------------------------


def test_throughput(tmp_path):
    results = tiny_results("throughput.py", tmp_path, "--config", "configs/fasttext_ag_news.py:smoke")
    assert results["config"] == "configs/fasttext_ag_news.py:smoke"
    assert (results["batch_size"], results["length"], results["vocab_size"], results["num_classes"]) == (4, 16, 200, 4)
    assert_positive(results, "compile_s", "train_step_s", "eval_step_s", "train_examples_per_s", "eval_examples_per_s",
                    "flops_per_step", "peak_bytes", "parameters")


def test_cccapsnet_speed_times_the_encoder_on_the_models_layout(tmp_path):
    results = tiny_results("cccapsnet_speed.py", tmp_path)
    assert set(results) == {"_run", "16"}
    row = results["16"]
    # [B, T, D]: batch 4, length 16, the smoke model's 16-wide word vectors.
    assert row["encoder_input_shape"] == [4, 16, 16]
    assert (row["batch_size"], row["vocab_size"]) == (4, 200)
    assert_positive(row, "model_train_step_s", "model_train_examples_per_s", "model_compile_s", "encoder_step_s",
                    "encoder_examples_per_s")


def test_dilated_fcn_speed(tmp_path):
    results = tiny_results("dilated_fcn_speed.py", tmp_path)
    assert set(results) == {"_run", "16"}
    row = results["16"]
    assert (row["batch_size"], row["length"], row["attention"]) == (4, 16, "none")
    assert_positive(row, "train_chars_per_s", "eval_chars_per_s", "train_step_s", "eval_step_s", "compile_s")


def test_dropout_mask(tmp_path):
    results = tiny_results("dropout_mask.py", tmp_path)
    rows = {key: row for key, row in results.items() if key != "_run"}
    assert set(rows) == {"embeddings[4, 12, 16]@0.5", "embeddings[4, 12, 16]@0.1"}
    for row in rows.values():
        assert_positive(row, "bernoulli_s", "jcaps_s", "ratio", "bernoulli_grad_s", "jcaps_grad_s", "grad_ratio")


def test_input_cell_speed(tmp_path):
    results = tiny_results("input_cell_speed.py", tmp_path)
    assert set(results) == {"_run", "8"}
    row = results["8"]
    assert (row["batch"], row["features"]) == (2, 4)
    assert_positive(row, "linear_s", "quadratic_s", "ratio", "linear_peak_bytes", "quadratic_peak_bytes")
    assert row["max_abs_diff"] < 1e-4


def test_rnn_impl_speed(tmp_path):
    results = tiny_results("rnn_impl_speed.py", tmp_path)
    shape = {key: results[key] for key in ("batch", "length", "layers", "hidden", "embedding", "vocab_size")}
    assert shape == {"batch": 2, "length": 8, "layers": 1, "hidden": 8, "embedding": 8, "vocab_size": 50}
    for rnn_impl in ("scan", "cudnn"):
        assert_positive(results[rnn_impl], "seconds", "compile_s")
    assert results["cudnn_ran"] is False  # a CPU: the "cudnn" row ran the scan
    assert results["max_abs_output_difference"] < 1e-5


def test_routing_speed(tmp_path):
    results = tiny_results("routing_speed.py", tmp_path)
    assert (results["batch"], results["dim"], results["iterations"]) == (4, 16, 3)
    rows = results["rows"]
    assert sorted((r["routing"], r["pass"]) for r in rows) == [
        ("dynamic", "forward"), ("dynamic", "forward_backward"), ("kmeans", "forward"), ("kmeans", "forward_backward")]
    for row in rows:
        assert (row["I"], row["J"]) == (4, 2)
        assert_positive(row, "jax_s", "numpy_s", "ratio", "jax_compile_s")


def test_run_all(tmp_path):
    results = tiny_results("run_all.py", tmp_path, "--models", "fasttext_ag_news")
    assert results["ceiling_size"] == 256 and set(results["models"]) == {"fasttext_ag_news"}
    assert_positive(results, "ceiling_flops", "seconds")
    row = results["models"]["fasttext_ag_news"]
    assert (row["batch_size"], row["length"], row["vocab_size"]) == (4, 16, 50)
    assert_positive(row, "compile_s", "train_examples_per_s", "eval_examples_per_s", "flops_per_step",
                    "fraction_of_ceiling", "peak_bytes")
    with open(tmp_path / "scaling.json", encoding="utf-8") as f:  # the measured point alone
        assert json.load(f) == {"fasttext_ag_news": {"length": {"16": row["train_examples_per_s"]},
                                                     "batch": {"4": row["train_examples_per_s"]}}}
    assert "| fasttext_ag_news | 4 x 16 |" in (tmp_path / "results.md").read_text(encoding="utf-8")


def test_sgm_speed(tmp_path):
    results = tiny_results("sgm_speed.py", tmp_path, "--models", "sgm")
    assert set(results) == {"_run", "sgm"}
    row = results["sgm"]
    assert (row["batch_size"], row["length"], row["vocab_size"], row["sizes"]) == (4, 12, 200, "smoke")
    assert_positive(row, "train_step_s", "train_examples_per_s", "compile_s", "greedy_s", "greedy_examples_per_s",
                    "beam_s", "beam_examples_per_s")


def test_vs_pytorch(tmp_path):
    pytest.importorskip("torch")
    # One shape of each kind: a recurrent stack, SGM's decoding, a matmul.
    shapes = ("cccapsnet_bigru_64", "sgm_greedy", "matmul_step")
    results = tiny_results("vs_pytorch.py", tmp_path, "--shapes", ",".join(shapes))
    assert set(results) == {"_run", *shapes}
    assert (results["_run"]["sizes"], results["_run"]["repeats"]) == ("tiny", 1)
    assert (results["cccapsnet_bigru_64"]["batch"], results["cccapsnet_bigru_64"]["hidden"]) == (4, 32)
    assert results["cccapsnet_bigru_64"]["steps"] == 12
    assert (results["sgm_greedy"]["batch"], results["sgm_greedy"]["length"]) == (4, 12)
    assert [results["matmul_step"][key] for key in ("rows", "contracted", "columns")] == [64, 32, 48]
    for name in shapes:
        assert_positive(results[name], "jcaps_s", "torch_s", "ratio")
        assert results[name]["ratio_min"] <= results[name]["ratio"] <= results[name]["ratio_max"]
    for name in ("cccapsnet_bigru_64", "matmul_step"):
        assert results[name]["max_abs_output_difference"] < 1e-4
    assert results["sgm_greedy"]["same_label_set_fraction"] == 1.0


# ---------------------------------------------------------------------------------------------
# Studies that train, and analyses of trained workdirs
# ---------------------------------------------------------------------------------------------


def test_saliency_boxes(tmp_path):
    results = tiny_results("saliency_boxes.py", tmp_path, "--boxes", "earlier", "--variants", "lstm")
    assert set(results) == {"_run", "earlier"} and set(results["earlier"]) == {"lstm"}
    row = results["earlier"]["lstm"]
    assert (row["train_series"], row["test_series"]) == (128, 16)
    assert all(0 <= row[key] <= 1 for key in ("wjac", "auc", "accuracy"))
    assert_positive(row, "euclidean", "seconds")


def test_emoji_variants(tmp_path):
    results = tiny_results("emoji_variants.py", tmp_path, "--variants", "none", "--cache_dir", str(tmp_path / "cache"))
    assert set(results) == {"runs", "meta", "_run"} and set(results["runs"]) == {"none"}
    row = results["runs"]["none"]
    assert row["macro_f1_ci"][0] <= row["macro_f1"] <= row["macro_f1_ci"][1]
    assert row["accuracy_ci"][0] <= row["accuracy"] <= row["accuracy_ci"][1]
    assert_positive(row, "steps", "epochs", "selected_step", "steps_per_s")
    assert results["meta"]["budget"] == "smoke runs, generated texts" and results["meta"]["test_tweets"] > 0


def test_faithfulness(tmp_path, smoke_workdir):
    workdir = smoke_workdir("icapsnet_short_ag_news")
    results = tiny_results("faithfulness.py", tmp_path, "--workdir", workdir, "--checks", "--checks_examples", "4")
    assert set(results) == {"integrated_gradients", "random", "forward_s", "integrated_gradients_s",
                            "integrated_gradients_over_forward", "checks", "run", "_run"}
    assert set(results["checks"]) == {"integrated_gradients", "random", "settings"}
    assert results["checks"]["settings"]["limit"] == 4 and results["checks"]["random"]["rows"] == 4
    run = results["run"]
    assert (run["workdir"], run["examples"], run["batch_size"], run["ig_steps"]) == (workdir, 8, 8, 4)
    for method in ("integrated_gradients", "random"):
        assert results[method]["rows"] == 8
        assert_positive(results[method], "seconds_per_100")
    assert_positive(results, "forward_s", "integrated_gradients_s", "integrated_gradients_over_forward")


def test_icapsnet_global(tmp_path, smoke_workdir):
    workdir = smoke_workdir("icapsnet_short_ag_news")
    # --out names the JSON file itself.
    run_tiny("icapsnet_global.py", "--workdir", workdir, "--out", str(tmp_path / "results.json"))
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        report = json.load(f)
    assert_run_metadata(report["_run"])
    assert (report["workdir"], report["split"], report["examples"]) == (workdir, "test", 16)
    assert {"paper_selection", "model_selection", "coupling", "primary_lengths", "attention", "head", "selection_rules",
            "routing_iterations"} <= set(report)
    assert sorted(report["routing_iterations"]) == ["1", "2", "3", "4", "5"]
    assert 0 <= report["accuracy"] <= 1


def test_localisation(tmp_path):
    results = tiny_results("localisation.py", tmp_path, "--models", "fasttext", "--train_size", "64",
                           "--cache_dir", str(tmp_path / "cache"))
    assert set(results) == {"fasttext", "settings", "_run"}
    assert results["settings"] == {"examples": 8, "decoys": 1, "train_size": 64, "epochs": 10, "set": [],
                                   "methods": ["integrated_gradients", "random"]}
    row = results["fasttext"]
    assert 0 <= row["accuracy"] <= 1 and "--config.data.synthetic_decoys=1" in row["flags"]
    for method in ("integrated_gradients", "random"):
        checked = row["checks"][method]
        assert checked["rows"] == 8
        # Texts predicted right after 3 steps are localised; with none, there is no pointing game.
        if checked["localised_rows"]:
            assert 0 <= checked["pointing_game"] <= 1
        else:
            assert checked["pointing_game"] is None
        assert set(checked["pointing_game_per_class"]) <= {"world", "sports", "business", "science"}


def test_training_results(tmp_path):
    """A run of a study trains its `:smoke` form; the report has it with its provenance and the
    metrics of the study's kind, the TF-IDF + linear SVM bar fitted on its splits, and the runs
    not trained yet as pending."""
    out = tmp_path / "studies"
    run_tiny("training_results.py", "--study", "reuters", "--runs", "br", "--baseline", "--workdirs", str(out),
             "--cache_dir", str(tmp_path / "cache"))
    with open(out / "reuters" / "results.json", encoding="utf-8") as f:
        results = json.load(f)
    assert_run_metadata(results["_run"])
    assert results["pending"] == ["sgm_seed0", "sgm_ge_seed0"]  # --tiny: the first seed of each run
    [(name, row)] = results["runs"].items()
    assert name == "br_seed0" and row["command"] == "--config configs/br_reuters.py:smoke"
    assert set(row["test"]) == set(results["metrics"]) and set(row["validation"]) == {"micro_f1"}
    assert (row["steps"], row["resumed"]) == (3, 0) and row["parameters"] > 0 and row["seconds"] > 0
    assert row["provenance"]["jobs"] == 1 and row["provenance"]["commit"] == results["_run"]["commit"]
    baseline = results["baseline"]
    assert baseline["splits_of"] == "br_seed0" and set(baseline["test"]) == set(results["metrics"])
    # Generated label sets: 1.9 labels an example out of 4, which the words carry.
    assert baseline["test"]["micro_f1"] > 0.7 and 0 <= baseline["test"]["hamming_loss"] < 0.25
    assert baseline["test"]["true_labels_per_example"] == row["test"]["true_labels_per_example"]
