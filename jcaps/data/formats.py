"""Readers for the local text dataset formats (`zhang_csv`, `jsonl`, `text_labels`).

Each reader streams `(key, example)` pairs, where `key` is the 1-based line number (as a
string) on which the example starts, so a caller can name the line of a later problem, such as
a label unknown to the training split. Files are UTF-8 (an opening byte-order mark is ignored).

Bad input raises `DataError` naming the file, the line and the problem; nothing is skipped
silently. A caller that chooses to drop bad rows passes a list as `dropped`: each bad row's
`DataError` is appended to it instead of raised, and the reader logs how many rows it dropped.
Problems that make the rest of a file unreadable (broken encoding or CSV quoting, parallel
files of different lengths, a file without any example) always raise.
"""
import csv
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from jcaps.data.errors import DataError

FilePath = str | os.PathLike
Example = dict[str, Any]
Record = TypeVar("Record")

ZHANG_CSV_TRAIN = "train.csv"
ZHANG_CSV_CLASSES = "classes.txt"

# ASCII digits only: `int` alone would also accept "1_000" and non-ASCII digits.
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")

_logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------


def _lines(path: FilePath) -> Iterator[tuple[int, str]]:
    """Yields `(line_number, line)` for each line of a UTF-8 file, line ending kept.

    Lines end at `\\n` only (not at the other characters `str.splitlines` knows, which occur
    inside tweets and documents), so numbers agree with `wc -l` and text editors.
    """
    with open(path, "rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                problem = f"not valid UTF-8 ({error.reason} at byte {error.start})"
                raise DataError(path, number, problem) from None
            yield number, line


def _without_newline(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def _parse_label(path: FilePath, line: int, field: str, low: int, high: int | None) -> int:
    """Parses an integer class label that must lie in [low, high] (no upper bound if None)."""
    if not _INTEGER.fullmatch(field):
        raise DataError(path, line, f"label {field!r} is not an integer")
    label = int(field)
    if label < low or (high is not None and label > high):
        allowed = f"{low}..{high}" if high is not None else f">= {low}"
        raise DataError(path, line, f"label {label} is out of range {allowed}")
    return label


def _check_text(path: FilePath, line: int, text: Any) -> str:
    """Returns `text` if it is a string with a non-blank character."""
    if not isinstance(text, str):
        raise DataError(path, line, f"text must be a string, not {type(text).__name__}")
    if not text.strip():
        raise DataError(path, line, "empty text")
    return text


def _keyed_examples(
    path: FilePath,
    records: Iterable[tuple[int, Record]],
    parse: Callable[[int, Record], Example],
    dropped: list[DataError] | None,
) -> Iterator[tuple[str, Example]]:
    """Parses `(line, record)` pairs into `(key, example)` pairs.

    A `DataError` from `parse` is raised, or appended to `dropped` when that is a list; one from
    iterating `records` always raises. A file without records is an error.
    """
    num_records = num_dropped = 0
    for line, record in records:
        num_records += 1
        try:
            example = parse(line, record)
        except DataError as error:
            if dropped is None:
                raise
            dropped.append(error)
            num_dropped += 1
            continue
        yield str(line), example
    if num_records == 0:
        raise DataError(path, None, "no examples")
    if num_dropped:
        _logger.warning("%s: dropped %d of %d examples as bad input", os.fspath(path),
                        num_dropped, num_records)


# ---------------------------------------------------------------------------------------------
# zhang_csv: train.csv / test.csv with the class index 1..J first, optional classes.txt
# ---------------------------------------------------------------------------------------------


def _csv_records(path: FilePath) -> Iterator[tuple[int, list[str]]]:
    """Yields `(first_line, fields)` for each CSV record, quoted multi-line fields included."""
    # strict: a stray or unclosed quote is an error, not a field that swallows later lines.
    reader = csv.reader((line for _, line in _lines(path)), strict=True)
    while True:
        first_line = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise DataError(path, first_line, f"malformed CSV: {error}") from None
        yield first_line, fields


def read_zhang_csv(
    path: FilePath, num_classes: int | None = None, *, dropped: list[DataError] | None = None
) -> Iterator[tuple[str, Example]]:
    """Reads a `zhang_csv` split file (no header): `class_index, text, [text, ...]`.

    Args:
        path: `train.csv` or `test.csv`.
        num_classes: J, when known; class indices must then lie in 1..J.
        dropped: if a list, bad rows are appended to it as `DataError`s instead of raised.

    Yields:
        `(key, {"text": str, "label": int})`: the text columns joined with a space, and the class
        index made 0-based.

    Raises:
        DataError: fewer than 2 columns, a column count other than the first row's, a label that is
            not an integer or is out of range, an empty text.
    """
    num_columns = None

    def parse(line: int, fields: list[str]) -> Example:
        nonlocal num_columns
        if len(fields) < 2:
            raise DataError(path, line, f"found {len(fields)} column(s), expected a label "
                                        f"and at least one text column")
        if num_columns is None:
            num_columns = len(fields)
        elif len(fields) != num_columns:
            raise DataError(path, line, f"found {len(fields)} columns, but the first row has "
                                        f"{num_columns}")
        label = _parse_label(path, line, fields[0], 1, num_classes)
        text = _check_text(path, line, " ".join(fields[1:]))
        return {"text": text, "label": label - 1}

    return _keyed_examples(path, _csv_records(path), parse, dropped)


def read_classes(path: FilePath) -> list[str]:
    """Reads `classes.txt`: one unique, non-blank class name a line, in class-index order."""
    names = []
    seen = {}
    for line, text in _lines(path):
        name = text.strip()
        if not name:
            raise DataError(path, line, "blank class name")
        if name in seen:
            raise DataError(path, line, f"class {name!r} repeats line {seen[name]}")
        seen[name] = line
        names.append(name)
    if not names:
        raise DataError(path, None, "no class names")
    return names


def zhang_csv_num_classes(folder: FilePath) -> int:
    """The number of classes J of a `zhang_csv` folder.

    Counted from `classes.txt` when present, else the largest class index in `train.csv`.
    """
    classes_path = os.path.join(folder, ZHANG_CSV_CLASSES)
    if os.path.exists(classes_path):
        return len(read_classes(classes_path))
    train_path = os.path.join(folder, ZHANG_CSV_TRAIN)
    return 1 + max(example["label"] for _, example in read_zhang_csv(train_path))


# ---------------------------------------------------------------------------------------------
# jsonl: {"text": ..., "label": ...} or {"text": ..., "labels": [...]} a line
# ---------------------------------------------------------------------------------------------


def _label_name(path: FilePath, line: int, label: Any) -> str:
    """A label given as a string or an integer, as a non-empty string."""
    # bool is an int subclass, but `true` is no class name.
    if isinstance(label, bool) or not isinstance(label, str | int):
        raise DataError(path, line, f"label must be a string or an integer, not "
                                    f"{type(label).__name__}")
    name = str(label)
    if not name.strip():
        raise DataError(path, line, "empty label")
    return name


def _parse_jsonl_line(path: FilePath, line: int, text: str, label_key: str) -> Example:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        if not text.strip():
            raise DataError(path, line, "blank line") from None
        problem = f"malformed JSON: {error.msg} at column {error.colno}"
        raise DataError(path, line, problem) from None
    if not isinstance(record, dict):
        raise DataError(path, line, f"expected a JSON object, not {type(record).__name__}")
    for key in ("text", label_key):
        if key not in record:
            raise DataError(path, line, f"missing key {key!r}")
    example = {"text": _check_text(path, line, record["text"])}
    if label_key == "label":
        example["label"] = _label_name(path, line, record["label"])
        return example
    labels = record["labels"]
    if not isinstance(labels, list):
        raise DataError(path, line, f"'labels' must be a list, not {type(labels).__name__}")
    if not labels:
        raise DataError(path, line, "no labels")
    # A repeated label says nothing new (Reuters-21578 has a few); keep its first place.
    example["labels"] = list(dict.fromkeys(_label_name(path, line, label) for label in labels))
    return example


def read_jsonl(
    path: FilePath, label_key: str = "label", *, dropped: list[DataError] | None = None
) -> Iterator[tuple[str, Example]]:
    """Reads a JSON-lines file with one `{"text": ..., label_key: ...}` object a line.

    Other keys (such as an `id`) are ignored. The file may end with a newline; any other blank
    line is an error.

    Args:
        path: the `.jsonl` file.
        label_key: `"label"` (single-label: a string or an integer) or `"labels"` (multi-label: a
            non-empty list of strings or integers; a repeated label is kept once).
        dropped: if a list, bad lines are appended to it as `DataError`s instead of raised.

    Yields:
        `(key, {"text": str, "label": str})` or `(key, {"text": str, "labels": list[str]})`;
        integer labels become strings.

    Raises:
        DataError: a blank line, malformed JSON, a missing key, a value of the wrong type, an empty
            text or label, no labels.
    """
    if label_key not in ("label", "labels"):
        raise ValueError(f"label_key must be 'label' or 'labels', not {label_key!r}")

    def parse(line: int, text: str) -> Example:
        return _parse_jsonl_line(path, line, text, label_key)

    return _keyed_examples(path, _lines(path), parse, dropped)


# ---------------------------------------------------------------------------------------------
# text_labels: parallel NAME.text / NAME.labels files (0-based class indices)
# ---------------------------------------------------------------------------------------------


def _count_lines(path: FilePath) -> int:
    with open(path, "rb") as file:
        return sum(1 for _ in file)


def read_text_labels(
    text_path: FilePath,
    labels_path: FilePath,
    num_classes: int | None = None,
    *,
    dropped: list[DataError] | None = None,
) -> Iterator[tuple[str, Example]]:
    """Reads parallel files holding one text, and one 0-based class index, a line.

    Args:
        text_path: e.g. `us_test.text`.
        labels_path: e.g. `us_test.labels`, the same number of lines.
        num_classes: J, when known; class indices must then lie in 0..J-1.
        dropped: if a list, bad lines are appended to it as `DataError`s instead of raised.

    Yields:
        `(key, {"text": str, "label": int})`.

    Raises:
        DataError: the files have different line counts (raised before any example), a label that
            is not an integer or is out of range (naming the labels file), an empty text (naming the
            text file).
    """
    num_texts, num_labels = _count_lines(text_path), _count_lines(labels_path)
    if num_texts != num_labels:
        raise DataError(text_path, None, f"has {num_texts} lines but {os.fspath(labels_path)} "
                                         f"has {num_labels}")
    high = None if num_classes is None else num_classes - 1
    records = ((line, (text, label))
               for (line, text), (_, label) in zip(_lines(text_path), _lines(labels_path)))

    def parse(line: int, record: tuple[str, str]) -> Example:
        text, label = map(_without_newline, record)
        return {"text": _check_text(text_path, line, text),
                "label": _parse_label(labels_path, line, label, 0, high)}

    return _keyed_examples(text_path, records, parse, dropped)


def read_emoji_mapping(path: FilePath) -> list[str]:
    """Reads a SemEval-2018 emoji mapping: `index<TAB>emoji<TAB>_name_` a line, index 0, 1, ...

    Returns:
        The names without their surrounding underscores, in index order, e.g. `["red_heart",
        "smiling_face_with_hearteyes", ...]`.
    """
    names = []
    for line, text in _lines(path):
        fields = [field.strip() for field in _without_newline(text).split("\t")]
        while fields and not fields[-1]:  # the files end each line with a tab
            fields.pop()
        if len(fields) != 3:
            raise DataError(path, line, f"expected 3 tab-separated fields (index, emoji, name), "
                                        f"found {len(fields)}")
        index, _, name = fields
        if index != str(len(names)):
            raise DataError(path, line, f"index {index!r} where {len(names)} was expected")
        name = name.strip("_")
        if not name:
            raise DataError(path, line, "empty name")
        names.append(name)
    if not names:
        raise DataError(path, None, "no labels")
    return names
