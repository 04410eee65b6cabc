"""What the checkpoint checksums cost: save and restore of a model's train state with and without them.

    python -m benchmarks.checkpoint_integrity --out DIR [--sizes reference|config]
        [--vocab_size 50000] [--num_classes 90] [--repeats 3] [--tiny]

Builds the train state of SGM (`configs/sgm_reuters.py`; `--sizes reference`, the default: the
paper's sizes, 54 M parameters, as `sgm_speed.py` builds them) with parameters and Adam moments
filled with noise (no data needed) and
saves and restores it in a temporary folder beside `--out`, each timed `--repeats` times
(median):

    async_return_s    orbax's save returning, its writes still running (what a training step
                      waited for before jcaps waited for every save to finish)
    orbax_save_s      orbax's save, waited for until committed
    jcaps_save_s      `Checkpoints.save`: the same, then the SHA-256 of every file written
    orbax_restore_s   orbax's restore
    jcaps_restore_s   `Checkpoints.restore`: the checksums verified, then the same restore

Writes DIR/results.json with those times, the state's size (`state_mb`, the files' total), the
overheads (`save_overhead`, `restore_overhead`: jcaps / orbax) and "_run": {commit, date,
machine, load: `recording.provenance.run_metadata`}. `--tiny`: a small model, one repeat (the tests run
it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from benchmarks.sgm_speed import sized
from benchmarks.throughput import synthetic_batch
from jcaps.train import mesh as mesh_lib
from jcaps.train.checkpoints import Checkpoints, savable
from jcaps.train.config import load
from jcaps.train.families import build_model, get_family
from jcaps.train.state import DTYPES, create_train_state, parameter_count
from jcaps.train.steps import model_inputs
from recording.provenance import run_metadata


def train_state(config, vocab_size: int, num_classes: int):
    """The train state of `config`, its floating-point arrays (parameters and Adam moments) filled
    with noise: a trained state's moments are dense, and orbax's zstd would squeeze the zeros of a
    fresh one."""
    family = get_family(config.model.name)
    model = build_model(config.model, vocab_size, num_classes, DTYPES[config.train.dtype])
    dummy = model_inputs(synthetic_batch(np.random.default_rng(0), config, 1, 4, vocab_size, num_classes), family)
    state = create_train_state(config, model, dummy, 1000, mesh_lib.data_mesh())
    rng = np.random.default_rng(0)

    def noise(x):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return x
        return jax.device_put(rng.normal(size=x.shape).astype(x.dtype), x.sharding)

    return state.replace(params=jax.tree.map(noise, state.params), opt_state=jax.tree.map(noise, state.opt_state))


def folder_megabytes(folder: str) -> float:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names) / 2**20


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(state, scratch: str, repeats: int) -> dict:
    tree = savable(state)
    times = {key: [] for key in ("async_return_s", "orbax_save_s", "jcaps_save_s", "orbax_restore_s",
                                 "jcaps_restore_s")}
    for repeat in range(repeats):
        plain_dir = os.path.join(scratch, f"orbax_{repeat}")
        manager = ocp.CheckpointManager(plain_dir, item_names=("state",))
        started = time.perf_counter()
        manager.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave(tree)), force=True)
        times["async_return_s"].append(time.perf_counter() - started)
        manager.wait_until_finished()
        times["orbax_save_s"].append(time.perf_counter() - started)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract))
        times["orbax_restore_s"].append(timed(lambda: jax.block_until_ready(manager.restore(1, args=args)["state"])))
        manager.close()

        jcaps_dir = os.path.join(scratch, f"jcaps_{repeat}")
        checkpoints = Checkpoints(jcaps_dir)
        # Until committed and summed: `save` returns before, and `wait` finishes it.
        times["jcaps_save_s"].append(timed(lambda: (checkpoints.save(1, state, None), checkpoints.wait())))
        restored = Checkpoints(jcaps_dir)  # a new process's view: nothing verified yet
        times["jcaps_restore_s"].append(
            timed(lambda: jax.block_until_ready(restored.restore(state, 1, with_data=False)[0].params))
        )
        state_mb = folder_megabytes(os.path.join(checkpoints.directory, "1"))
        checkpoints.close()
        restored.close()
    results = {key: statistics.median(values) for key, values in times.items()}
    results["state_mb"] = round(state_mb, 1)
    results["save_overhead"] = results["jcaps_save_s"] / results["orbax_save_s"]
    results["restore_overhead"] = results["jcaps_restore_s"] / results["orbax_restore_s"]
    results["repeats"] = repeats
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", choices=("reference", "config"), default="reference")
    parser.add_argument("--vocab_size", type=int, default=50000)
    parser.add_argument("--num_classes", type=int, default=90)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="a small model, one repeat (seconds)")
    args = parser.parse_args()
    logging.set_verbosity(logging.ERROR)
    metadata = run_metadata(args.tiny)
    config_file = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "sgm_reuters.py")
    config = load(config_file + ":smoke") if args.tiny else sized(load(config_file), args.sizes)
    vocab_size, repeats = (200, 1) if args.tiny else (args.vocab_size, args.repeats)
    state = train_state(config, vocab_size, args.num_classes)
    os.makedirs(args.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="checkpoint_integrity_", dir=args.out)
    try:
        results = measure(state, scratch, repeats)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results.update(sizes="tiny" if args.tiny else args.sizes, parameters=parameter_count(state.params),
                   vocab_size=vocab_size, num_classes=args.num_classes, cores=os.cpu_count(), _run=metadata)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
