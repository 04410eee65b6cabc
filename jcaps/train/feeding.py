"""Training batches on the devices ahead of the steps that take them.

The host gathers a batch in well under a millisecond (`jcaps.data.batching`); what is left is
the transfer, which `DevicePrefetch` starts for the next batches while the step before runs (a
step is dispatched asynchronously), as the input pipelines of big_vision and Flax's examples do.

Evaluation passes gather their next batch on a thread while a batch is evaluated
(`gathered_ahead`: NumPy only, no XLA call leaves the main thread), and put each batch on the
devices as they take it: with their batches put on the devices ahead, XLA's CPU client aborted
the process now and then inside an evaluation (jaxlib 0.10.2, a loaded machine).
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Iterable, Iterator
from typing import Any

from jcaps.train import mesh as mesh_lib

# Global batches on the devices at once: the one a step takes and the next one, transferred
# while that step runs.
AHEAD = 2


class DevicePrefetch:
    """The global batches (`mesh_lib.global_batch`, sharded over `mesh`) of the local batches of
    `batches`, `ahead` of them put on the devices before they are taken.

    `get_state()` is the state of `batches` (a grain iterator) after the last batch *taken*, not
    after those put ahead, so that a checkpoint resumes with the batch the next step takes."""

    def __init__(self, batches: Any, mesh, ahead: int = AHEAD):
        self._batches, self._mesh, self._ahead = batches, mesh, ahead
        self._queue: collections.deque = collections.deque()
        self._state = batches.get_state() if hasattr(batches, "get_state") else None
        self._exhausted = False

    def __iter__(self) -> DevicePrefetch:
        return self

    def __next__(self) -> dict:
        self._fill()
        if not self._queue:
            raise StopIteration
        batch, self._state = self._queue.popleft()
        self._fill()
        return batch

    def _fill(self) -> None:
        while len(self._queue) < self._ahead and not self._exhausted:
            try:
                local = next(self._batches)
            except StopIteration:
                self._exhausted = True
                return
            state = self._batches.get_state() if self._state is not None else None
            self._queue.append((mesh_lib.global_batch(local, self._mesh), state))

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
