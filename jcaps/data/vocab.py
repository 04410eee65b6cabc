"""Vocabularies (tokens ↔ ids, with reserved PAD and UNK) and label maps (class names ↔ ids).

Both are immutable, built from the training split only, and saved as JSON beside the
checkpoints so that a workdir alone is enough to predict.
"""

import collections
import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from typing import Self

import numpy as np

from jcaps.data.errors import DataError
from jcaps.files import replace_file

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
# Extra reserved tokens of a label vocabulary for label-sequence generation (ids 2 and 3).
BOS_TOKEN = "<bos>"
EOS_TOKEN = "<eos>"
PAD = 0
UNK = 1
# A label sequence's ids: PAD, UNK, BOS, EOS, then label j at id NUM_SPECIAL + j; a sequence
# ends with EOS (the ids `jcaps.ops.decoding` takes as `bos_id`, `eos_id`, `num_special`).
BOS = 2
EOS = 3
NUM_SPECIAL = 4
# Where a workdir keeps the vocabulary and the label map (to encode new inputs as training did).
VOCAB_FILE = "vocab.json"
LABELS_FILE = "labels.json"


def _index(names: Sequence[str], what: str) -> dict[str, int]:
    """Maps each name to its position; names must be distinct strings."""
    ids: dict[str, int] = {}
    for position, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(f"{what} must be strings, not {type(name).__name__} ({name!r})")
        if name in ids:
            raise ValueError(f"{what} {name!r} appears twice (ids {ids[name]} and {position})")
        ids[name] = position
    return ids


class _JsonFile:
    """JSON (de)serialisation of a dataclass from its constructor fields."""

    def to_json(self) -> str:
        # A mixin of dataclasses: every subclass is one.
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}  # type: ignore[arg-type]
        return json.dumps(fields, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Self:
        data = json.loads(text)
        keys = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        if not isinstance(data, dict) or set(data) != keys:
            found = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"expected a JSON object with keys {sorted(keys)}, found {found}")
        return cls(**data)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the file whole or not at all (a temporary file renamed): `labels.json` says a
        workdir's metadata is saved, so a write cut short (a full disk) must leave none."""
        replace_file(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> Self:
        """Reads a file written by `save`; raises `DataError` naming it if it is malformed."""
        with open(path, encoding="utf-8") as file:
            text = file.read()
        try:
            return cls.from_json(text)
        except ValueError as error:
            raise DataError(path, None, f"not a saved {cls.__name__}: {error}") from None


@dataclasses.dataclass(frozen=True, repr=False)
class Vocabulary(_JsonFile):
    """Tokens ↔ int32 ids. Ids below `num_reserved` are reserved: PAD 0, UNK 1, then extras.

    Attributes:
        tokens: the token of each id.
        num_reserved: how many leading ids are reserved (2, or more with extra reserved tokens).
    """

    tokens: tuple[str, ...]
    num_reserved: int = 2
    _ids: dict[str, int] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "tokens", tuple(self.tokens))
        if self.tokens[:2] != (PAD_TOKEN, UNK_TOKEN):
            raise ValueError(f"a vocabulary starts with {PAD_TOKEN!r}, {UNK_TOKEN!r}, not {self.tokens[:2]}")
        if not (isinstance(self.num_reserved, int) and 2 <= self.num_reserved <= len(self.tokens)):
            raise ValueError(f"num_reserved must lie in 2..{len(self.tokens)}, not {self.num_reserved!r}")
        object.__setattr__(self, "_ids", _index(self.tokens, "tokens"))

    @classmethod
    def build(
        cls,
        token_lists: Iterable[Sequence[str]],
        min_count: int = 1,
        max_size: int | None = None,
        extra_reserved: Sequence[str] = (),
    ) -> Self:
        """Counts the tokens of `token_lists` (e.g. the tokenised training texts).

        Args:
            token_lists: one token sequence per example.
            min_count: tokens seen fewer times map to UNK.
            max_size: the largest vocabulary, reserved ids included; the most frequent tokens
                are kept.
            extra_reserved: tokens reserved after PAD and UNK, e.g. `(BOS_TOKEN, EOS_TOKEN)`.

        Returns:
            The reserved tokens, then the counted tokens by count (descending), ties by token
            (ascending), so the same data always gives the same ids. A counted token equal to a
            reserved one keeps its reserved id.
        """
        reserved = (PAD_TOKEN, UNK_TOKEN, *extra_reserved)
        if min_count < 1:
            raise ValueError(f"min_count must be at least 1, not {min_count}")
        if max_size is not None and max_size < len(reserved):
            raise ValueError(f"max_size {max_size} leaves no room for the {len(reserved)} reserved tokens")
        counts: collections.Counter[str] = collections.Counter()
        for tokens in token_lists:
            counts.update(tokens)
        for token in reserved:
            counts.pop(token, None)
        kept = sorted(
            (token for token, count in counts.items() if count >= min_count), key=lambda token: (-counts[token], token)
        )
        if max_size is not None:
            kept = kept[: max_size - len(reserved)]
        return cls(reserved + tuple(kept), len(reserved))

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        # Vocabularies hold up to millions of tokens; show the size and the first few.
        head = ", ".join(map(repr, self.tokens[:8]))
        return f"Vocabulary({len(self)} tokens: {head}{', ...' if len(self) > 8 else ''})"

    def encode(self, tokens: Iterable[str]) -> np.ndarray:
        """Token ids, `[len(tokens)]` int32; unknown tokens become UNK."""
        return np.array([self._ids.get(token, UNK) for token in tokens], dtype=np.int32)

    def decode(self, ids: Iterable[int]) -> list[str]:
        """The tokens of `ids` (`[length]`), PAD and UNK included."""
        tokens = []
        for i in map(int, ids):
            if not 0 <= i < len(self.tokens):
                raise ValueError(f"id {i} is outside the vocabulary (size {len(self.tokens)})")
            tokens.append(self.tokens[i])
        return tokens


@dataclasses.dataclass(frozen=True)
class LabelMap(_JsonFile):
    """Class names ↔ ids 0..J-1, for single-label and multi-label classification.

    Attributes:
        names: the name of each class id, e.g. from `classes.txt`.
    """

    names: tuple[str, ...]
    _ids: dict[str, int] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))
        if not self.names:
            raise ValueError("a label map needs at least one class name")
        object.__setattr__(self, "_ids", _index(self.names, "class names"))

    @classmethod
    def from_labels(cls, labels: Iterable[str]) -> Self:
        """The label map of the distinct `labels` (e.g. of the training split), sorted."""
        return cls(tuple(sorted(set(labels))))

    def __len__(self) -> int:
        return len(self.names)

    def encode(self, name: str, *, path: str | os.PathLike, line: int | str | None) -> int:
        """The id of class `name`; an unknown name is a `DataError` at `path`:`line`."""
        try:
            return self._ids[name]
        except KeyError:
            raise DataError(
                path, line, f"unknown label {name!r} (not among the {len(self.names)} training labels)"
            ) from None

    def decode(self, label_id: int) -> str:
        """The name of class `label_id`."""
        if not 0 <= label_id < len(self.names):
            raise ValueError(f"label id {label_id} is outside 0..{len(self.names) - 1}")
        return self.names[label_id]
