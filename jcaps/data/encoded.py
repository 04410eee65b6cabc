"""Splits encoded once: every example of a split as a row of arrays, so that a batch is a gather of
rows and a slice to its bucket, in NumPy, with no Python per example.

An encoded example is a dict of scalars and arrays (`ExampleDataset.encode`). Encoded rows hold,
for each name, an array [N, *widest]: the examples' own values, zero-padded to the widest of
them; and for each name whose examples differ in shape (tokens, series, label ids), `sizes`
[N, ndim]: each example's own shape. A split is encoded in chunks; with a folder, each array is
written there as a `.npy` file and read back memory-mapped, so that a split larger than memory
batches as well, and later runs read it instead of encoding it again.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from collections.abc import Callable, Sequence

import numpy as np

# What one chunk of encoding holds in memory at most (examples).
CHUNK = 8192
# A folder is complete once this file is in it (written last, then the folder renamed in place).
COMPLETE = "complete"


@dataclasses.dataclass(frozen=True)
class EncodedRows:
    """Encoded examples as rows: `fields[name]` [n, *widest] and, for names whose examples differ
    in shape, `sizes[name]` [n, ndim] (int32)."""

    fields: dict[str, np.ndarray]
    sizes: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.fields.values()))) if self.fields else 0

    def take(self, ids: np.ndarray) -> EncodedRows:
        """The rows `ids` [k], in that order, in memory (a gather reads only those rows of a
        memory-mapped file)."""
        ids = np.asarray(ids, np.int64)
        return EncodedRows(
            {name: np.asarray(value[ids]) for name, value in self.fields.items()},
            {name: np.asarray(value[ids]) for name, value in self.sizes.items()},
        )


def stack(examples: Sequence[dict]) -> EncodedRows:
    """Encoded examples (dicts with the same names: scalars, or arrays of one rank) as rows."""
    if not examples:
        return EncodedRows({}, {})
    fields, sizes = {}, {}
    for name in examples[0]:
        values = [np.asarray(example[name]) for example in examples]
        if values[0].ndim == 0:
            fields[name] = np.asarray(values, values[0].dtype)
            continue
        shapes = np.asarray([value.shape for value in values], np.int32)
        out = np.zeros((len(values), *shapes.max(axis=0)), values[0].dtype)
        for i, value in enumerate(values):
            out[i][tuple(slice(0, n) for n in value.shape)] = value
        fields[name], sizes[name] = out, shapes
    return EncodedRows(fields, sizes)


def encode_rows(encode: Callable[[int], dict], size: int, folder: str | None = None) -> EncodedRows:
    """Examples 0 .. `size` - 1 (`encode(i)`) as rows, encoded a chunk at a time. With `folder`:
    read from there when a complete encoding is there, else written there (into a temporary
    folder beside it, renamed into place when complete, so that processes encoding the same split
    at once never read half an encoding) and read back memory-mapped; only one chunk is in memory
    at a time."""
    if folder is not None and os.path.isfile(os.path.join(folder, COMPLETE)):
        read = _read(folder, size)
        if read is not None:
            return read
        shutil.rmtree(folder, ignore_errors=True)  # damaged or of another size: encoded again
    starts = range(0, size, CHUNK)
    if folder is None or size == 0:
        return _concatenate([stack([encode(i) for i in range(s, min(s + CHUNK, size))]) for s in starts])
    temporary = f"{folder}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.makedirs(temporary)
    try:
        chunk_folders = []
        for number, start in enumerate(starts):
            chunk_folders.append(os.path.join(temporary, f"chunk{number}"))
            os.mkdir(chunk_folders[-1])
            _save(stack([encode(i) for i in range(start, min(start + CHUNK, size))]), chunk_folders[-1])
        _save(_Concatenated([_read_back(chunk, None) for chunk in chunk_folders]), temporary)
        for chunk in chunk_folders:
            shutil.rmtree(chunk)
        with open(os.path.join(temporary, COMPLETE), "w", encoding="utf-8") as f:
            f.write(f"{size}\n")
        try:
            os.rename(temporary, folder)
        except OSError:  # another process renamed its own encoding of the split first
            if not os.path.isfile(os.path.join(folder, COMPLETE)):
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return _read_back(folder, size)


def _read_back(folder: str, size: int | None) -> EncodedRows:
    """The rows just written in `folder`."""
    read = _read(folder, size)
    if read is None:
        raise OSError(f"{folder}: the encoded split does not read back")
    return read


def _widest(chunks: Sequence[EncodedRows], name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in np.max([chunk.fields[name].shape[1:] for chunk in chunks], axis=0))


def _concatenate(chunks: Sequence[EncodedRows]) -> EncodedRows:
    if not chunks:
        return EncodedRows({}, {})
    fields = {}
    for name in chunks[0].fields:
        widest = _widest(chunks, name)
        fields[name] = np.concatenate(
            [
                np.pad(c.fields[name], [(0, 0)] + [(0, w - n) for n, w in zip(c.fields[name].shape[1:], widest)])
                for c in chunks
            ]
        )
    sizes = {name: np.concatenate([chunk.sizes[name] for chunk in chunks]) for name in chunks[0].sizes}
    return EncodedRows(fields, sizes)


@dataclasses.dataclass(frozen=True)
class _Concatenated:
    """Chunks of rows read as one, without holding them in memory: what `_save` writes."""

    chunks: Sequence[EncodedRows]


def _save(rows: EncodedRows | _Concatenated, folder: str) -> None:
    """Every field as `folder/NAME.npy` and every size array as `folder/NAME.sizes.npy`, the rows
    of `_Concatenated` chunks one chunk at a time, zero-padded to the widest."""
    chunks = rows.chunks if isinstance(rows, _Concatenated) else [rows]
    total = sum(len(chunk) for chunk in chunks)
    for name in chunks[0].fields:
        widest = _widest(chunks, name)
        out = np.lib.format.open_memmap(
            os.path.join(folder, f"{name}.npy"), "w+", chunks[0].fields[name].dtype, (total, *widest)
        )
        start = 0
        for chunk in chunks:
            value = chunk.fields[name]
            out[(slice(start, start + len(value)), *(slice(0, n) for n in value.shape[1:]))] = value
            start += len(value)
        out.flush()
        del out
    for name in chunks[0].sizes:
        np.save(os.path.join(folder, f"{name}.sizes.npy"), np.concatenate([chunk.sizes[name] for chunk in chunks]))


def _read(folder: str, size: int | None) -> EncodedRows | None:
    """The rows written in `folder`, memory-mapped; None when they are not `size` rows (any number
    with None) of plain arrays (a damaged or foreign folder: it is encoded again)."""
    fields, sizes = {}, {}
    try:
        for file in sorted(os.listdir(folder)):
            if not file.endswith(".npy"):
                continue
            array = np.load(os.path.join(folder, file), mmap_mode="r", allow_pickle=False)
            if (size is not None and len(array) != size) or array.dtype.hasobject:
                return None
            if file.endswith(".sizes.npy"):
                sizes[file.removesuffix(".sizes.npy")] = np.asarray(array)
            else:
                fields[file.removesuffix(".npy")] = array
    except (OSError, ValueError):
        return None
    return EncodedRows(fields, sizes) if fields and set(sizes) <= set(fields) else None
