"""The 1-axis ('data',) mesh: parameters replicated, batches split on their leading axis."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def data_mesh() -> Mesh:
    return Mesh(np.asarray(jax.devices()), ("data",))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharded(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec("data"))


def check_batch_size(batch_size: int, mesh: Mesh, name: str = "train.batch_size") -> None:
    if batch_size % mesh.size:
        raise ValueError(f"{name}={batch_size} must be a multiple of the number of devices ({mesh.size})")


def global_batch(local_batch: dict, mesh: Mesh) -> dict:
    """This process's NumPy batch → global jax.Arrays sharded over the 'data' axis."""
    sharding = batch_sharded(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}
