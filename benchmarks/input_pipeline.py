"""What feeding the devices costs the host, and how close a real training run comes to its step.

    python -m benchmarks.input_pipeline --data_root ../shared/data --out DIR [--repeats R] [--tiny]
        [--configs A,B] [--loop_configs C] [--loop_workdir W]

For each shipped config of `CONFIGS` (AG News, Reuters-21578, Debian package tags, the emoji
tweets, the box series), on its real data under DATA_ROOT (`--config.data.dir` of its docstring;
the box series are generated): the host CPU (user + system, every thread) of a training batch,
the median over R runs of 200 batches of its train iterator, and of one evaluation pass over its
test split; beside them the seconds of encoding its splits the first time.

`loop_efficiency` for `LOOP_CONFIGS` (fastText and iCapsNets Short on AG News, the shipped
configs): a real training run's examples/s (`jcaps train`'s own rate: evaluations and
checkpoints included, compiling left out: the first step, and each compile after it, such as a
new length bucket or the eval step) over its compiled train step's examples/s on the
run's own first batches (every bucket they hold, on the devices beforehand; the median of
three passes), measured one after the other, each in a new process (what a run leaves behind,
threads and memory, slowed the steps timed after it in the same process), R pairs of them: the
median ratio and its range. Writes DIR/results.json: {CONFIG: {"train_batch_cpu_ms",
"eval_pass_cpu_s", "encode_s", "batch_size", "train_examples", "test_examples"},
"loop_efficiency": {CONFIG: {"loop_efficiency" (the median), "loop_efficiencies" (each pair's),
"run_examples_per_s", "step_examples_per_s" (each pair's), "loop_efficiency_with_compiling"
(the median ratio with the compiles after the first step counted in), "test_accuracy", ...}},
"_run"}.

`--configs` and `--loop_configs` narrow both lists ('' for none); `--loop_workdir`: where the
one loop config trains (kept, for `jcaps evaluate`; `benchmarks/device_check.sh` does so on a
GPU). `--tiny`: each config's `:smoke` form on its generated data, 20 batches, one repeat
(seconds; the tests run it).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import json
import multiprocessing
import os
import re
import resource
import shutil
import statistics
import tempfile
import time

import jax

from jcaps.data import datasets
from jcaps.train import loop
from jcaps.train import mesh as mesh_lib
from jcaps.train.config import class_weight_power, load
from jcaps.train.families import get_family
from jcaps.train.state import create_train_state, dummy_inputs, model_for
from jcaps.train.steps import compile_steps
from recording.provenance import run_metadata
from recording.results import write_results

# config -> the folder of DATA_ROOT its docstring's `--config.data.dir` names ('' : generated).
CONFIGS = {
    "fasttext_ag_news": "ag_news",
    "sgm_reuters": "reuters21578",
    "sgm_debian_tags": "debian_tags",
    "dilated_fcn_emoji": "semeval2018_emoji",
    "input_cell_boxes": "",
}
LOOP_CONFIGS = ("fasttext_ag_news", "icapsnet_short_ag_news")
TRAIN_BATCHES = 200
STEP_BATCHES = 100


def cpu_seconds() -> float:
    """This process's CPU time, user and system, of every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def config_of(name: str, data_root: str, cache_dir: str, tiny: bool):
    config = load(f"{name}:smoke" if tiny else name)
    if CONFIGS.get(name, "ag_news") and not tiny:
        config.data.dir = os.path.join(os.path.abspath(data_root), CONFIGS.get(name, "ag_news"))
    config.data.cache_dir = cache_dir
    config.train.progress = "lines"
    return config


def host_costs(config, batches: int, repeats: int) -> dict:
    """Host CPU of training batches and of an evaluation pass over test, after the splits are
    encoded (timed apart)."""
    started = time.perf_counter()
    dataset = datasets.load_dataset(config.data, config.train.seed)
    for split in dataset.splits:
        dataset.encoded(split)
    encode_s = time.perf_counter() - started
    power = class_weight_power(config.train.class_weights)
    weights = None if power is None else dataset.balanced_class_weights(power)
    train_ms, eval_s = [], []
    for _ in range(repeats):
        iterator = dataset.train_iterator(config.train.batch_size, config.train.seed, weights,
                                          config.data.length_grouping)
        next(iterator)  # the thread that gathers ahead is started
        before = cpu_seconds()
        for _ in range(batches):
            next(iterator)
        train_ms.append((cpu_seconds() - before) / batches * 1e3)
        del iterator
        before = cpu_seconds()
        for _ in dataset.eval_batches("test", config.train.eval_batch_size or config.train.batch_size):
            pass
        eval_s.append(cpu_seconds() - before)
    return {
        "train_batch_cpu_ms": statistics.median(train_ms),
        "eval_pass_cpu_s": statistics.median(eval_s),
        "encode_s": encode_s,
        "batch_size": config.train.batch_size,
        "train_examples": len(dataset.splits["train"].source),
        "test_examples": len(dataset.splits["test"].source),
    }


