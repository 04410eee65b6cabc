"""Metrics of a model on one split, as training, `jcaps.evaluate` and the tests compute them."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jcaps.train import mesh as mesh_lib
from jcaps.train.feeding import DispatchWindow, gathered_ahead
from jcaps.train.metrics import evaluation_metrics


@jax.jit
def _add(totals: dict, sums: dict) -> dict:
    """One program for the whole tree: one computation a batch queued on each device, not one a sum."""
    return jax.tree.map(jnp.add, totals, sums)


def evaluate_split(eval_fn, state, dataset, split: str, batch_size: int, mesh) -> dict:
    """Metrics of `state` on one split of `dataset` (an `ExampleDataset`), with `eval_fn` the
    compiled eval step (`compile_steps`): sums accumulated on the device, divided on the host;
    the next batch is gathered while one is evaluated, and the host stays a few batches ahead of
    the devices (`DispatchWindow`)."""
    totals, window = None, DispatchWindow()
    for local in gathered_ahead(dataset.eval_batches(split, batch_size, shard=mesh_lib.process_shard())):
        sums = eval_fn(state, mesh_lib.global_batch(local, mesh))
        totals = sums if totals is None else _add(totals, sums)
        window.dispatched(totals)
    if totals is None:
        raise ValueError(f"the {split} split is empty")
    return evaluation_metrics(jax.device_get(totals))
