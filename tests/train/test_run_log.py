"""The training run's log and console, piece by piece (no training): rewinding `metrics.jsonl` on
resume, the progress rate without the compile, the final summary, and the quiet start."""

from __future__ import annotations

import json
import logging

import numpy as np

from jcaps.train import metrics as metrics_lib
from jcaps.train.progress import CompileClock, Progress, TrainedSteps, run_summary


def write_lines(path, records, tail: str = ""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_rewind_drops_later_steps_final_lines_and_a_cut_short_line(tmp_path):
    kept = [{"step": 10, "split": "train", "loss": 1.0}, {"step": 20, "split": "train", "loss": 0.5},
            {"step": 20, "split": "validation", "accuracy": 0.7}]
    later = [{"step": 30, "split": "train", "loss": 0.4}, {"step": 30, "split": "validation", "accuracy": 0.8}]
    final = [{"step": 20, "split": "test", "accuracy": 0.7, "final": True}]
    # A run killed mid-write leaves half a line.
    write_lines(tmp_path / "metrics.jsonl", kept + final + later, tail='{"step": 40, "spl')
    assert metrics_lib.rewind_metrics(str(tmp_path), 20) == 4
    assert metrics_lib.read_metrics(str(tmp_path)) == kept
    assert not [p for p in tmp_path.iterdir() if p.name != "metrics.jsonl"]  # no temporary file left
    # Nothing to drop: the file is left as it is.
    before = (tmp_path / "metrics.jsonl").stat().st_mtime_ns
    assert metrics_lib.rewind_metrics(str(tmp_path), 20) == 0
    assert (tmp_path / "metrics.jsonl").stat().st_mtime_ns == before
    # A fresh start (no checkpoint) drops everything; no file is fine too.
    assert metrics_lib.rewind_metrics(str(tmp_path), 0) == 3
    assert metrics_lib.read_metrics(str(tmp_path)) == []
    assert metrics_lib.rewind_metrics(str(tmp_path / "nowhere"), 5) == 0


def test_rewind_can_keep_the_final_lines(tmp_path):
    records = [{"step": 20, "split": "train", "loss": 0.5}, {"step": 20, "split": "test", "final": True}]
    write_lines(tmp_path / "metrics.jsonl", records)
    assert metrics_lib.rewind_metrics(str(tmp_path), 20, keep_final=True) == 0
    assert metrics_lib.final_records(metrics_lib.read_metrics(str(tmp_path)), 20) == {"test": records[1]}
    assert metrics_lib.final_records(records, 30) == {}


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_progress_rate_leaves_out_the_compile_and_the_first_evaluation(capsys):
    clock = FakeClock()
    progress = Progress("lines", total=1010, initial=0, clock=clock)
    clock.now = 30.0  # the first step took 30 s: compiling
    progress.start(1)
    assert progress.steps_per_second(1) is None
    clock.now = 40.0
    progress.update(101, {"loss": 0.5, "accuracy": 0.75})
    assert progress.steps_per_second(101) == 10.0
    with progress.not_counted():  # the first evaluation compiles the eval step
        clock.now = 100.0
    clock.now = 50.0 + 60.0
    progress.update(201, {"loss": 0.4})
    assert progress.steps_per_second(201) == 10.0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "step 101/1010 (10%) | loss 0.5000 | accuracy 0.7500 | 10.0 steps/s | ETA 0:01:30"
    assert out[1] == "step 201/1010 (20%) | loss 0.4000 | 10.0 steps/s | ETA 0:01:20"


def test_a_progress_line_before_any_rate_says_so(capsys):
    progress = Progress("lines", total=10, initial=4, clock=FakeClock())
    progress.update(5, {"loss": 1.0})  # log_every_steps=1: the first line comes with the first step
    assert capsys.readouterr().out.strip() == "step 5/10 (50%) | loss 1.0000 | ? steps/s | ETA ?"


def test_a_run_whose_only_progress_line_is_its_last_gives_the_whole_runs_rate(capsys):
    """An explanation run of one batch: no later line can measure a rate without the compile, so
    its one line gives the whole run's, and no time left."""
    clock = FakeClock()
    progress = Progress("lines", total=8, clock=clock, unit="example")
    clock.now = 2.0
    progress.update(8, {})
    assert capsys.readouterr().out.strip() == "example 8/8 (100%) | 4.0 examples/s | ETA 0:00:00"


def test_the_summary_says_what_was_trained_selected_and_where_it_is():
    text = run_summary(
        workdir="/w", step=60, final={"validation": {"accuracy": 0.9, "count": 26}, "test": {"accuracy": 0.875}},
        selected={"step": 30, "metric": "accuracy", "value": 0.95}, select_best=True,
        trained=TrainedSteps(60, 12.0, 2.0, 0.0), wall_seconds=15.0, checkpoint_step=60, best_step=30,
    )
    lines = text.splitlines()
    assert lines[0] == ("trained to step 60: 60 steps in 0:00:12 (the first, with compiling, 2.0 s; then 5.9 steps/s "
                        "with evaluations and checkpoints); wall time 0:00:15")
    assert lines[1] == "final model: step 30, the best validation accuracy (0.9500); the last step was 60"
    assert lines[2:4] == ["final validation: accuracy 0.9000 count 26", "final test: accuracy 0.8750"]
    assert lines[4:] == [
        "  workdir      /w",
        "  checkpoints  /w/checkpoints (latest step 60)",
        "  best         /w/best (step 30)",
        '  metrics      /w/metrics.jsonl (final lines: "final": true)',
        "  tensorboard  tensorboard --logdir /w/tensorboard",
    ]
    compiled_later = run_summary(
        workdir="/w", step=60, final={}, selected=None, select_best=False,
        trained=TrainedSteps(60, 12.0, 2.0, 0.2), wall_seconds=15.0, checkpoint_step=60, best_step=None,
    )
    assert compiled_later.splitlines()[0] == (
        "trained to step 60: 60 steps in 0:00:12 (the first, with compiling, 2.0 s; then 6.0 steps/s "
        "with evaluations and checkpoints, 0.2 s of compiling left out); wall time 0:00:15"
    )
    plain = run_summary(workdir="/w", step=8, final={}, selected=None, select_best=False, trained=None,
                        wall_seconds=None, checkpoint_step=8, best_step=None)
    assert plain.splitlines()[0] == "final model: the last step, 8"
    assert "best " not in plain


def test_the_compile_clock_counts_making_a_program_not_running_it():
    import jax
    import jax.numpy as jnp

    clock = CompileClock()
    before = clock.seconds()
    f = jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)
    f(jnp.ones(7)).block_until_ready()
    compiled = clock.seconds()
    assert compiled > before
    f(jnp.ones(7)).block_until_ready()  # the same shape: nothing made
    assert clock.seconds() == compiled


