"""Training, evaluating and explaining sequence models through the shared loop (generated box data)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import get_args

import numpy as np
import pytest

from jcaps.errors import UserError
from jcaps.models.choices import InputCellLSTMVariant
from jcaps.predict import predict
from jcaps.train import loop
from jcaps.train.workdir import load_trained
from tests.command_env import command_env
from tests.workdir_flags import own_data_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def input_cell_run(built_once, config_file, cache_dir):
    """(workdir, final metrics) of the input-cell model trained six epochs, once a session."""

    def train(folder):
        config = config_file("input_cell_boxes.py", "earlier,input_cell,smoke", cache_dir)
        config.train.num_epochs = 6
        return loop.train_and_evaluate(config, str(folder / "workdir"))

    folder, final = built_once("series-input_cell", train)
    return folder / "workdir", final


@pytest.mark.slow
def test_input_cell_learns_the_box_task(input_cell_run):
    workdir, final = input_cell_run
    # Two balanced classes told apart by the sign of a box's mean: chance is 0.5.
    assert final["test"]["accuracy"] > 0.8
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        losses = [m["loss"] for m in map(json.loads, f) if m["split"] == "train"]
    assert losses[-1] < losses[0]
    for name in ("labels.json", "series_stats.npz", "num_features.txt"):
        assert os.path.isfile(os.path.join(workdir, "checkpoints", name)), name


@pytest.mark.slow
@pytest.mark.parametrize("variant", [v for v in get_args(InputCellLSTMVariant) if v != "input_cell"])
def test_every_variant_trains(tmp_path, cache_dir, variant, config_file):
    config = config_file("input_cell_boxes.py", f"middle,{variant},smoke", cache_dir)
    config.train.num_steps = 4  # one compile of each step: the point is that the variant trains
    final = loop.train_and_evaluate(config, str(tmp_path))
    assert np.isfinite(final["test"]["loss"]) and 0.0 <= final["test"]["accuracy"] <= 1.0


@pytest.mark.slow
def test_interpret_writes_saliency_figures(input_cell_run, tmp_path):
    workdir, _ = input_cell_run
    out = tmp_path / "saliency"
    result = subprocess.run(
        [sys.executable, "-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir), "--out", str(out),
         "--limit", "3",
         "--methods", "attention,random"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=command_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    with open(out / "saliency.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert len(summary["examples"]) == 3
    for example in summary["examples"]:
        assert (out / example["figure"]).is_file()
        assert abs(sum(example["saliency_share_by_tenth"]) - 1) < 1e-3
    assert "saliency figures" in result.stdout


@pytest.mark.slow
def test_trained_series_workdir_refuses_text(input_cell_run):
    workdir, _ = input_cell_run
    with pytest.raises(UserError, match="reads series, not text"):
        predict(load_trained(str(workdir)), ["some text"])


@pytest.mark.parametrize(
    "name, data_format, normalize",
    [
        ("input_cell_basicmotions.py", "ts", "feature"),
        ("input_cell_japanese_vowels.py", "ts", "feature"),
        ("input_cell_mnist.py", "idx", "feature"),
    ],
)
def test_real_data_configs(name, data_format, normalize, tmp_path, config_file):
    config = config_file(name, "", tmp_path)
    assert (config.data.format, config.data.normalize, config.model.variant) == (data_format, normalize, "input_cell")
    assert config_file(name, "lstm", tmp_path).model.variant == "lstm"
    with pytest.raises(ValueError, match="unknown config argument"):
        config_file(name, "nonsense", tmp_path)
    smoke = config_file(name, "smoke", tmp_path)
    assert smoke.data.format == "boxes"  # offline
