"""The 1-axis ('data',) mesh: parameters replicated, batches split on their leading axis."""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from jcaps.data.batching import Shard
from jcaps.errors import ConfigError


def data_mesh(devices=None) -> Mesh:
    """The 'data' mesh over `devices` (default: every device of every process). Its axis is
    `Auto`: jit places the arrays of a step by the shardings of its inputs and outputs, as the
    steps were written for (`jax.make_mesh` makes `Explicit` axes by default)."""
    devices = jax.devices() if devices is None else devices
    return jax.make_mesh((len(devices),), ("data",), (AxisType.Auto,), devices=devices)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharded(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec("data"))


def process_shard() -> Shard:
    """This process's rows of every global batch: process `jax.process_index()` of
    `jax.process_count()` reads its equal part."""
    return Shard(jax.process_index(), jax.process_count())


def check_batch_size(batch_size: int, mesh: Mesh, name: str = "train.batch_size") -> None:
    if batch_size % mesh.size:
        raise ConfigError(f"{name}={batch_size} must be a multiple of the number of devices ({mesh.size})")


def global_batch(local_batch: dict, mesh: Mesh) -> dict:
    """This process's NumPy batch → global jax.Arrays sharded over the 'data' axis.

    With several processes, each has padded its rows to its own longest bucket; all first pad
    to the largest shape any of them has (zeros: PAD tokens, masked steps), which is the
    bucket a single process would have chosen for the whole global batch."""
    if jax.process_count() > 1:
        local_batch = _pad_to_common_shapes(local_batch)
    sharding = batch_sharded(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


def _pad_to_common_shapes(local_batch: dict) -> dict:
    names = sorted(local_batch)
    shapes = np.concatenate([np.asarray(local_batch[k].shape, np.int64) for k in names])
    common = np.max(multihost_utils.process_allgather(shapes), axis=0)
    padded, offset = {}, 0
    for name in names:
        value = local_batch[name]
        target = common[offset : offset + value.ndim]
        offset += value.ndim
        padded[name] = np.pad(value, [(0, int(t) - n) for n, t in zip(value.shape, target)])
    return padded


def process_local(tree):
    """The tree's arrays as this process holds them: a global array (restored by several processes
    together, replicated) becomes its copy on one of this process's devices, which work of this
    process alone can use."""
    return jax.tree.map(
        lambda a: a.addressable_data(0) if isinstance(a, jax.Array) and not a.is_fully_addressable else a, tree
    )


def initialize_distributed(coordinator_address: str | None, num_processes: int | None, process_id: int | None) -> None:
    """`jax.distributed.initialize` for a multi-process run; each argument that is None JAX finds
    by itself, from the cluster's environment (Slurm, Open MPI) or services (TPU pods, GCE).
    Raises `ConfigError` when it finds none.

    CPU processes exchange collectives through gloo, which JAX bundles."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
        )
    except ValueError as error:  # what jax.distributed could not find (no cluster detected)
        raise ConfigError(f"jax.distributed could not join the processes: {' '.join(str(error).split())}") from error
    if jax.process_count() > 1 and jax.default_backend() == "cpu":
        # CPU processes of jaxlib 0.12 whose programs come from the persistent compilation cache
        # hang in their first collective (a second two-process run of the same config did, in
        # tests/train/test_multiprocess.py): they compile them instead.
        jax.config.update("jax_enable_compilation_cache", False)