def test_an_optional_backend_that_does_not_start_is_not_logged():
    from jcaps import cli

    cli.quiet_backend_discovery()
    cli.quiet_backend_discovery()  # once is enough; twice adds nothing
    logger = logging.getLogger(cli.BACKEND_PROBE_LOGGER)
    assert len(logger.filters) == 1
    probe = "Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so"
    record = lambda level, message: logging.LogRecord(logger.name, level, __file__, 1, message, None, None)  # noqa: E731
    assert not logger.filter(record(logging.INFO, probe))
    assert logger.filter(record(logging.WARNING, probe))
    assert logger.filter(record(logging.INFO, "Platform 'cpu' is experimental"))


def test_preparing_local_files_says_one_jcaps_line(tmp_path, capsys):
    from jcaps.data import preparation

    (tmp_path / "news").mkdir()
    (tmp_path / "news" / "train.csv").write_text('1,"a","alpha"\n2,"b","beta"\n')
    (tmp_path / "news" / "test.csv").write_text('1,"c","alpha"\n')
    preparation.prepare_local_files("zhang_csv", str(tmp_path / "news"), str(tmp_path / "cache"))
    out = capsys.readouterr().out
    assert out.startswith(f"preparing zhang_csv files in {tmp_path / 'news'} into {tmp_path / 'cache'}")
    assert out.strip().endswith("(once)") and len(out.strip().splitlines()) == 1
    preparation.prepare_local_files("zhang_csv", str(tmp_path / "news"), str(tmp_path / "cache"))
    assert capsys.readouterr().out == ""


def _skewed_news(folder) -> None:
    """AG-News-like zhang_csv files whose train split holds 24, 6 and 3 examples of classes 1-3."""
    folder.mkdir()
    rows = [(label, f"{word} {i}") for label, word, count in ((1, "alpha", 24), (2, "beta", 6), (3, "gamma", 3))
            for i in range(count)]
    (folder / "train.csv").write_text("".join(f'{label},"t","{text} news"\n' for label, text in rows))
    (folder / "test.csv").write_text('1,"t","alpha news"\n2,"t","beta news"\n3,"t","gamma news"\n')
    (folder / "classes.txt").write_text("World\nSports\nBusiness\n")


def test_training_states_its_class_weighting_and_the_skew_of_train(tmp_path, capsys):
    from jcaps.data import datasets
    from jcaps.train.config import load
    from jcaps.train.loop import class_balance

    _skewed_news(tmp_path / "news")
    config = load("fasttext_ag_news:smoke")
    config.data.source, config.data.dir, config.data.cache_dir = "local", str(tmp_path / "news"), str(tmp_path / "cache")
    config.data.validation_fraction = 0.0
    dataset = datasets.load_dataset(config.data, 0)
    capsys.readouterr()
    assert class_balance(dataset, "none") == (
        "classes of train: the largest has 24 examples, the smallest 3 (8.0 times fewer); no class weights "
        "(train.class_weights=none): a larger class weighs more in the loss, as in a test set skewed as train is.")
    # balanced: N / (J N_c) = 33 / (3 * 24) and 33 / (3 * 3), scaled so the mean over examples is 1
    weights = np.array([33 / 72, 33 / 18, 33 / 9])
    weights *= 33 / np.sum(weights * [24, 6, 3])
    assert class_balance(dataset, "balanced") == (
        "classes of train: the largest has 24 examples, the smallest 3 (8.0 times fewer); class weights balanced "
        f"(train.class_weights), {weights.min():.2f} to {weights.max():.2f}: the classes weigh more alike in the "
        "loss, as in a balanced test set.")
