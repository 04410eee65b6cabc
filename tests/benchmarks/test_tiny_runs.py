"""Every script of the speed suite at its tiny size (`python -m benchmarks.NAME --tiny`, seconds
each, in a subprocess on one CPU device): it runs, and its results.json has the keys it
documents, the run's provenance under "_run", finite positive timings, and the shapes it timed
are the tiny ones asked for.

`vs_pytorch` runs where PyTorch is installed; `vs_captum` has its own test
(tests/benchmarks/test_vs_captum.py); `device_check.sh` runs its dry run in
tests/benchmarks/test_device_check.py. `checkpoint_integrity --tiny`
runs in tests/train/test_checkpoint_faults.py, where its results are checked against more.
"""

from __future__ import annotations

import json

import pytest

from tests.tiny_runs import assert_positive, tiny_results

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------------------------
# Timings on random inputs
# ---------------------------------------------------------------------------------------------


def test_throughput(tmp_path):
    results = tiny_results("benchmarks.throughput", tmp_path, "--config", "configs/fasttext_ag_news.py:smoke")
    assert results["config"] == "configs/fasttext_ag_news.py:smoke"
    assert (results["batch_size"], results["length"], results["vocab_size"], results["num_classes"]) == (4, 16, 200, 4)
    assert_positive(results, "compile_s", "train_step_s", "eval_step_s", "train_examples_per_s", "eval_examples_per_s",
                    "flops_per_step", "peak_bytes", "parameters")


def test_input_pipeline(tmp_path):
    results = tiny_results("benchmarks.input_pipeline", tmp_path)
    assert set(results) == {"_run", "loop_efficiency", "fasttext_ag_news", "sgm_reuters", "sgm_debian_tags",
                            "dilated_fcn_emoji", "input_cell_boxes"}
    for name, row in results.items():
        if name not in ("_run", "loop_efficiency"):
            assert row["batch_size"] == 16 and row["train_examples"] > 0 and row["test_examples"] > 0, name
            assert_positive(row, "train_batch_cpu_ms", "encode_s")
    assert list(results["loop_efficiency"]) == ["fasttext_ag_news", "icapsnet_short_ag_news"]
    for row in results["loop_efficiency"].values():
        assert_positive(row, "loop_efficiency", "training_wall_seconds")
        [run], [step] = row["run_examples_per_s"], row["step_examples_per_s"]  # one pair at the tiny size
        assert row["loop_efficiencies"] == [row["loop_efficiency"]] == [run / step] and run > 0 and step > 0
        assert 0 < row["loop_efficiency_with_compiling"] <= row["loop_efficiency"]  # counting compiles only slows it
        assert 0.25 < row["test_accuracy"] <= 1.0


def test_cccapsnet_speed_times_the_encoder_on_the_models_layout(tmp_path):
    results = tiny_results("benchmarks.cccapsnet_speed", tmp_path)
    assert set(results) == {"_run", "16"}
    row = results["16"]
    # [B, T, D]: batch 4, length 16, the smoke model's 16-wide word vectors.
    assert row["encoder_input_shape"] == [4, 16, 16]
    assert (row["batch_size"], row["vocab_size"]) == (4, 200)
    assert_positive(row, "model_train_step_s", "model_train_examples_per_s", "model_compile_s", "encoder_step_s",
                    "encoder_examples_per_s")


def test_dilated_fcn_speed(tmp_path):
    results = tiny_results("benchmarks.dilated_fcn_speed", tmp_path)
    assert set(results) == {"_run", "16"}
    row = results["16"]
    assert (row["batch_size"], row["length"], row["attention"]) == (4, 16, "none")
    assert_positive(row, "train_chars_per_s", "eval_chars_per_s", "train_step_s", "eval_step_s", "compile_s")


def test_dropout_mask(tmp_path):
    results = tiny_results("benchmarks.dropout_mask", tmp_path)
    rows = {key: row for key, row in results.items() if key != "_run"}
    assert set(rows) == {"embeddings[4, 12, 16]@0.5", "embeddings[4, 12, 16]@0.1"}
    for row in rows.values():
        assert_positive(row, "bernoulli_s", "jcaps_s", "ratio", "bernoulli_grad_s", "jcaps_grad_s", "grad_ratio")


def test_input_cell_speed(tmp_path):
    results = tiny_results("benchmarks.input_cell_speed", tmp_path)
    assert set(results) == {"_run", "8"}
    row = results["8"]
    assert (row["batch"], row["features"]) == (2, 4)
    assert_positive(row, "linear_s", "quadratic_s", "ratio", "linear_peak_bytes", "quadratic_peak_bytes")
    assert row["max_abs_diff"] < 1e-4


def test_rnn_impl_speed(tmp_path):
    results = tiny_results("benchmarks.rnn_impl_speed", tmp_path)
    shape = {key: results[key] for key in ("batch", "length", "layers", "hidden", "embedding", "vocab_size")}
    assert shape == {"batch": 2, "length": 8, "layers": 1, "hidden": 8, "embedding": 8, "vocab_size": 50}
    for rnn_impl in ("scan", "cudnn"):
        assert_positive(results[rnn_impl], "seconds", "compile_s")
    assert results["cudnn_ran"] is False  # a CPU: the "cudnn" row ran the scan
    assert results["max_abs_output_difference"] < 1e-5


