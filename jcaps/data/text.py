"""Text datasets: the vocabulary and label map built from the training part (or saved in a
workdir), every label checked when the dataset opens, and examples encoded and padded to buckets.

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
from collections.abc import Callable, Sequence

import numpy as np

from jcaps.choices import check_choice
from jcaps.data import choices
from jcaps.data.batching import ExampleDataset, bucket_length, default_boundaries
from jcaps.data.encoded import EncodedRows
from jcaps.data.errors import DataError
from jcaps.data.splits import PreparedSplits, Split, carve_validation
from jcaps.data.tokenizers import get_tokenizer
from jcaps.data.vocab import EOS, LABELS_FILE, NUM_SPECIAL, VOCAB_FILE, LabelMap, Vocabulary
from jcaps.errors import ConfigError


def example_text(example: dict, text_keys: Sequence[str]) -> str:
    parts = []
    for key in text_keys:
        value = example[key]
        parts.append(value.decode("utf-8") if isinstance(value, bytes) else str(value))
    return " ".join(parts)


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
    label_order: choices.LabelOrder = "frequency"  # multi-label

    @functools.cached_property
    def label_rank(self) -> np.ndarray:
        """[J] position of each label in the generation order (lower first): by descending
        frequency in train (ties by name), or by name; label ids are sorted names already."""
        check_choice("data.label_order", self.label_order, choices.LabelOrder, ConfigError)
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

    def lengths(self, rows: EncodedRows) -> np.ndarray:
        """Tokens (sentences x words for the 'sentences' tokenizer)."""
        return np.prod(rows.sizes["tokens"], axis=1)

    def assemble(self, rows: EncodedRows, batch_size: int) -> dict:
        """Pads the rows' tokens to a bucket, and fills up to `batch_size` with weight 0."""
        n = len(rows)
        sizes = rows.sizes["tokens"] if n else np.zeros((0, 2 if self.nested else 1), np.int32)
        longest = [max(int(size), 1) for size in sizes.max(axis=0, initial=0)]
        if self.nested:
            sentence_buckets = default_boundaries(self.max_sentences, smallest=4)
            shape: tuple[int, ...] = (
                batch_size,
                bucket_length(longest[0], sentence_buckets, self.max_sentences),
                bucket_length(longest[1], self.boundaries, self.max_len),
            )
        else:
            shape = (batch_size, bucket_length(longest[0], self.boundaries, self.max_len))
        tokens = np.zeros(shape, np.int32)
        if n:
            kept = tuple(slice(0, min(width, size)) for width, size in zip(shape[1:], rows.fields["tokens"].shape[1:]))
            tokens[(slice(0, n), *kept)] = rows.fields["tokens"][(slice(None), *kept)]
        batch = {
            "tokens": tokens,
            "weight": np.concatenate([np.ones((n,), np.float32), np.zeros((batch_size - n,), np.float32)]),
            "index": np.concatenate([rows.fields["index"] if n else [], np.full((batch_size - n,), -1)]).astype(
                np.int32
            ),
        }
        if self.multi_label:
            batch["labels"] = np.zeros((batch_size, self.num_classes), np.float32)
            if n:
                batch["labels"][:n] = rows.fields["labels"]
            batch["label_sequence"] = self._label_sequences(rows, batch_size)
        else:
            batch["label"] = np.zeros((batch_size,), np.int32)
            if n:
                batch["label"][:n] = rows.fields["label"]
        return batch

    def _label_sequences(self, rows: EncodedRows, batch_size: int) -> np.ndarray:
        """[B, S] the targets of a label-sequence model: ordered label ids + 4, EOS, PAD."""
        n = len(rows)
        counts = rows.sizes["label_ids"][:, 0] if n else np.zeros((0,), np.int32)
        longest = int(counts.max(initial=0)) + 1
        sequences = np.zeros((batch_size, max(4, 1 << (longest - 1).bit_length())), np.int32)
        if not n:
            return sequences
        ids = np.asarray(rows.fields["label_ids"][:, : longest - 1], np.int64)
        given = np.arange(ids.shape[1]) < counts[:, None]
        if self.label_order != "given":  # each example's labels by rank, the padding after them
            order = np.argsort(np.where(given, self.label_rank[ids], self.num_classes), axis=1, kind="stable")
            ids = np.take_along_axis(ids, order, axis=1)
        sequences[:n, : ids.shape[1]] = np.where(given, ids + NUM_SPECIAL, 0)
        sequences[np.arange(n), counts] = EOS
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
            batch["label_sequence"] = np.full((1, 4), EOS, np.int32)
        return batch

    def save_metadata(self, directory: str) -> None:
        """What a workdir needs to encode new text: the vocabulary and the label names."""
        self.vocab.save(os.path.join(directory, VOCAB_FILE))
        self.labels.save(os.path.join(directory, LABELS_FILE))


def _as_str(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def text_dataset(
    data_config, prepared: PreparedSplits, seed: int, vocab: Vocabulary | None = None, labels: LabelMap | None = None
) -> TextDataset:
    """A `TextDataset` over the `prepared` splits, with validation carved from train (by `seed`,
    by whole groups of `data.group_key` when it is set) when the source has none; the vocabulary
    and label map are built from the training part, unless given (those saved in a workdir)."""
    splits = dict(prepared.splits)
    if "train" not in splits:
        raise ValueError(f"dataset has no train split (splits: {', '.join(splits)})")
    if "validation" not in splits:
        splits.update(carve_validation(splits["train"], data_config.validation_fraction, seed, data_config.group_key))
    train = splits["train"]
    if vocab is None:
        tokenize = make_tokenize(data_config)
        texts = (example_text(train.source[i], prepared.text_keys) for i in range(len(train.source)))
        nested = data_config.tokenizer == "sentences"
        token_lists = ([w for sentence in tokenize(t) for w in sentence] if nested else tokenize(t) for t in texts)
        vocab = Vocabulary.build(token_lists, min_count=data_config.min_count, max_size=data_config.max_size or None)
    built_from = set()  # the files the label map comes from: their labels are known
    if labels is None:
        if prepared.class_names is not None:
            labels = LabelMap(tuple(prepared.class_names))
        else:
            # The labels of the whole training file: a rare label whose only examples fell into
            # the validation part carved from it is still one of the task's labels.
            parts = [train] + [s for s in (splits["validation"],) if s.path == train.path]
            key, seen = data_config.label_key, set[str]()
            for part in parts:
                for i in range(len(part.source)):
                    raw = part.source[i][key]
                    seen.update(_as_str(x) for x in raw) if key == "labels" else seen.add(_as_str(raw))
            labels = LabelMap(tuple(sorted(seen)))
            built_from = {part.path for part in parts}
    if prepared.class_names is None:  # string labels (integer ones were checked against the classes when read)
        splits = check_labels(splits, labels, data_config.label_key, data_config.drop_bad_rows, built_from)
    return make_text_dataset(data_config, splits, vocab, labels, prepared.text_keys)


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
            dropped = {
                "file": before["file"],
                "count": before["count"] + len(problems),
                "first": (before["first"] + problems)[:5],
            }
            checked[name] = split.subset(np.asarray(kept, np.int64), dropped)
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
