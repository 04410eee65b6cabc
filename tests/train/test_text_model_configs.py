"""The dilated causal CNN and the multi-label models (SGM, SGM+GE, binary relevance) trained
end to end through their configs' `:smoke` variants, on generated data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import get_args

import numpy as np
import pytest

from jcaps.errors import ConfigError, UserError
from jcaps.evaluate import evaluate
from jcaps.models.choices import DilatedFCNAttention
from jcaps.predict import predict
from jcaps.train import loop
from jcaps.train.workdir import load_trained
from tests.workdir_flags import own_data_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train_losses(workdir) -> list[float]:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [m["loss"] for m in map(json.loads, f) if m["split"] == "train"]


# ---------------------------------------------------------------------------------------------
# Dilated causal convolution network
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("variant", get_args(DilatedFCNAttention))
def test_every_attention_variant_trains(tmp_path, cache_dir, variant, config_file):
    config = config_file("dilated_fcn_emoji.py", f"{variant},smoke", cache_dir)
    # One shape, one compile of each step: the point is that the variant trains.
    config.train.num_steps = 3
    config.data.max_len, config.data.bucket_boundaries = 64, (64,)
    config.data.synthetic_train_size, config.data.synthetic_test_size = 96, 32
    final = loop.train_and_evaluate(config, str(tmp_path))
    assert np.isfinite(final["test"]["loss"]) and 0.0 <= final["test"]["macro_f1"] <= 1.0


def test_dilated_fcn_learns_and_compiles_once_per_bucket(trained_smoke_workdir):
    workdir, final = trained_smoke_workdir("dilated_fcn_emoji.py")
    losses = train_losses(workdir)
    assert losses[-1] < 0.9 * losses[0]
    assert final["test"]["accuracy"] > 0.35  # four balanced classes: chance is 0.25
    # Characters are the tokens; a workdir alone predicts.
    trained = load_trained(str(workdir))
    assert trained.dataset.tokenize("ab c") == ["a", "b", " ", "c"]
    [result] = predict(trained, ["The striker scored a goal"])
    assert result["label"] in trained.dataset.labels.names


@pytest.mark.slow
def test_dilated_fcn_epoch_compiles_at_most_one_step_per_bucket(cache_dir, config_file, counting_traces):
    from jcaps.data.datasets import load_dataset
    from jcaps.train import mesh as mesh_lib
    from jcaps.train.families import get_family
    from jcaps.train.state import create_train_state, dummy_inputs, model_for
    from jcaps.train.steps import compile_steps

    # Generated documents are 50 to 250 characters; batch maxima of 16 lie between 200 and 250.
    config = config_file("dilated_fcn_emoji.py", "smoke", cache_dir)
    config.data.max_len, config.data.bucket_boundaries = 256, (216, 224, 232, 240, 256)
    dataset = load_dataset(config.data, config.train.seed)
    mesh = mesh_lib.data_mesh()
    state = create_train_state(config, model_for(config, dataset), dummy_inputs(config, dataset), 100, mesh)
    family, traced = counting_traces(get_family(config.model.name))
    train_fn, _ = compile_steps(config, family, dataset.num_classes, mesh)
    iterator = dataset.train_iterator(config.train.batch_size, config.train.seed)
    shapes = set()
    for _ in range(dataset.steps_per_epoch(config.train.batch_size)):
        batch = next(iterator)
        shapes.add(batch["tokens"].shape)
        state, _ = train_fn(state, mesh_lib.global_batch(batch, mesh))
    assert len(shapes) >= 2
    assert sorted(traced) == sorted(shapes) and len(shapes) <= len(config.data.bucket_boundaries)


# ---------------------------------------------------------------------------------------------
# Multi-label: SGM, SGM + global embedding, binary relevance
# ---------------------------------------------------------------------------------------------


MULTILABEL_CONFIGS = ("br_reuters.py", "sgm_reuters.py", "sgm_ge_reuters.py", "br_debian_tags.py",
                      "sgm_ge_debian_tags.py")


@pytest.mark.parametrize("name", MULTILABEL_CONFIGS)
def test_multilabel_configs_learn(trained_smoke_workdir, name):
    workdir, final = trained_smoke_workdir(name)
    losses = train_losses(workdir)
    assert losses[-1] < 0.8 * losses[0]
    test = final["test"]
    # Predicting every label scores micro-F1 2 * 1.9 / (1.9 + 4) = 0.64 on this data (1.9 labels
    # an example out of 4), predicting only the most frequent one about 0.6.
    assert test["micro_f1"] > 0.7
    assert 0.0 <= test["hamming_loss"] < 0.25
    for key in ("macro_f1", "micro_precision", "micro_recall", "example_f1", "subset_accuracy"):
        assert 0.0 <= test[key] <= 1.0
    assert test["true_labels_per_example"] == pytest.approx(1.9, abs=0.3)


def test_debian_tags_validation_is_carved_by_source_package(trained_smoke_workdir):
    trained = load_trained(str(trained_smoke_workdir("sgm_ge_debian_tags.py")[0]), with_data=True)
    splits = trained.dataset.splits
    sources = [{splits[p].source[i]["source"] for i in range(len(splits[p].source))} for p in ("train", "validation")]
    assert sources[1] and not sources[0] & sources[1]


def test_evaluate_changes_decoding_settings_only(trained_smoke_workdir):
    sgm, br = (str(trained_smoke_workdir(name)[0]) for name in ("sgm_reuters.py", "br_reuters.py"))
    default = evaluate(sgm, "test")
    # One decoding step leaves room for one label at most; the parameters stay the same.
    one_step = evaluate(sgm, "test", model_overrides={"max_steps": 1, "decoding": "greedy"})
    assert one_step["model_overrides"] == {"max_steps": 1, "decoding": "greedy"}
    assert one_step["labels_per_example"] <= 1.0 < default["labels_per_example"]
    assert one_step["loss"] == pytest.approx(default["loss"]) and one_step["selected_step"] == default["selected_step"]
    # A setting of the model that the saved config does not name (it had the default).
    going_on = evaluate(sgm, "test", model_overrides={"decoding": "greedy", "eos_threshold": 1.0})
    assert default["labels_per_example"] < going_on["labels_per_example"] <= 4.0  # 4 labels in all
    low, high = (evaluate(br, "test", model_overrides={"threshold": t}) for t in (0.05, 0.95))
    assert low["labels_per_example"] > high["labels_per_example"]
    with pytest.raises(UserError, match=r"--config.model.threshold: the sgm model has no key model.threshold"):
        evaluate(sgm, "test", model_overrides={"threshold": 0.5})
    with pytest.raises(UserError, match=r"--config.model.embed_dim: evaluate changes only the decoding keys"):
        evaluate(sgm, "test", model_overrides={"embed_dim": 8})
    with pytest.raises(ConfigError, match=r"model.beam_size must be an integer >= 1, not 0"):
        evaluate(sgm, "test", model_overrides={"beam_size": 0})


@pytest.mark.slow
def test_cli_evaluate_takes_decoding_flags(trained_smoke_workdir):
    workdir = str(trained_smoke_workdir("sgm_reuters.py")[0])
    out = subprocess.run(
        [sys.executable, "-m", "jcaps.evaluate", "--workdir", workdir, own_data_cache(workdir), "--split", "validation",
         "--config.model.length_penalty=1.0", "--config.model.beam_size=3"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"), check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["split"] == "validation" and result["model_overrides"] == {"beam_size": 3, "length_penalty": 1.0}


def test_sgm_predicts_label_sets_in_generation_order(trained_smoke_workdir):
    trained = load_trained(str(trained_smoke_workdir("sgm_ge_reuters.py")[0]))
    results = predict(trained, ["The striker scored a goal in the tournament", "genome telescope physics"])
    for result in results:
        assert result["labels"] and len(set(result["labels"])) == len(result["labels"])
        assert set(result["labels"]) <= set(trained.dataset.labels.names)
    assert "sports" in results[0]["labels"] and "science" in results[1]["labels"]
    assert len(predict(trained, ["shares profit striker goal genome"], top_k=1)[0]["labels"]) == 1
    with pytest.raises(UserError, match="--threshold applies to multi-label models with per-label scores"):
        predict(trained, ["x"], threshold=0.3)


def test_binary_relevance_predicts_with_threshold_and_top_k(trained_smoke_workdir):
    trained = load_trained(str(trained_smoke_workdir("br_reuters.py")[0]))
    [default] = predict(trained, ["The striker scored a goal in the tournament"])
    assert default["threshold"] == 0.5 and "sports" in default["labels"]
    assert all(default["probabilities"][label] >= 0.5 for label in default["labels"])
    [low] = predict(trained, ["The striker scored a goal in the tournament"], threshold=0.01, top_k=2)
    assert low["threshold"] == 0.01 and set(low["labels"]) >= set(default["labels"])
    assert len(low["probabilities"]) == 2


@pytest.mark.slow
def test_cli_predict_prints_a_label_set(trained_smoke_workdir):
    workdir = str(trained_smoke_workdir("sgm_reuters.py")[0])
    out = subprocess.run(
        [sys.executable, "-m", "jcaps.predict", "--workdir", workdir, "--text", "shares profit investors"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"), check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert isinstance(json.loads(out.stdout.strip().splitlines()[-1])["labels"], list)


@pytest.mark.slow
def test_sgm_sequences_script_agrees_with_evaluate(trained_smoke_workdir, tmp_path):
    workdir = str(trained_smoke_workdir("sgm_ge_debian_tags.py")[0])
    out = subprocess.run(
        [sys.executable, "-m", "studies.sgm_sequences.sgm_sequences", "--workdirs", workdir, "--split", "test",
         "--length_penalties", "0", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"), check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        written = json.load(f)
    [result] = written["results"][workdir].values()
    assert written["split"] == "test" and written["_run"]["commit"]  # the run's provenance
    expected = evaluate(workdir, "test", model_overrides={"decoding": "beam", "length_penalty": 0.0})
    for key in ("micro_f1", "macro_f1", "labels_per_example", "example_f1", "count"):
        assert result[key] == pytest.approx(expected[key], abs=1e-6)
    errors = result["errors"]
    assert sum(errors["position_count"]) == pytest.approx(result["labels_per_example"] * result["count"])