def test_routing_speed(tmp_path):
    results = tiny_results("benchmarks.routing_speed", tmp_path)
    assert (results["batch"], results["dim"], results["iterations"]) == (4, 16, 3)
    rows = results["rows"]
    assert sorted((r["routing"], r["pass"]) for r in rows) == [
        ("dynamic", "forward"), ("dynamic", "forward_backward"), ("kmeans", "forward"), ("kmeans", "forward_backward")]
    for row in rows:
        assert (row["I"], row["J"]) == (4, 2)
        assert_positive(row, "jax_s", "numpy_s", "ratio", "jax_compile_s")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_run_all(tmp_path, dtype):
    results = tiny_results("benchmarks.run_all", tmp_path, "--models", "fasttext_ag_news", "--dtype", dtype)
    assert results["ceiling_size"] == 256 and set(results["models"]) == {"fasttext_ag_news"}
    assert results["dtype"] == dtype
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
    results = tiny_results("benchmarks.sgm_speed", tmp_path, "--models", "sgm")
    assert set(results) == {"_run", "sgm"}
    row = results["sgm"]
    assert (row["batch_size"], row["length"], row["vocab_size"], row["sizes"]) == (4, 12, 200, "smoke")
    assert_positive(row, "train_step_s", "train_examples_per_s", "compile_s", "greedy_s", "greedy_examples_per_s",
                    "beam_s", "beam_examples_per_s")


def test_vs_pytorch(tmp_path):
    pytest.importorskip("torch")
    # One shape of each kind: a recurrent stack, SGM's decoding, a matmul.
    shapes = ("cccapsnet_bigru_64", "sgm_greedy", "matmul_step")
    results = tiny_results("benchmarks.vs_pytorch", tmp_path, "--shapes", ",".join(shapes))
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


def test_startup(tmp_path):
    results = tiny_results("benchmarks.startup", tmp_path)
    names = {"import jax", "jcaps --help", "jcaps predict (one text)"} | {
        f"jcaps {command} --help" for command in ("train", "evaluate", "predict", "interpret", "params")}
    assert set(results["seconds"]) == set(results["range"]) == names
    for name, (low, high) in results["range"].items():
        assert 0 < low <= results["seconds"][name] <= high, name
    ratio = results["predict_over_import_jax"]
    assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]


def test_shapley_vs_shap(tmp_path):
    pytest.importorskip("shap")  # the `compare` extra
    results = tiny_results("benchmarks.shapley_vs_shap", tmp_path)
    estimators = results["estimators"]
    assert set(estimators) == {"jcaps", "shap", "shap_no_l1", "uniform"}
    assert (results["examples"], results["players"], results["samples"]) == (4, 10, 256)
    for name in ("jcaps", "shap", "shap_no_l1"):
        assert len(estimators[name]["per_seed"]) == 2
        # Any estimate that uses its samples beats efficiency alone by far.
        assert 0 <= estimators[name]["mean"] < 0.5 * estimators["uniform"]["mean"], name


def test_corpus_explain(tmp_path):
    results = tiny_results("benchmarks.corpus_explain", tmp_path)
    assert sorted(results["runs"], key=int) == ["40", "128"]
    for limit, run in results["runs"].items():
        assert run["examples"] == int(limit) and run["peak_rss_mib"] > 0 and run["invocations"] == 1
        assert set(run["examples_per_second"]) == {"integrated_gradients", "kernel_shap", "random"}
        assert_positive(run["examples_per_second"], *run["examples_per_second"])
    assert results["rss_ratio"] > 0
    kills = results["kills"]
    assert kills["identical"] and kills["each_once"] and kills["examples"] == 40


def test_max_rows_memory(tmp_path):
    results = tiny_results("benchmarks.max_rows_memory", tmp_path)
    assert (results["batch"], results["length"], results["steps"]) == (2, 12, 8)
    by_max_rows = results["by_max_rows"]
    assert set(by_max_rows) == {str(results["default_max_rows"]), "16"}  # the default, and all 8 x 2 rows at once
    for row in by_max_rows.values():
        assert row["total_mib"] == pytest.approx(row["argument_mib"] + row["output_mib"] + row["temp_mib"], abs=0.2)
        assert row["rows_per_call"] * row["calls"] >= 16 and row["temp_mib"] >= 0
    assert_positive(results, "default_run_seconds", "parameters_mib")


def test_copies_per_call(tmp_path):
    results = tiny_results("benchmarks.copies_per_call", tmp_path, "--models", "fasttext", "--methods",
                           "integrated_gradients,lime", "--copies", "1,2")
    assert set(results) == {"_run", "fasttext"} and set(results["fasttext"]) == {"integrated_gradients", "lime"}
    for row in results["fasttext"].values():
        assert set(row["seconds"]) == {"1", "2"} and row["fastest"] in (1, 2)
        assert_positive(row["seconds"], "1", "2")
    assert results["fasttext"]["lime"]["shipped"] == 8  # the method's, fastText having none of its own


def test_gru_input_projection(tmp_path):
    results = tiny_results("benchmarks.gru_input_projection", tmp_path)
    assert set(results["4"]) == {"4", "8"} and results["in_loop_from_rows"] >= 1
    for row in results["4"].values():
        assert_positive(row, "before_loop_s", "in_loop_s")


def test_suite_xla_settings(tmp_path):
    results = tiny_results("benchmarks.suite_xla_settings", tmp_path)
    assert set(results["files"]) == {"suite", "fusion_emitters", "default_level"}
    assert results["files"]["suite"] > 0  # the others are null where the installed XLA lacks a flag
    assert_positive(results["training"]["fasttext_ag_news.py"], "suite", "o2")


def test_first_call(tmp_path):
    results = tiny_results("benchmarks.first_call", tmp_path)
    from jcaps.attribution.methods import METHODS

    assert set(results) == {"_run", "model", *METHODS}
    assert (results["model"]["batch"], results["model"]["length"]) == (2, 6)
    for method in METHODS:
        assert_positive(results[method], "first_s", "second_s", "jitted_s", "second_over_jitted")
        assert results[method]["first_s"] > results[method]["second_s"], method  # the first compiles
