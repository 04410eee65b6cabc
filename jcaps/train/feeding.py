"""Training batches on the devices ahead of the steps that take them.

The host gathers a batch in well under a millisecond (`jcaps.data.batching`); what is left is
the transfer, which `DevicePrefetch` starts for the next batches while the step before runs (a
step is dispatched asynchronously), as the input pipelines of big_vision and Flax's examples do,
on accelerators (`batches_ahead`).

Evaluation passes gather their next batch on a thread while a batch is evaluated
(`gathered_ahead`: NumPy only, no XLA call leaves the main thread) and put each batch on the
devices as they take it.

The host runs at most `DISPATCHED_AHEAD` steps (or evaluation batches) ahead of the devices
(`DispatchWindow`): enough to keep them busy while it prepares the next, and a bound that XLA's
CPU client needs. Its launches run on a pool of one thread per device, and a launch that waits
for one of a device's 32 slots for queued computations holds a thread while the other half of a
collective waits for one: a process of several CPU devices that queued more than 32 computations
on a device stalled in a collective's rendezvous until XLA aborted it (an evaluation pass queues
a step and an addition per batch).
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Iterable, Iterator
from typing import Any

import jax

from jcaps.train import mesh as mesh_lib

# Batches put on accelerators ahead of the one a step takes: their transfers run while the
# steps before run.
AHEAD = 2
# Steps (or evaluation batches) the host dispatches before it waits for the oldest one's outputs.
DISPATCHED_AHEAD = 2


def batches_ahead(mesh) -> int:
    """How many training batches to put on the devices of `mesh` ahead: `AHEAD` on accelerators;
    none on CPU devices, which are host memory (nothing to transfer)."""
    return 0 if mesh.devices.flat[0].platform == "cpu" else AHEAD


class DispatchWindow:
    """Keeps the host at most `ahead` dispatched steps ahead of the devices: `dispatched(outputs)`
    records a step's outputs (any pytree of arrays) and waits until those of the step `ahead`
    before it are computed."""

    def __init__(self, ahead: int = DISPATCHED_AHEAD):
        self._ahead = ahead
        self._pending: collections.deque = collections.deque()

    def dispatched(self, outputs: Any) -> None:
        self._pending.append(outputs)
        if len(self._pending) > self._ahead:
            jax.block_until_ready(self._pending.popleft())


class DevicePrefetch:
    """The global batches (`mesh_lib.global_batch`, sharded over `mesh`) of the local batches of
    `batches`, with `ahead` more of them on the devices once one is taken (0: each is put as it
    is taken).

    `get_state()` is the state of `batches` (a grain iterator) after the last batch *taken*, not
    after those put ahead, so that a checkpoint resumes with the batch the next step takes."""

    def __init__(self, batches: Any, mesh, ahead: int):
        self._batches, self._mesh, self._ahead = batches, mesh, ahead
        self._queue: collections.deque = collections.deque()
        self._state = batches.get_state() if hasattr(batches, "get_state") else None
        self._exhausted = False

    def __iter__(self) -> DevicePrefetch:
        return self

    def __next__(self) -> dict:
        if not self._queue:
            self._put_next()
        if not self._queue:
            raise StopIteration
        batch, self._state = self._queue.popleft()
        while len(self._queue) < self._ahead and self._put_next():
            pass
        return batch

    def _put_next(self) -> bool:
        """Puts the next batch on the devices; False when there is none."""
        if self._exhausted:
            return False
        try:
            local = next(self._batches)
        except StopIteration:
            self._exhausted = True
            return False
        state = self._batches.get_state() if self._state is not None else None
        self._queue.append((mesh_lib.global_batch(local, self._mesh), state))
        return True

    def get_state(self):
        return self._state


def gathered_ahead(batches: Iterable[dict]) -> Iterator[dict]:
    """The batches of `batches` in order, the next one gathered on a thread of its own while the
    caller works on the one before."""
    iterator = iter(batches)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jcaps-gather") as thread:
        pending = thread.submit(next, iterator, None)
        while (batch := pending.result()) is not None:
            pending = thread.submit(next, iterator, None)
            yield batch
