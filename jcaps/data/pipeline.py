"""From a data config to batches: TFDS source → grain (shuffle, encode, bucketed padding, batch).

`load_text_dataset(config.data, seed)` opens the splits (carving validation from train when the
dataset has none), builds the vocabulary and label map from the training part only (or takes
the ones saved in a workdir), and returns a `TextDataset`. Its `train_iterator` is an endless,
seeded grain iterator whose state is saved in checkpoints; `eval_batches` walks a split once,
padding the last batch with zero-weight examples so every batch has the same shape.

A batch is a dict of NumPy arrays: `tokens` [B, L] (or [B, M, L] for the `sentences`
tokenizer) int32 with PAD 0, `label` [B] int32 (or `labels` [B, J] multi-hot), `weight` [B]
float32 (0 for padding examples), `index` [B] int32 (example index in its split, -1 for padding).
Multi-label batches also carry `label_sequence` [B, S] int32: each example's labels as ids of
the label-sequence vocabulary (PAD 0, UNK 1, BOS 2, EOS 3, then label j as 4 + j), in the order
`data.label_order` says, then EOS, then PAD; S is the batch's longest rounded up to a power of two.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jcaps.data import choices, synthetic
from jcaps.data.errors import DataError
from jcaps.data.tokenizers import get_tokenizer
from jcaps.data.vocab import LabelMap, Vocabulary
from jcaps.errors import ConfigError, UserError
from jcaps.ops.decoding import EOS_ID, NUM_SPECIAL

if TYPE_CHECKING:  # imported where batches are made: predicting does not pay for it
    import grain

# What a workdir keeps to encode new inputs as training did (see `save_metadata`).
LABELS_FILE = "labels.json"
VOCAB_FILE = "vocab.json"


class Subset:
    """A random-access view of `source` restricted to `indices` (validation carving)."""

    def __init__(self, source, indices: np.ndarray):
        self._source = source
        self._indices = np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i: int):
        return self._source[int(self._indices[i])]


@dataclasses.dataclass
class Split:
    """One split: a random-access source and the file its examples came from (for errors),
    with what `data.drop_bad_rows` left out of that file (`{"file", "count", "first"}`)."""

    source: Any
    path: str
    dropped: dict | None = None


def default_cache_dir(data_config) -> str:
    return os.path.expanduser(data_config.cache_dir or os.path.join("~", "tensorflow_datasets"))


def resolve_source(data_config) -> str:
    """'tfds', 'local' or 'synthetic', from `data.source` and whether `data.dir` is set."""
    if data_config.source == "auto":
        return "local" if data_config.dir else "tfds"
    if data_config.source not in choices.SOURCES:
        raise ConfigError(f"data.source must be one of {', '.join(choices.SOURCES)}, not {data_config.source!r}")
    return data_config.source


# Before TFDS downloads a catalogue dataset (with retries that take minutes to give up offline),
# one TCP connection to this address says whether there is a network at all. The environment
# variable names another HOST:PORT, or 'off' to skip the check (e.g. behind an HTTPS proxy that
# only the download library knows how to use); an HTTPS proxy set in the environment is probed
# instead of the address.
DOWNLOAD_PROBE = "storage.googleapis.com:443"
DOWNLOAD_PROBE_ENV = "JCAPS_DOWNLOAD_PROBE"
DOWNLOAD_PROBE_TIMEOUT_S = 4.0


def download_probe_address() -> tuple[str, int] | None:
    """The (host, port) the download check connects to; None when it is switched off."""
    setting = os.environ.get(DOWNLOAD_PROBE_ENV, "").strip()
    if setting.lower() in ("off", "0", "none"):
        return None
    if not setting:
        proxy = urllib.request.getproxies().get("https")
        host = DOWNLOAD_PROBE.rsplit(":", 1)[0]
        if proxy and not urllib.request.proxy_bypass(host):
            parts = urllib.parse.urlsplit(proxy if "//" in proxy else "//" + proxy)
            if parts.hostname:
                return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        setting = DOWNLOAD_PROBE
    host, _, port = setting.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{DOWNLOAD_PROBE_ENV} must be HOST:PORT or 'off', not {setting!r}")
    return host, int(port)


def download_unreachable(address: tuple[str, int], timeout: float = DOWNLOAD_PROBE_TIMEOUT_S) -> str | None:
    """Why a TCP connection to `address` does not open within `timeout` seconds (name lookup
    included), or None when it does."""
    outcome: dict[str, object] = {}

    def connect():
        try:
            socket.create_connection(address, timeout=timeout).close()
            outcome["ok"] = True
        except OSError as error:
            outcome["error"] = error

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    if outcome.get("ok"):
        return None
    return str(outcome.get("error") or f"no answer within {timeout:g} s")


def _offline_hint(data_config) -> str:
    return (
        f"point --config.data.dir at a folder of the dataset's files in data.format {data_config.format} (the "
        "config file's docstring says which files, and where to get them), or prepare the dataset on a machine "
        "with internet and copy its data.cache_dir here"
    )


def _prepare_catalogue_dataset(data_config, cache_dir: str):
    """The prepared TFDS builder of the catalogue dataset `data.name`: downloaded and prepared
    once into `cache_dir` when it is not there yet. Fails within seconds, as a `UserError`, when
    it is not there and the network is not reachable."""
    import tensorflow_datasets as tfds

    from jcaps.data import builders

    name = data_config.name
    try:
        builder = tfds.builder(name, data_dir=cache_dir, file_format="array_record")
    except tfds.core.registered.DatasetNotFoundError:
        raise ConfigError(
            f"data.name {name!r} is not a TFDS dataset",
            hint="see https://www.tensorflow.org/datasets/catalog, or " + _offline_hint(data_config),
        ) from None
    except Exception as error:  # e.g. the extra packages of a community catalogue
        raise UserError(f"could not open the TFDS dataset {name!r}: {error}", hint=_offline_hint(data_config)) from error
    if builder.is_prepared():
        return builder
    # Catalogue datasets download their files; a builder defined elsewhere may not need to.
    if type(builder).__module__.startswith("tensorflow_datasets."):
        address = download_probe_address()
        problem = download_unreachable(address) if address else None
        if problem:
            raise UserError(
                f"the TFDS dataset {name!r} is not prepared in {cache_dir} and cannot be downloaded: "
                f"{address[0]}:{address[1]} is unreachable ({problem})",
                hint=_offline_hint(data_config),
            )
    try:
        with builders.no_leftover_directories(cache_dir):
            builder.download_and_prepare(file_format="array_record")
    except UserError:
        raise
    except Exception as error:  # network, missing extra packages
        raise UserError(
            f"could not prepare the TFDS dataset {name!r} in {cache_dir}: {error}", hint=_offline_hint(data_config)
        ) from error
    return builder


def open_splits(data_config, seed: int) -> tuple[dict[str, Split], list[str] | None]:
    """The train / validation / test splits and the class names (None when labels are strings)."""
    source = resolve_source(data_config)
    cache_dir = default_cache_dir(data_config)
    if source == "tfds":
        if not data_config.name:
            raise ConfigError(
                "this config has no TFDS dataset (data.name is empty): it reads local files",
                hint=f"point --config.data.dir at local {data_config.format} files (the config's docstring says which)",
            )
        import tensorflow_datasets as tfds

        builder = _prepare_catalogue_dataset(data_config, cache_dir)
        splits = {
            name: Split(
                tfds.data_source(data_config.name, split=name, data_dir=cache_dir,
                                 builder_kwargs={"file_format": "array_record"}),
                f"tfds:{data_config.name}/{name}",
            )
            for name in builder.info.splits
        }
        label = builder.info.features[data_config.label_key]
        names = list(label.names) if hasattr(label, "names") else None
    else:
        directory, data_format = data_config.dir, data_config.format
        if source == "synthetic":
            multi_label = data_config.label_key == "labels"
            write = synthetic.write_multilabel_jsonl if multi_label else synthetic.write_zhang_csv
            directory = write(
                os.path.join(cache_dir, "jcaps_synthetic"),
                train_size=data_config.synthetic_train_size,
                test_size=data_config.synthetic_test_size,
                seed=seed,
            )
            data_format = "jsonl" if multi_label else "zhang_csv"
        from jcaps.data import builders  # TFDS: only where splits are opened, not for prediction

        builder = builders.prepare_local(
            data_format,
            directory,
            cache_dir,
            train_file=data_config.train_file if source == "local" else "",
            test_file=data_config.test_file if source == "local" else "",
            multi_label=data_config.label_key == "labels",
            drop_bad_rows=data_config.drop_bad_rows,
        )
        dropped = builder.dropped_rows()
        splits = {
            name: Split(builder.as_data_source(split=name), builder.source_path(name), dropped.get(name))
            for name in builder.info.splits
        }
        label = builder.info.features[data_config.label_key]
        names = list(label.names) if hasattr(label, "names") else None
    if "train" not in splits:
        raise ValueError(f"dataset has no train split (splits: {', '.join(splits)})")
    if "validation" not in splits:
        splits.update(carve_validation(splits["train"], data_config.validation_fraction, seed))
    return splits, names


def carve_validation(train: Split, fraction: float, seed: int) -> dict[str, Split]:
    """Splits `train` into train and validation by a seeded permutation."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"data.validation_fraction must be in [0, 1), not {fraction}")
    order = np.random.default_rng(seed).permutation(len(train.source))
    num_validation = int(round(fraction * len(order)))
    return {
        "train": Split(Subset(train.source, np.sort(order[num_validation:])), train.path, train.dropped),
        "validation": Split(Subset(train.source, np.sort(order[:num_validation])), train.path),
    }


