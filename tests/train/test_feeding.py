"""Batches put on the devices ahead (`jcaps.train.feeding`): in order, sharded as the step takes
them, and the data state a checkpoint saves is the one after the batch taken, not after those
put ahead."""

from __future__ import annotations

import jax
import numpy as np

from jcaps.train import mesh as mesh_lib
from jcaps.train.feeding import AHEAD, DevicePrefetch, DispatchWindow, batches_ahead, gathered_ahead


class CountingBatches:
    """Batches 0, 1, ... of 4 rows, with a grain-like state: how many were taken."""

    def __init__(self, count: int):
        self.taken, self.count = 0, count

    def __next__(self):
        if self.taken == self.count:
            raise StopIteration
        self.taken += 1
        return {"x": np.full((4, 3), self.taken - 1, np.float32)}

    def get_state(self):
        return {"next_index": self.taken}


def test_the_state_is_the_one_after_the_batch_taken():
    mesh = mesh_lib.data_mesh()
    batches = CountingBatches(5)
    feed = DevicePrefetch(batches, mesh, ahead=2)
    assert feed.get_state() == {"next_index": 0}
    first = next(feed)
    assert batches.taken == 3  # the one taken and two ahead
    assert feed.get_state() == {"next_index": 1}
    assert isinstance(first["x"], jax.Array) and first["x"].sharding == mesh_lib.batch_sharded(mesh)
    np.testing.assert_array_equal(first["x"], 0.0)
    rest = [int(batch["x"][0, 0]) for batch in feed]
    assert rest == [1, 2, 3, 4] and feed.get_state() == {"next_index": 5}


def test_evaluation_batches_are_gathered_in_order_on_another_thread():
    import threading

    gathered_on = []

    def batches():
        for i in range(4):
            gathered_on.append(threading.current_thread().name)
            yield {"x": np.full((2,), i)}

    assert [int(batch["x"][0]) for batch in gathered_ahead(batches())] == [0, 1, 2, 3]
    assert gathered_on and all(name.startswith("jcaps-gather") for name in gathered_on)
    assert list(gathered_ahead([])) == []
    early = gathered_ahead(batches())
    assert int(next(early)["x"][0]) == 0
    early.close()  # a pass stopped early (an error) leaves no thread waiting


def test_with_none_ahead_each_batch_is_put_as_it_is_taken():
    mesh = mesh_lib.data_mesh()
    batches = CountingBatches(3)
    feed = DevicePrefetch(batches, mesh, ahead=0)
    first = next(feed)
    assert batches.taken == 1 and feed.get_state() == {"next_index": 1}
    np.testing.assert_array_equal(first["x"], 0.0)
    assert [int(batch["x"][0, 0]) for batch in feed] == [1, 2] and feed.get_state() == {"next_index": 3}


def test_batches_go_ahead_on_accelerators_only():
    mesh = mesh_lib.data_mesh()
    assert batches_ahead(mesh) == 0  # the suite's devices are CPUs
    import types

    gpus = types.SimpleNamespace(devices=np.array([types.SimpleNamespace(platform="gpu")] * 2, object))
    assert batches_ahead(gpus) == AHEAD > 0


class Outputs:
    """A step's outputs as `jax.block_until_ready` sees a leaf: it calls its `block_until_ready`."""

    def __init__(self, step: int, waited: list):
        self.step, self.waited = step, waited

    def block_until_ready(self):
        self.waited.append(self.step)
        return self


def test_the_host_waits_for_the_step_dispatched_ahead_steps_before():
    waited: list[int] = []
    window = DispatchWindow(ahead=2)
    for step in range(5):
        window.dispatched({"loss": Outputs(step, waited)})
        # After step s is dispatched, every step up to s - 2 has been waited for, and no later one.
        assert waited == list(range(max(step - 1, 0)))
