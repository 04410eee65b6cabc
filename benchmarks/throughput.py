"""Compile time and train/eval throughput of a model config on synthetic batches of its shapes.

    python -m benchmarks.throughput --config configs/NAME.py[:ARG] --out DIR \
        [--vocab_size V] [--num_classes J] [--length L] [--batch B] [--repeats R] [--tiny]

Writes DIR/results.json: {"config", "compile_s", "train_examples_per_s",
"eval_examples_per_s", "train_step_s", "eval_step_s", "batch_size", "length", ..., "_run":
{commit, date, machine, load: `recording.provenance.run_metadata`}}. Times are medians of R timed
steps after warm-up, each synchronised with `block_until_ready`; compile time is measured
separately (lower + compile of the train step). `--tiny`: batch 4, length 16, vocabulary 200,
one repeat (seconds, with a `:smoke` config; the tests run it). Needs no data: tokens are
random ids.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from benchmarks.flops import count_flops
from jcaps.data.datasets import is_series
from jcaps.data.vocab import EOS, NUM_SPECIAL
from jcaps.train import mesh as mesh_lib
from jcaps.train.config import load
from jcaps.train.families import build_model, get_family
from jcaps.train.state import DTYPES, create_train_state, parameter_count
from jcaps.train.steps import eval_step, model_inputs, train_step
from recording.provenance import run_metadata
from recording.results import write_results
from recording.timing import median_seconds

TINY = {"batch": 4, "length": 16, "vocab_size": 200, "repeats": 1}


def synthetic_inputs(rng: np.random.Generator, config, batch_size: int, length: int, input_size: int) -> dict:
    """Random model inputs: token ids below `input_size`, or series of `input_size` features."""
    if is_series(config.data):
        return {
            "series": rng.normal(size=(batch_size, length, input_size)).astype(np.float32),
            "mask": np.ones((batch_size, length), bool),
        }
    shape = (batch_size, config.data.max_sentences, length) if config.data.tokenizer == "sentences" else (batch_size, length)
    return {"tokens": rng.integers(2, input_size, size=shape, dtype=np.int32)}


def synthetic_batch(rng: np.random.Generator, config, batch_size: int, length: int, vocab_size: int, num_classes: int):
    batch = {
        **synthetic_inputs(rng, config, batch_size, length, vocab_size),
        "weight": np.ones((batch_size,), np.float32),
        "index": np.arange(batch_size, dtype=np.int32),
    }
    if config.data.label_key != "labels":
        batch["label"] = rng.integers(0, num_classes, size=(batch_size,), dtype=np.int32)
        return batch
    # Multi-label: one to three labels an example, as multi-hot targets and as label sequences
    # (label ids + NUM_SPECIAL, then EOS, then PAD) padded to 8 steps.
    batch["labels"] = np.zeros((batch_size, num_classes), np.float32)
    batch["label_sequence"] = np.zeros((batch_size, 8), np.int32)
    for i in range(batch_size):
        labels = rng.choice(num_classes, size=int(rng.integers(1, 4)), replace=False)
        batch["labels"][i, labels] = 1.0
        batch["label_sequence"][i, : len(labels) + 1] = [*(labels + NUM_SPECIAL), EOS]
    return batch


def _cost(compiled) -> dict:
    cost = compiled.cost_analysis()
    return cost[0] if isinstance(cost, list) else (cost or {})


class TrainHarness(NamedTuple):
    """A compiled train step on one random batch, ready to call again and again."""

    one_train_step: Callable[[], dict]  # one step; the new state replaces the old
    evaluate: Callable[[], dict]  # one eval step on the same batch
    train: Any  # the jitted step (for the FLOP count)
    compiled_train: Any
    holder: dict  # {"state": the current train state}
    batch: dict
    mesh: Any
    compile_s: float


def train_harness(config, vocab_size: int, num_classes: int, length: int) -> TrainHarness:
    """`config`'s model, train state and compiled train step on a random batch of its shapes."""
    family = get_family(config.model.name)
    model = build_model(config.model, vocab_size, num_classes, DTYPES[config.train.dtype])
    mesh = mesh_lib.data_mesh()
    batch = mesh_lib.global_batch(
        synthetic_batch(np.random.default_rng(0), config, config.train.batch_size, length, vocab_size, num_classes),
        mesh,
    )

    dummy = model_inputs(synthetic_batch(np.random.default_rng(0), config, 1, 4, vocab_size, num_classes), family)
    state = create_train_state(config, model, dummy, 1000, mesh)
    # The state is donated, as `jcaps.train.steps` does: without it every step allocates a new
    # copy of the parameters and optimiser state.
    train = jax.jit(functools.partial(train_step, family=family, model_config=config.model), donate_argnums=0)
    evaluate = jax.jit(
        functools.partial(eval_step, family=family, model_config=config.model, num_classes=num_classes, mesh=mesh)
    )

    start = time.perf_counter()
    compiled_train = train.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    holder = {"state": state}

    def one_train_step():
        holder["state"], metrics = compiled_train(holder["state"], batch)
        return metrics

    return TrainHarness(one_train_step, lambda: evaluate(holder["state"], batch), train, compiled_train, holder, batch,
                        mesh, compile_s)


def measure(config, vocab_size: int, num_classes: int, length: int, repeats: int) -> dict:
    """Compile time and median step times of `config` on random batches."""
    harness = train_harness(config, vocab_size, num_classes, length)
    batch_size = config.train.batch_size
    train_s = median_seconds(harness.one_train_step, repeats)
    eval_s = median_seconds(harness.evaluate, repeats)
    memory = harness.compiled_train.memory_analysis()
    flops = count_flops(harness.train, harness.holder["state"], harness.batch)
    return {
        "compile_s": harness.compile_s,
        # Counted on the step's jaxpr, every scan body times its length (benchmarks/flops.py);
        # XLA's cost analysis of the compiled step, beside it, counts a loop's body once.
        "flops_per_step": flops.total,
        "matmul_flops_per_step": flops.matmul,
        "while_loops_counted_once": flops.while_loops_counted_once,
        "xla_flops_per_step": float(_cost(harness.compiled_train).get("flops", 0.0)),
        "peak_bytes": int(memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes),
        "train_step_s": train_s,
        "eval_step_s": eval_s,
        "train_examples_per_s": batch_size / train_s,
        "eval_examples_per_s": batch_size / eval_s,
        "batch_size": batch_size,
        "length": length,
        "vocab_size": vocab_size,
        "num_classes": num_classes,
        "parameters": parameter_count(harness.holder["state"].params),
        "device": jax.devices()[0].device_kind,
        "num_devices": harness.mesh.size,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab_size", type=int, default=30000)
    parser.add_argument("--num_classes", type=int, default=4)
    parser.add_argument("--length", type=int, default=0, help="sequence length (default: data.max_len)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--batch", type=int, default=0, help="batch size (default: train.batch_size)")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, one repeat (seconds)")
    args = parser.parse_args()
    if args.tiny:
        vars(args).update(TINY)
    config = load(args.config)
    config.train.batch_size = args.batch or config.train.batch_size
    results = {"config": args.config, "_run": run_metadata(args.tiny)}
    results.update(measure(config, args.vocab_size, args.num_classes, args.length or config.data.max_len, args.repeats))
    write_results(args.out, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