def example_text(example: dict, text_keys: Sequence[str]) -> str:
    parts = []
    for key in text_keys:
        value = example[key]
        parts.append(value.decode("utf-8") if isinstance(value, bytes) else str(value))
    return " ".join(parts)


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


class ExampleDataset:
    """Batching shared by every dataset kind: subclasses say how one example is encoded
    (`encode(split, index, example)`) and how a list of them becomes a padded batch
    (`pad_batch(examples, batch_size)`); they hold `splits` and `labels`."""

    splits: dict[str, Split]
    labels: LabelMap

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def multi_label(self) -> bool:
        return False

    def encode(self, split: str, index: int, example: dict) -> dict:
        raise NotImplementedError

    def pad_batch(self, examples: Sequence[dict], batch_size: int) -> dict:
        raise NotImplementedError

    def balanced_class_weights(self, power: float = 1.0) -> np.ndarray:
        """[J] weights (N / (J * N_c)) ** power from the training labels. At power 1 every class
        weighs the same in the loss, as it does in a balanced test set, however skewed the
        training split is; at 0.5 rare classes gain less (accuracy on a skewed test set suffers
        less). Scaled so that the mean weight over the training examples is 1."""
        if self.multi_label:
            raise ValueError("class weighting applies to single-label data only")
        source = self.splits["train"].source
        ids = [self.encode("train", i, source[i])["label"] for i in range(len(source))]
        counts = np.bincount(np.asarray(ids, np.int64), minlength=self.num_classes).astype(np.float64)
        weights = np.where(counts > 0, counts.sum() / (self.num_classes * np.maximum(counts, 1)), 0.0) ** power
        return (weights * counts.sum() / np.sum(weights * counts)).astype(np.float32)

    def _process_rows(self, batch_size: int) -> slice:
        """This process's rows of a global batch: the global batches are the same for any number
        of processes, and process p reads and encodes only rows [p * local, (p + 1) * local)."""
        local = batch_size // jax.process_count()
        return slice(jax.process_index() * local, (jax.process_index() + 1) * local)

    def _encode_rows(self, split: str, ids: np.ndarray, rows: slice) -> dict:
        source = self.splits[split].source
        examples = [self.encode(split, int(i), source[int(i)]) for i in ids[rows]]
        return self.pad_batch(examples, rows.stop - rows.start)

    def train_iterator(
        self, batch_size: int, seed: int, class_weights: np.ndarray | None = None, length_window: int = 0
    ) -> grain.DatasetIterator:
        """Endless batches of train, reshuffled each epoch (seeded): this process's rows of each
        global batch, so the global batches do not depend on the number of processes.

        `class_weights` [J] scale each example's `weight` by its class's weight.
        `length_window` > 0 groups examples of similar length (`_length_grouped_batches`)."""
        size = len(self.splits["train"].source)
        if size < batch_size:
            raise ConfigError(f"train.batch_size={batch_size} is more than the {size} examples of the train split",
                              hint="lower train.batch_size, or use more training data")
        if length_window < 0:
            raise ValueError(f"data.length_grouping must be >= 0 (batches per sorting window), not {length_window}")
        import grain  # training only: prediction does not pay for its import

        rows = self._process_rows(batch_size)
        if length_window:
            batch_ids = self._length_grouped_batches(batch_size, seed, length_window)
        else:
            batch_ids = grain.MapDataset.range(size).shuffle(seed=seed).repeat().batch(batch_size, drop_remainder=True)
        dataset = batch_ids.map(lambda ids: self._encode_rows("train", ids, rows))
        if class_weights is not None:
            dataset = dataset.map(lambda batch: {**batch, "weight": batch["weight"] * class_weights[batch["label"]]})
        return iter(dataset.to_iter_dataset())

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
        source = self.splits[split].source
        return np.array([self.example_length(self.encode(split, i, source[i])) for i in range(len(source))], np.int64)

    def example_length(self, encoded: dict) -> int:
        raise NotImplementedError

    def eval_batches(self, split: str, batch_size: int, limit: int = 0) -> Iterator[dict]:
        """One pass over `split` (the first `limit` examples if > 0) in global batches of
        `batch_size`, of which this process gets its rows; the last batch is filled with
        weight-0 padding, so every process gets the same number of batches."""
        size = len(self.splits[split].source)
        size = min(size, limit) if limit else size
        rows = self._process_rows(batch_size)
        for start in range(0, size, batch_size):
            yield self._encode_rows(split, np.arange(start, min(start + batch_size, size)), rows)

    def steps_per_epoch(self, batch_size: int) -> int:
        return max(1, len(self.splits["train"].source) // batch_size)


@dataclasses.dataclass
class TextDataset(ExampleDataset):
    """Prepared splits with their vocabulary and labels, ready to batch."""

    splits: dict[str, Split]
    vocab: Vocabulary
    labels: LabelMap
    tokenize: Callable[[str], list]
    text_keys: tuple[str, ...]
    label_key: str
    max_len: int
    boundaries: tuple[int, ...]
    nested: bool  # True for the 'sentences' tokenizer: tokens are [M, L] per example
    max_sentences: int
    label_order: str = "frequency"  # multi-label: frequency | alphabetical | given

    LABEL_ORDERS = choices.LABEL_ORDERS

    @functools.cached_property
    def label_rank(self) -> np.ndarray:
        """[J] position of each label in the generation order (lower first): by descending
        frequency in train (ties by name), or by name; label ids are sorted names already."""
        if self.label_order not in self.LABEL_ORDERS:
            raise ConfigError(f"data.label_order must be one of {', '.join(self.LABEL_ORDERS)}, not {self.label_order!r}")
        if self.label_order == "frequency" and "train" in self.splits:
            source = self.splits["train"].source
            counts = np.zeros((self.num_classes,), np.int64)
            path = self.splits["train"].path
            for i in range(len(source)):
                example = source[i]
                line = int(example.get("line", i + 1))
                for name in example[self.label_key]:
                    counts[self.labels.encode(_as_str(name), path=path, line=line)] += 1
            order = np.lexsort((np.arange(self.num_classes), -counts))
        else:
            order = np.arange(self.num_classes)
        rank = np.empty((self.num_classes,), np.int64)
        rank[order] = np.arange(self.num_classes)
        return rank

    @property
    def multi_label(self) -> bool:
        return self.label_key == "labels"

    def text(self, split: str, index: int) -> str:
        return example_text(self.splits[split].source[index], self.text_keys)

    def encode_text(self, text: str) -> np.ndarray:
        tokens = self.tokenize(text)
        if self.nested:
            rows = [self.vocab.encode(sentence) for sentence in tokens] or [np.zeros((0,), np.int32)]
            width = max(1, max(len(r) for r in rows))
            out = np.zeros((len(rows), width), np.int32)
            for i, row in enumerate(rows):
                out[i, : len(row)] = row
            return out
        return self.vocab.encode(tokens)

    def encode(self, split: str, index: int, example: dict) -> dict:
        """One raw TFDS example → `tokens`, label(s), `index`."""
        encoded = {"tokens": self.encode_text(example_text(example, self.text_keys)), "index": np.int32(index)}
        raw = example[self.label_key]
        path, line = self.splits[split].path, int(example.get("line", index + 1))
        if self.multi_label:
            ids = [self.labels.encode(_as_str(name), path=path, line=line) for name in raw]
            hot = np.zeros((self.num_classes,), np.float32)
            hot[ids] = 1.0
            encoded["labels"] = hot
            encoded["label_ids"] = np.asarray(ids, np.int32)  # as given in the file
        elif isinstance(raw, (bytes, str)):
            encoded["label"] = np.int32(self.labels.encode(_as_str(raw), path=path, line=line))
        else:
            encoded["label"] = np.int32(raw)
        return encoded

    def example_length(self, encoded: dict) -> int:
        """Tokens (sentences x words for the 'sentences' tokenizer)."""
        return int(encoded["tokens"].size)

    def pad_batch(self, examples: Sequence[dict], batch_size: int) -> dict:
        """Stacks `examples`, pads tokens to a bucket, and fills up to `batch_size` with weight 0."""
        if self.nested:
            sentences = max((e["tokens"].shape[0] for e in examples), default=1) or 1
            words = max((e["tokens"].shape[1] for e in examples), default=1) or 1
            sentence_buckets = default_boundaries(self.max_sentences, smallest=4)
            shape = (
                batch_size,
                bucket_length(sentences, sentence_buckets, self.max_sentences),
                bucket_length(words, self.boundaries, self.max_len),
            )
        else:
            longest = max((len(e["tokens"]) for e in examples), default=1) or 1
            shape = (batch_size, bucket_length(longest, self.boundaries, self.max_len))
        tokens = np.zeros(shape, np.int32)
        for i, example in enumerate(examples):
            tokens[(i,) + tuple(slice(0, n) for n in example["tokens"].shape)] = example["tokens"]
        batch = {
            "tokens": tokens,
            "weight": np.array([1.0] * len(examples) + [0.0] * (batch_size - len(examples)), np.float32),
            "index": np.array([e["index"] for e in examples] + [-1] * (batch_size - len(examples)), np.int32),
        }
        if self.multi_label:
            batch["labels"] = np.zeros((batch_size, self.num_classes), np.float32)
            batch["labels"][: len(examples)] = np.stack([e["labels"] for e in examples])
            batch["label_sequence"] = self._label_sequences(examples, batch_size)
        else:
            batch["label"] = np.zeros((batch_size,), np.int32)
            batch["label"][: len(examples)] = [e["label"] for e in examples]
        return batch

    def _label_sequences(self, examples: Sequence[dict], batch_size: int) -> np.ndarray:
        """[B, S] the targets of a label-sequence model: ordered label ids + 4, EOS, PAD."""
        longest = max((len(e["label_ids"]) for e in examples), default=0) + 1
        sequences = np.zeros((batch_size, max(4, 1 << (longest - 1).bit_length())), np.int32)
        for i, example in enumerate(examples):
            ids = example["label_ids"]
            if self.label_order != "given":
                ids = ids[np.argsort(self.label_rank[ids], kind="stable")]
            sequences[i, : len(ids)] = ids + NUM_SPECIAL
            sequences[i, len(ids)] = EOS_ID
        return sequences

    @property
    def inputs_description(self) -> str:
        return f"vocabulary {len(self.vocab):,}"

    @property
    def model_input_size(self) -> int:
        """What the model's embedding table is sized by: the vocabulary."""
        return len(self.vocab)

    def dummy_batch(self) -> dict[str, np.ndarray]:
        """A tiny batch of the right ranks for `model.init` (parameters do not depend on length)."""
        batch = {"tokens": np.ones((1, 4, 16) if self.nested else (1, 16), np.int32)}
        if self.multi_label:
            batch["label_sequence"] = np.full((1, 4), EOS_ID, np.int32)
        return batch

    def save_metadata(self, directory: str) -> None:
        """What a workdir needs to encode new text: the vocabulary and the label names."""
        self.vocab.save(os.path.join(directory, VOCAB_FILE))
        self.labels.save(os.path.join(directory, LABELS_FILE))


def _as_str(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def load_text_dataset(data_config, seed: int, vocab: Vocabulary | None = None, labels: LabelMap | None = None) -> TextDataset:
    """Opens the splits and builds (or takes) the vocabulary and label map; see module doc."""
    splits, names = open_splits(data_config, seed)
    text_keys = ("text",) if resolve_source(data_config) != "tfds" else tuple(data_config.text_keys)
    tokenize = make_tokenize(data_config)
    train = splits["train"]
    if vocab is None:
        texts = (example_text(train.source[i], text_keys) for i in range(len(train.source)))
        nested = data_config.tokenizer == "sentences"
        token_lists = ([w for sentence in tokenize(t) for w in sentence] if nested else tokenize(t) for t in texts)
        vocab = Vocabulary.build(token_lists, min_count=data_config.min_count, max_size=data_config.max_size or None)
    built_from = set()  # the files the label map comes from: their labels are known
    if labels is None:
        if names is not None:
            labels = LabelMap(names)
        else:
            # The labels of the whole training file: a rare label whose only examples fell into
            # the validation part carved from it is still one of the task's labels.
            parts = [train] + [s for s in (splits["validation"],) if s.path == train.path]
            key, seen = data_config.label_key, set()
            for part in parts:
                for i in range(len(part.source)):
                    raw = part.source[i][key]
                    seen.update(_as_str(x) for x in raw) if key == "labels" else seen.add(_as_str(raw))
            labels = LabelMap(sorted(seen))
            built_from = {part.path for part in parts}
    if names is None:  # string labels (integer ones were checked against the classes when read)
        splits = check_labels(splits, labels, data_config.label_key, data_config.drop_bad_rows, built_from)
    return make_text_dataset(data_config, splits, vocab, labels, text_keys)


def check_labels(
    splits: dict[str, Split], labels: LabelMap, label_key: str, drop_bad_rows: bool, known_paths=frozenset()
) -> dict[str, Split]:
    """Checks, when the dataset is opened, that every label of every split (but those read from
    `known_paths`) is one of `labels`, rather than when the split is first evaluated (after
    training, for the test split). An unknown label is a `DataError` naming the file and line; with
    `drop_bad_rows` its example is left out instead, and counted with its file's dropped rows."""
    checked = dict(splits)
    for name, split in splits.items():
        if split.path in known_paths:
            continue
        source, kept, problems = split.source, [], []
        for i in range(len(source)):
            example = source[i]
            raw = example[label_key]
            line = int(example.get("line", i + 1))
            try:
                for label in raw if label_key == "labels" else [raw]:
                    labels.encode(_as_str(label), path=split.path, line=line)
            except DataError as error:
                if not drop_bad_rows:
                    raise
                problems.append(str(error))
                continue
            kept.append(i)
        if problems:
            before = split.dropped or {"file": split.path, "count": 0, "first": []}
            dropped = {"file": before["file"], "count": before["count"] + len(problems),
                       "first": (before["first"] + problems)[:5]}
            checked[name] = Split(Subset(source, np.asarray(kept, np.int64)), split.path, dropped)
    return checked


def make_tokenize(data_config) -> Callable[[str], list]:
    """The configured tokenizer with its length limits bound."""
    tokenizer = get_tokenizer(data_config.tokenizer)
    if data_config.tokenizer == "sentences":
        return lambda text: tokenizer(text, max_sentences=data_config.max_sentences, max_words=data_config.max_len)
    return lambda text: tokenizer(text, max_len=data_config.max_len)


def make_text_dataset(data_config, splits, vocab, labels, text_keys=("text",)) -> TextDataset:
    """A `TextDataset` over `splits` (may be empty: enough to encode and batch new text)."""
    boundaries = tuple(sorted(data_config.bucket_boundaries)) or default_boundaries(data_config.max_len)
    if boundaries[-1] < data_config.max_len:
        boundaries += (data_config.max_len,)
    return TextDataset(
        splits=splits,
        vocab=vocab,
        labels=labels,
        tokenize=make_tokenize(data_config),
        text_keys=tuple(text_keys),
        label_key=data_config.label_key,
        max_len=data_config.max_len,
        boundaries=boundaries,
        nested=data_config.tokenizer == "sentences",
        max_sentences=data_config.max_sentences,
        label_order=data_config.label_order,
    )