def step_examples_per_second(config, batches: int) -> float:
    """The compiled train step (as training compiles it) on the run's first `batches` batches,
    already on the devices: examples a second (the median of three passes), after each of their
    shapes has compiled."""
    dataset = datasets.load_dataset(config.data, config.train.seed)
    power = class_weight_power(config.train.class_weights)
    weights = None if power is None else dataset.balanced_class_weights(power)
    iterator = dataset.train_iterator(config.train.batch_size, config.train.seed, weights, config.data.length_grouping)
    mesh = mesh_lib.data_mesh()
    staged = [mesh_lib.global_batch(next(iterator), mesh) for _ in range(batches)]
    train_fn, _ = compile_steps(config, get_family(config.model.name), dataset.num_classes, mesh)
    state = create_train_state(config, model_for(config, dataset), dummy_inputs(config, dataset), 10**6, mesh)
    compiled = set()
    for batch in staged:  # every bucket compiled before the clock starts
        shape = tuple(batch[name].shape for name in sorted(batch))
        if shape not in compiled:
            state, metrics = train_fn(state, batch)
            jax.block_until_ready(metrics)
            compiled.add(shape)
    passes = []
    for _ in range(3):
        started = time.perf_counter()
        for batch in staged:
            state, metrics = train_fn(state, batch)
        jax.block_until_ready((state, metrics))
        passes.append(time.perf_counter() - started)
    return batches * config.train.batch_size / statistics.median(passes)


def run_examples_per_second(config, workdir: str) -> tuple[float, float, dict, str]:
    """A training run's own rate (its summary's steps/s, compiling left out), the same with the
    compiles after the first step counted in, its final metrics, and the summary's first line."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        final = loop.train_and_evaluate(config, workdir)
    summary = next(line for line in output.getvalue().splitlines() if line.startswith("trained to step"))
    rate = re.search(r"(\d+) steps in .*then ([0-9.]+) steps/s", summary)
    if rate is None:
        raise RuntimeError(f"no rate in the run's summary: {summary}")
    steps, steps_per_s = int(rate.group(1)), float(rate.group(2))
    compiling = re.search(r"([0-9.]+) s of compiling left out", summary)
    seconds = (steps - 1) / steps_per_s + (float(compiling.group(1)) if compiling else 0.0)
    batch = config.train.batch_size
    return steps_per_s * batch, (steps - 1) / seconds * batch, final, summary


def _timed_run(config, workdir: str) -> tuple[float, float, float, dict, str]:
    started = time.perf_counter()
    rate, rate_with_compiling, final, summary = run_examples_per_second(config, workdir)
    return time.perf_counter() - started, rate, rate_with_compiling, final, summary


def loop_efficiency(config, workdir: str, step_batches: int, repeats: int) -> dict:
    """`repeats` pairs of a training run (in `workdir`, trained anew each time) and its compiled
    step, each in a new process."""
    spawn = multiprocessing.get_context("spawn")
    runs, steps = [], []
    for _ in range(repeats):
        shutil.rmtree(workdir, ignore_errors=True)
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as process:
            runs.append(process.submit(_timed_run, config, workdir).result())
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as process:
            steps.append(process.submit(step_examples_per_second, config, step_batches).result())
    ratios = [run[1] / step for run, step in zip(runs, steps)]
    with_compiling = [run[2] / step for run, step in zip(runs, steps)]
    training_wall_seconds, _, _, final, summary = runs[-1]
    return {
        "training_wall_seconds": training_wall_seconds,
        "run_examples_per_s": [run[1] for run in runs],
        "step_examples_per_s": steps,
        "loop_efficiency": statistics.median(ratios),
        "loop_efficiencies": ratios,
        "loop_efficiency_with_compiling": statistics.median(with_compiling),
        "test_accuracy": final["test"]["accuracy"],
        "run_summary": summary,
        "num_devices": jax.device_count(),
        "device": jax.devices()[0].device_kind,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_root", default="", help="the folder holding ag_news/, reuters21578/, ...")
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="host costs of these configs")
    parser.add_argument("--loop_configs", default=",".join(LOOP_CONFIGS), help="loop efficiency of these")
    parser.add_argument("--loop_workdir", default="", help="where the one loop config trains (default: scratch)")
    parser.add_argument("--tiny", action="store_true", help=":smoke configs, few batches (seconds)")
    args = parser.parse_args()
    configs = [name for name in args.configs.split(",") if name]
    loop_configs = [name for name in args.loop_configs.split(",") if name]
    if not args.tiny and not args.data_root:
        parser.error("--data_root is needed (or --tiny)")
    if args.loop_workdir and len(loop_configs) != 1:
        parser.error("--loop_workdir takes one --loop_configs")
    results: dict = {"_run": run_metadata(args.tiny)}
    with tempfile.TemporaryDirectory() as scratch:
        cache = os.path.join(scratch, "cache")
        for name in configs:
            config = config_of(name, args.data_root, cache, args.tiny)
            results[name] = host_costs(config, 20 if args.tiny else TRAIN_BATCHES, 1 if args.tiny else args.repeats)
            print(name, json.dumps(results[name]), flush=True)
        results["loop_efficiency"] = {}
        for name in loop_configs:
            config = config_of(name, args.data_root, cache, args.tiny)
            workdir = args.loop_workdir or os.path.join(scratch, name, "workdir")
            row = loop_efficiency(config, workdir, 8 if args.tiny else STEP_BATCHES, 1 if args.tiny else args.repeats)
            results["loop_efficiency"][name] = row
            print(name, json.dumps(row), flush=True)
            write_results(args.out, results)
    write_results(args.out, results)


if __name__ == "__main__":
    main()
