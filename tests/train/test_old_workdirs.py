"""Workdirs written by an earlier jcaps (commit d201500, before the studies left the library)
still evaluate to the metrics they recorded and resume training.

`old_workdirs/NAME/` is NAME's `:smoke` config trained 4 steps by that commit (checkpoints every
2 steps, 1 kept; the TensorBoard folder left out), on the generated data its config describes,
which the test generates again into a cache of its own.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from jcaps.evaluate import evaluate
from jcaps.train import loop
from jcaps.train.config import load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD_WORKDIRS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "old_workdirs")


def final_test_metrics(workdir: str) -> dict:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return next(r for r in records if r.get("final") and r.get("split") == "test")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(os.listdir(OLD_WORKDIRS)))
def test_an_old_workdir_evaluates_as_it_did_and_resumes(name, tmp_path):
    workdir = str(tmp_path / name)
    shutil.copytree(os.path.join(OLD_WORKDIRS, name), workdir)
    cache = str(tmp_path / "cache")

    scored = evaluate(workdir, "test", data_overrides={"cache_dir": cache})
    recorded = final_test_metrics(workdir)
    assert scored["selected_step"] == recorded["step"] == 4
    for metric in ("loss", "accuracy"):
        assert scored[metric] == pytest.approx(recorded[metric], rel=1e-5, abs=1e-6), metric

    # Today's config of the same name, trained on from step 4 to 6.
    config = load(os.path.join(ROOT, "configs", f"{name}.py") + ":smoke")
    with config.unlocked():
        config.data.cache_dir = cache
        config.train.update(num_steps=6, checkpoint_every_steps=2, keep_checkpoints=1, eval_every_steps=2,
                            progress="none")
    loop.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        trained = [record["step"] for record in map(json.loads, f) if record.get("split") == "train"]
    assert trained == [2, 4, 6]  # resumed at 4: steps 1 to 4 were not trained again


LEGACY_KEYS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "legacy_keys")


@pytest.mark.slow
def test_a_workdir_of_legacy_keys_resumes_to_the_metrics_it_resumed_to_then(tmp_path):
    """`legacy_keys/icapsnet_short_ag_news/` was trained 4 steps, with embedding dropout 0.5 so
    that every step draws from the run's key, by the code that kept `jax.random.PRNGKey`s (uint32
    arrays) in the training state; that code then resumed a copy to step 6 and recorded every
    record of step 6 in `resumed_metrics.json`. Today's typed keys restore from the same bits and
    draw the same dropout masks: the same records."""
    workdir = str(tmp_path / "icapsnet_short_ag_news")
    shutil.copytree(os.path.join(LEGACY_KEYS, "icapsnet_short_ag_news"), workdir)
    cache = str(tmp_path / "cache")
    scored = evaluate(workdir, "test", data_overrides={"cache_dir": cache})
    recorded = final_test_metrics(workdir)
    for metric in ("loss", "accuracy"):
        assert scored[metric] == pytest.approx(recorded[metric], rel=1e-5, abs=1e-6), metric

    config = load(os.path.join(ROOT, "configs", "icapsnet_short_ag_news.py") + ":smoke")
    with config.unlocked():
        config.data.cache_dir = cache
        config.model.embedding_dropout = 0.5
        config.train.update(num_steps=6, checkpoint_every_steps=2, keep_checkpoints=1, eval_every_steps=2,
                            progress="none")
    loop.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        resumed = [record for record in map(json.loads, f) if record["step"] == 6]
    with open(os.path.join(LEGACY_KEYS, "resumed_metrics.json"), encoding="utf-8") as f:
        expected = json.load(f)
    assert [(r["split"], r.get("final")) for r in resumed] == [(r["split"], r.get("final")) for r in expected]
    for got, want in zip(resumed, expected):
        for metric, value in want.items():
            if metric == "split":
                continue
            assert got[metric] == pytest.approx(value, rel=1e-5, abs=1e-6), (got["split"], metric)
