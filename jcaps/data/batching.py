"""Batching, shared by text and series datasets: buckets, length grouping, and each process's
rows of a global batch.

A dataset says how one example is encoded and how encoded rows become a padded batch
(`assemble`); `ExampleDataset` encodes each split once (`jcaps.data.encoded`: rows of arrays,
on disk beside the prepared data when the split's origin is known) and turns that into an
endless, seeded, resumable train iterator (grain) and one pass over a split for evaluation, each
batch a gather of rows. Every batch pads its length to a bucket (the smallest boundary that
holds its longest example), so a jitted step compiles once per bucket. The global batches do
not depend on the number of processes: process `shard.index` of `shard.count` gathers only its
rows of each.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from jcaps.data.encoded import EncodedRows, encode_rows, stack
from jcaps.data.splits import Split
from jcaps.data.vocab import LabelMap
from jcaps.errors import ConfigError

if TYPE_CHECKING:  # imported where batches are made: predicting does not pay for it
    import grain


@dataclasses.dataclass(frozen=True)
class Shard:
    """Which rows of every global batch this process reads: process `index` of `count` gets rows
    [index * local, (index + 1) * local) of a global batch of `count * local` rows."""

    index: int = 0
    count: int = 1

    def rows(self, batch_size: int) -> slice:
        local = batch_size // self.count
        return slice(self.index * local, (self.index + 1) * local)


# One process reads whole batches: prediction, interpretation, single-host training.
WHOLE_BATCH = Shard()


def bucket_length(length: int, boundaries: Sequence[int], max_len: int) -> int:
    """The smallest boundary that holds `length` (boundaries sorted; `max_len` closes them)."""
    for boundary in boundaries:
        if length <= boundary:
            return boundary
    return max_len


def default_boundaries(max_len: int, smallest: int = 16) -> tuple[int, ...]:
    """Powers of two from `smallest` below `max_len`, then `max_len` itself."""
    boundaries = []
    size = smallest
    while size < max_len:
        boundaries.append(size)
        size *= 2
    return tuple(boundaries) + (max_len,)


# Training batches gathered ahead of the step that takes them (on a thread of their own).
PREFETCHED_BATCHES = 4

# The layout of the encoded rows on disk: a change of `encode` or of `jcaps.data.encoded` that
# would read older rows wrongly counts it up, so that they are encoded again.
ENCODING_VERSION = 1


def _shuffled_batches(size: int, batch_size: int, seed: int) -> grain.MapDataset:
    """Endless [batch_size] example ids: the stream of each epoch's seeded permutation cut into
    consecutive batches (a batch may hold the end of one epoch and the start of the next), as
    `grain.MapDataset.range(size).shuffle(seed).repeat().batch(batch_size)` orders them, each
    epoch's permutation computed whole (`seeded_permutation`) instead of an example at a time."""
    import grain

    @functools.lru_cache(maxsize=2)
    def epoch(number: int) -> np.ndarray:
        return seeded_permutation(size, (seed + number) % 2**32)

    def batch(k: int) -> np.ndarray:
        positions = np.arange(k * batch_size, (k + 1) * batch_size, dtype=np.int64)
        ids = np.empty((batch_size,), np.int64)
        for number in range(int(positions[0] // size), int(positions[-1] // size) + 1):
            part = positions // size == number
            ids[part] = epoch(number)[positions[part] - number * size]
        return ids

    return grain.MapDataset.range(sys.maxsize // batch_size).map_with_index(lambda k, _: batch(k))


_MASK32 = 0xFFFFFFFF


def seeded_permutation(size: int, seed: int, rounds: int = 4) -> np.ndarray:
    """[size] the order in which grain's `MapDataset.shuffle(seed)` visits `size` examples: its
    index permutation (a Simon block cipher of `rounds` rounds on blocks of
    max(16, ceil(log2(size - 1))) bits, rounded up to even, keyed by C++'s `std::seed_seq{seed}`,
    walking each index's cycle until it falls below `size`), computed for every index at once in
    NumPy. grain computes it one index a call, which was most of a batch's host time; the test
    compares the two on many sizes and seeds."""
    if size <= 1:
        return np.zeros((size,), np.int64)
    max_index = size - 1
    block = math.ceil(math.log2(max_index))
    half = max(block + block % 2, 16) // 2
    mask = np.uint64((1 << half) - 1)
    keys = [np.uint64(key) & mask for key in _seed_seq(seed, rounds)]

    def rotate_left(x: np.ndarray, r: int) -> np.ndarray:
        return ((x << np.uint64(r)) | (x >> np.uint64(half - r))) & mask

    def encrypt(value: np.ndarray) -> np.ndarray:
        left, right = (value >> np.uint64(half)) & mask, value & mask
        for i in range(0, rounds, 2):
            left = left ^ ((rotate_left(right, 1) & rotate_left(right, 8)) ^ rotate_left(right, 2)) ^ keys[i]
            right = right ^ ((rotate_left(left, 1) & rotate_left(left, 8)) ^ rotate_left(left, 2)) ^ keys[i + 1]
        return (left << np.uint64(half)) | right

    order = encrypt(np.arange(size, dtype=np.uint64))
    outside = order > max_index
    while outside.any():
        order[outside] = encrypt(order[outside])
        outside = order > max_index
    return order.astype(np.int64)


def _seed_seq(seed: int, count: int) -> list[int]:
    """The `count` 32-bit values of C++'s `std::seed_seq{seed}.generate` ([rand.util.seedseq])."""
    values = [0x8B8B8B8B] * count
    t = 11 if count >= 623 else 7 if count >= 68 else 5 if count >= 39 else 3 if count >= 7 else (count - 1) // 2
    p = (count - t) // 2
    q = p + t
    steps = max(2, count)

    def mix(x: int) -> int:
        return x ^ (x >> 27)

    for k in range(steps):
        r1 = 1664525 * mix(values[k % count] ^ values[(k + p) % count] ^ values[(k - 1) % count]) & _MASK32
        r2 = (r1 + (1 if k == 0 else (k % count) + (seed & _MASK32) if k == 1 else k % count)) & _MASK32
        values[(k + p) % count] = (values[(k + p) % count] + r1) & _MASK32
        values[(k + q) % count] = (values[(k + q) % count] + r2) & _MASK32
        values[k % count] = r2
    for k in range(steps, steps + count):
        r3 = (
            1566083941 * mix((values[k % count] + values[(k + p) % count] + values[(k - 1) % count]) & _MASK32)
            & _MASK32
        )
        r4 = (r3 - k % count) & _MASK32
        values[(k + p) % count] ^= r3
        values[(k + q) % count] ^= r4
        values[k % count] = r4
    return values


class ExampleDataset:
    """Batching shared by every dataset kind: subclasses say how one example is encoded
    (`encode(split, index, example)`) and how encoded rows become a padded batch
    (`assemble(rows, batch_size)`); they hold `splits` and `labels`.

    `encoded_root`: the folder under which each split whose origin is known (`Split.key`) keeps
    its encoded rows, read again by later runs; '' encodes in memory. `encoding_settings`: the
    settings of the data config the encoding depends on (with the metadata `save_metadata`
    writes, they name the rows' folder)."""

    splits: dict[str, Split]
    labels: LabelMap
    encoded_root: str = ""
    encoding_settings: str = ""

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def multi_label(self) -> bool:
        return False

    @property
    def model_input_size(self) -> int:
        """What sizes the model's input layer: the vocabulary's size, or the series' channels."""
        raise NotImplementedError

    @property
    def inputs_description(self) -> str:
        """The inputs in a few words (`jcaps params` prints it)."""
        raise NotImplementedError

    def encode(self, split: str, index: int, example: dict) -> dict:
        raise NotImplementedError

    def assemble(self, rows: EncodedRows, batch_size: int) -> dict:
        """The padded batch of `batch_size` rows of which the first are `rows`' examples (the
        rest weight-0 padding)."""
        raise NotImplementedError

    def lengths(self, rows: EncodedRows) -> np.ndarray:
        """[n] the padded size each example of `rows` asks for (what length grouping sorts by)."""
        raise NotImplementedError

    def pad_batch(self, examples: Sequence[dict], batch_size: int) -> dict:
        """`examples` (from `encode`) as a padded batch of `batch_size` rows."""
        return self.assemble(stack(examples), batch_size)

    def encoded(self, split: str) -> EncodedRows:
        """Every example of `split`, encoded once (on disk under `encoded_root` when the split's
        origin is known, else in memory)."""
        cache = self.__dict__.setdefault("_encoded", {})
        if split not in cache:
            source = self.splits[split].source
            folder = self._encoded_folder(split)
            if folder is not None:
                os.makedirs(os.path.dirname(folder), exist_ok=True)
            cache[split] = encode_rows(lambda i: self.encode(split, i, source[i]), len(source), folder)
        return cache[split]

    def _encoded_folder(self, split: str) -> str | None:
        key = self.splits[split].key
        if not (self.encoded_root and key):
            return None
        digest = hashlib.sha256(f"{ENCODING_VERSION}\n{split}\n{key}\n{self.encoding_settings}\n".encode())
        digest.update(self._metadata_digest())
        return os.path.join(self.encoded_root, "jcaps_encoded", digest.hexdigest()[:32])

    def _metadata_digest(self) -> bytes:
        """SHA-256 of the files `save_metadata` writes (the vocabulary, labels, statistics)."""
        if "_metadata_sha" not in self.__dict__:
            digest = hashlib.sha256()
            with tempfile.TemporaryDirectory() as folder:
                self.save_metadata(folder)
                for name in sorted(os.listdir(folder)):
                    with open(os.path.join(folder, name), "rb") as f:
                        digest.update(name.encode() + b"\0" + f.read() + b"\0")
            self.__dict__["_metadata_sha"] = digest.digest()
        return self.__dict__["_metadata_sha"]

    def save_metadata(self, directory: str) -> None:
        """Writes into `directory` what encodes new inputs exactly as this dataset does."""
        raise NotImplementedError

    def train_counts(self) -> np.ndarray:
        """[J] how many training examples carry each class (each label, for label sets)."""
        fields = self.encoded("train").fields
        if self.multi_label:
            return np.asarray(fields["labels"]).sum(axis=0).astype(np.int64)
        return np.bincount(np.asarray(fields["label"], np.int64), minlength=self.num_classes)

    def balanced_class_weights(self, power: float = 1.0) -> np.ndarray:
        """[J] weights (N / (J * N_c)) ** power from the training labels. At power 1 every class
        weighs the same in the loss, as it does in a balanced test set, however skewed the
        training split is; at 0.5 rare classes gain less (accuracy on a skewed test set suffers
        less). Scaled so that the mean weight over the training examples is 1."""
        if self.multi_label:
            raise ValueError("class weighting applies to single-label data only")
        counts = self.train_counts().astype(np.float64)
        weights = np.where(counts > 0, counts.sum() / (self.num_classes * np.maximum(counts, 1)), 0.0) ** power
        return (weights * counts.sum() / np.sum(weights * counts)).astype(np.float32)

    def _gather(self, split: str, ids: np.ndarray, rows: slice) -> dict:
        """The batch of `rows` of the global batch of examples `ids` of `split`."""
        return self.assemble(self.encoded(split).take(ids[rows]), rows.stop - rows.start)

    def train_iterator(
        self,
        batch_size: int,
        seed: int,
        class_weights: np.ndarray | None = None,
        length_window: int = 0,
        shard: Shard = WHOLE_BATCH,
    ) -> grain.DatasetIterator:
        """Endless batches of train, reshuffled each epoch (seeded): `shard`'s rows of each
        global batch of `batch_size`, so the global batches do not depend on the number of processes.

        `class_weights` [J] scale each example's `weight` by its class's weight.
        `length_window` > 0 groups examples of similar length (`_length_grouped_batches`)."""
        size = len(self.splits["train"].source)
        if size < batch_size:
            raise ConfigError(
                f"train.batch_size={batch_size} is more than the {size} examples of the train split",
                hint="lower train.batch_size, or use more training data",
            )
        if length_window < 0:
            raise ValueError(f"data.length_grouping must be >= 0 (batches per sorting window), not {length_window}")
        import grain  # training only: prediction does not pay for its import

        rows = shard.rows(batch_size)
        if length_window:
            batch_ids = self._length_grouped_batches(batch_size, seed, length_window)
        else:
            batch_ids = _shuffled_batches(size, batch_size, seed)
        self.encoded("train")  # before the iterator: a bad example is found now, not at its first batch
        dataset = batch_ids.map(lambda ids: self._gather("train", ids, rows))
        if class_weights is not None:
            dataset = dataset.map(lambda batch: {**batch, "weight": batch["weight"] * class_weights[batch["label"]]})
        # One thread gathers the next batches while the step runs: a gather is NumPy, and grain's
        # default (16 threads filling a buffer of 500 batches) costs CPU the steps could use.
        return iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=PREFETCHED_BATCHES)))

    def _length_grouped_batches(self, batch_size: int, seed: int, window: int) -> grain.MapDataset:
        """Endless [batch_size] example ids: each epoch's seeded permutation is cut into windows
        of `window` batches, each window sorted by example length and cut into batches, and the
        epoch's batches shuffled.

        A batch pads to the bucket of its own longest example, so with lengths alike it pads
        little: a random batch of short texts pads to its rare long one. Each example is still
        seen once an epoch; the batches' order and their mixes change with the epoch."""
        import grain

        size = len(self.splits["train"].source)
        steps = size // batch_size
        lengths = self.example_lengths("train")

        @functools.lru_cache(maxsize=2)
        def epoch_batches(epoch: int) -> np.ndarray:
            rng = np.random.default_rng([seed, epoch])
            order = rng.permutation(size)[: steps * batch_size]
            span = window * batch_size
            for start in range(0, len(order), span):
                part = order[start : start + span]
                order[start : start + span] = part[np.argsort(lengths[part], kind="stable")]
            return order.reshape(steps, batch_size)[rng.permutation(steps)]

        return grain.MapDataset.range(steps).repeat().map_with_index(lambda i, _: epoch_batches(i // steps)[i % steps])

    def example_lengths(self, split: str) -> np.ndarray:
        """[N] the padded size each example of `split` asks for (what length grouping sorts by)."""
        return np.asarray(self.lengths(self.encoded(split)), np.int64)

    def eval_batches(self, split: str, batch_size: int, limit: int = 0, shard: Shard = WHOLE_BATCH) -> Iterator[dict]:
        """One pass over `split` (the first `limit` examples if > 0) in global batches of
        `batch_size`, of which `shard` gets its rows; the last batch is filled with weight-0
        padding, so every process gets the same number of batches."""
        size = len(self.splits[split].source)
        size = min(size, limit) if limit else size
        rows = shard.rows(batch_size)
        for start in range(0, size, batch_size):
            yield self._gather(split, np.arange(start, min(start + batch_size, size)), rows)

    def steps_per_epoch(self, batch_size: int) -> int:
        return max(1, len(self.splits["train"].source) // batch_size)
