"""Every study at its tiny size (`python -m studies.NAME.NAME --tiny`, seconds each, in a
subprocess on one CPU device): it runs, and its results.json has the keys it documents and the
run's provenance under "_run".

The studies that read a trained workdir read the session's `:smoke` workdir (conftest.py).
`icapsnet_global --seeds` has its own test (test_icapsnet_seed_study.py); `sgm_sequences` runs
in tests/train/test_text_model_configs.py, where it is checked against `evaluate`.
"""

from __future__ import annotations

import json

import pytest

from tests.tiny_runs import assert_positive, assert_run_metadata, run_tiny, tiny_results

pytestmark = pytest.mark.slow


def test_saliency_boxes(tmp_path):
    results = tiny_results("studies.saliency_boxes.saliency_boxes", tmp_path, "--boxes", "earlier",
                           "--variants", "lstm")
    assert set(results) == {"_run", "earlier"} and set(results["earlier"]) == {"lstm"}
    row = results["earlier"]["lstm"]
    assert (row["train_series"], row["test_series"]) == (128, 16)
    assert all(0 <= row[key] <= 1 for key in ("wjac", "auc", "accuracy"))
    assert_positive(row, "euclidean", "seconds")


def test_emoji_variants(tmp_path):
    results = tiny_results("studies.emoji_variants.emoji_variants", tmp_path, "--variants", "none",
                           "--cache_dir", str(tmp_path / "cache"))
    assert set(results) == {"runs", "meta", "_run"} and set(results["runs"]) == {"none"}
    row = results["runs"]["none"]
    assert row["macro_f1_ci"][0] <= row["macro_f1"] <= row["macro_f1_ci"][1]
    assert row["accuracy_ci"][0] <= row["accuracy"] <= row["accuracy_ci"][1]
    assert_positive(row, "steps", "epochs", "selected_step", "steps_per_s")
    assert results["meta"]["budget"] == "smoke runs, generated texts" and results["meta"]["test_tweets"] > 0


def test_faithfulness(tmp_path, trained_smoke_workdir):
    workdir = str(trained_smoke_workdir("icapsnet_short_ag_news.py")[0])
    results = tiny_results("studies.faithfulness.faithfulness", tmp_path, "--workdir", workdir, "--checks",
                           "--checks_examples", "4")
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


def test_icapsnet_global(tmp_path, trained_smoke_workdir):
    workdir = str(trained_smoke_workdir("icapsnet_short_ag_news.py")[0])
    # --out names the JSON file itself.
    run_tiny("studies.icapsnet_global.icapsnet_global", "--workdir", workdir, "--out", str(tmp_path / "results.json"))
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        report = json.load(f)
    assert_run_metadata(report["_run"])
    assert (report["workdir"], report["split"], report["examples"]) == (workdir, "test", 16)
    assert {"paper_selection", "model_selection", "coupling", "primary_lengths", "attention", "head", "selection_rules",
            "routing_iterations"} <= set(report)
    assert sorted(report["routing_iterations"]) == ["1", "2", "3", "4", "5"]
    assert 0 <= report["accuracy"] <= 1


def test_localisation(tmp_path):
    results = tiny_results("studies.localisation.localisation", tmp_path, "--models", "fasttext", "--train_size", "64",
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
    run_tiny("studies.training.training_results", "--study", "reuters", "--runs", "br", "--baseline",
             "--workdirs", str(out), "--cache_dir", str(tmp_path / "cache"))
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


def test_the_linear_baseline_is_weighted_as_the_configs_and_chosen_on_validation(tmp_path):
    """AG News' configs weigh the classes (balanced): the bar is weighted so, an unweighted one
    beside it; each picks its n-gram range and C on validation, and learns the generated
    keywords (a model that learnt nothing scores 0.25 on 4 classes)."""
    from studies.training.training_results import BASELINE_GRID, STUDIES, linear_baselines

    baseline = linear_baselines(STUDIES["ag_news"], "", str(tmp_path / "cache"), tiny=True)
    assert baseline["bar"]["class_weights"] == "balanced" and baseline["unweighted"]["class_weights"] == "none"
    assert baseline["test"] == baseline["bar"]["test"] and baseline["splits_of"] == "fasttext_seed0"
    for fit in (baseline["bar"], baseline["unweighted"]):
        assert tuple(fit["ngram_range"]) in BASELINE_GRID["ngram_range"] and fit["C"] in BASELINE_GRID["C"]
        assert set(fit["validation"]) == {"accuracy", "macro_f1"} and fit["test"]["accuracy"] > 0.6


def test_tuning(tmp_path):
    """A search trains its trials (the first two at --tiny), chooses on validation, then reports
    the shipped config and the choice over the seeds (seed 0 alone at --tiny)."""
    out = tmp_path / "tuning"
    run_tiny("studies.tuning.tuning", "--search", "fasttext_ag_news", "--workdirs", str(out), "--cache_dir",
             str(tmp_path / "cache"))
    with open(out / "fasttext_ag_news" / "results.json", encoding="utf-8") as f:
        results = json.load(f)
    assert_run_metadata(results["_run"])
    assert set(results["trials"]) == {"shipped", "epochs_10"} and results["pending"] == []
    scores = {trial: row["validation"]["accuracy"] for trial, row in results["trials"].items()}
    assert results["chosen"] == max(scores, key=scores.get)
    assert set(results["seeds"]) == {"shipped", results["chosen"]}
    for row in results["seeds"].values():
        assert row["seeds"] == [0] and row["min"] <= row["mean"] <= row["max"] and 0 <= row["mean"] <= 1
    assert results["budget"]["trials"]["epochs_10"] == ["--config.train.num_epochs=10",
                                                        "--config.train.eval_every_steps=158"]


def test_integration_rules(tmp_path):
    results = tiny_results("studies.integration_rules.integration_rules", tmp_path)
    assert results["config"] == "cccapsnet_ag_news.py:smoke" and results["examples"] == 8
    assert set(results["by_steps"]) == {"2", "4"}
    for row in results["by_steps"].values():
        assert set(row) == {"midpoint", "gausslegendre"}
        for errors in row.values():
            assert 0 <= errors["median"] <= errors["p95"] <= errors["max"]
