"""The sanity checks of `jcaps.interpret.checks`: each statistic on hand-made attributions, then
on trained fastText and iCapsNets Short workdirs, whose generated data plants each class's
keywords: integrated gradients, occlusion and KernelSHAP find them; the gradient, the same for every word of a mean,
is flagged by the randomisation and degeneracy checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from jcaps.attribution import checks as metrics
from jcaps.interpret import checks, explain
from jcaps.train.workdir import load_trained
from jcaps.viz.html import checks_markdown
from tests.command_env import command_env
from tests.workdir_flags import own_data_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reference_spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's correlation of average ranks, the ranks counted by comparison."""
    def ranks(v):
        return np.array([np.sum(v < a) + (np.sum(v == a) - 1) / 2 for a in v])
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def test_spearman_with_ties_padding_and_constant_rows():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, size=(5, 9)).astype(float)  # many ties
    b = rng.integers(0, 4, size=(5, 9)).astype(float)
    mask = np.ones((5, 9), bool)
    mask[1, 6:] = False
    a[0], b[0] = np.arange(9), np.arange(9)[::-1]
    got = metrics.spearman(a, b, mask)
    assert got[0] == pytest.approx(-1.0)
    for r in range(1, 5):
        if np.ptp(a[r][mask[r]]) and np.ptp(b[r][mask[r]]):
            assert got[r] == pytest.approx(reference_spearman(a[r][mask[r]], b[r][mask[r]]))
    flat = np.ones((2, 4))
    assert list(metrics.spearman(flat, np.stack([np.ones(4), np.arange(4.0)]), np.ones((2, 4), bool))) == [1.0, 0.0]


def test_complexity_degeneracy_localisation_and_sensitivity_by_hand():
    mask = np.array([[True] * 4, [True] * 4, [True, True, False, False]])
    scores = np.array([[0, 0, 3.0, 0], [1.0, -1, 1, 1], [2.0, 2, 9, 9]])
    measured = metrics.complexity(scores, mask)
    np.testing.assert_allclose(measured["entropy"], [0.0, 1.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(measured["sparseness"], [0.75, 0.0, 0.0], atol=1e-12)
    assert list(metrics.degenerate(scores, mask)) == [False, False, True]  # row 2: equal at its real positions

    evidence = np.array([[False, False, True, True], [False] * 4, [False, True, False, False]])
    found = metrics.localisation(scores, mask, evidence)
    assert list(found["pointing_game"]) == [True, False]  # row 1 has no evidence; row 2's tie ranks position 0 first
    np.testing.assert_allclose(found["top_k_hit"], [0.5, 0.0])

    base = np.array([[3.0, 4.0, 0.0]])
    perturbed = [np.array([[3.0, 4.0, 7.0]]), np.array([[0.0, 4.0, 0.0]])]
    # The third position is padding: only the first change counts, |(-3, 0)| / |(3, 4)| = 0.6.
    np.testing.assert_allclose(metrics.max_sensitivity(base, perturbed, np.array([[True, True, False]])), [0.6])


@pytest.fixture(scope="session")
def fasttext_workdir(trained_smoke_workdir):
    return str(trained_smoke_workdir("fasttext_ag_news.py")[0])


def test_checks_on_planted_keywords(fasttext_workdir):
    trained = load_trained(fasttext_workdir, with_data=True)
    methods = ("gradient", "integrated_gradients", "occlusion", "kernel_shap", "random")
    summary = checks.check_workdir(trained, "test", methods, limit=64, options=explain.Options(shap_samples=128),
                                   batch_size=32, samples=2)
    for method in ("integrated_gradients", "occlusion", "kernel_shap"):
        assert summary[method]["pointing_game"] >= 0.95, (method, summary[method])
        assert not summary[method]["randomisation_flagged"] and not summary[method]["degenerate_flagged"]
        assert summary[method]["max_sensitivity"] < 0.5
    # The gradient of a mean of word vectors is the same for every word: an arbitrary ranking,
    # the same (constant) one after re-initialising the model.
    assert summary["gradient"]["degenerate_flagged"] and summary["gradient"]["randomisation_flagged"]
    assert summary["random"]["pointing_game"] < 0.6
    assert list(summary["integrated_gradients"]["randomisation_spearman"])[-1] == "all"
    assert summary["settings"]["limit"] == 64
    table = checks_markdown(summary)
    assert table.count("\n") == len(methods) + 2 and "⚑" in table


def test_icapsnet_short_localises_planted_keywords(trained_smoke_workdir):
    trained = load_trained(str(trained_smoke_workdir("icapsnet_short_ag_news.py")[0]), with_data=True)
    methods = ("integrated_gradients", "occlusion", "kernel_shap", "random")
    summary = checks.check_workdir(trained, "test", methods, limit=32, options=explain.Options(shap_samples=128),
                                   batch_size=32, samples=1)
    for method in methods[:-1]:
        assert summary[method]["localised_rows"] >= 16, summary[method]  # correct predictions
        assert summary[method]["pointing_game"] >= 0.95, (method, summary[method])
        assert not summary[method]["randomisation_flagged"], (method, summary[method])
        per_class = summary[method]["pointing_game_per_class"]
        assert set(per_class) <= set(trained.dataset.labels.names) and len(per_class) >= 3, per_class
        assert min(per_class.values()) >= 0.8, (method, per_class)
    assert summary["random"]["pointing_game"] < 0.6


def test_pointing_per_class_separates_a_class_the_model_finds_without_evidence():
    pointing = [np.array([True, True, False]), np.array([True, False, False, True])]
    classes = [np.array(["a", "b", "c"], object), np.array(["a", "c", "c", "b"], object)]
    assert metrics.pointing_per_class(pointing, classes) == {"a": 1.0, "b": 1.0, "c": 0.0}
    assert metrics.pointing_per_class([], []) == {}


@pytest.mark.slow
def test_the_command_writes_checks_beside_faithfulness(fasttext_workdir, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "jcaps.interpret", "--workdir", fasttext_workdir, own_data_cache(fasttext_workdir),
         "--out", str(tmp_path), "--checks",
         "--faithfulness", "--methods", "integrated_gradients,kernel_shap,lime,random", "--limit", "16",
         "--shap_samples", "32", "--lime_samples", "32"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=command_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(os.listdir(tmp_path)) == [".lock", "attributions.jsonl", "checks.json", "faithfulness.json", "report.html",
                                            "run.json"]
    written = json.loads((tmp_path / "checks.json").read_text())
    assert set(written) == {"integrated_gradients", "kernel_shap", "lime", "random", "settings"}
    assert json.loads((tmp_path / "faithfulness.json").read_text())["checks"] == written
    assert "Sanity checks" in (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "| kernel_shap |" in result.stdout
