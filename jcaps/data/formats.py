"""Readers for the local dataset formats: text (`zhang_csv`, `jsonl`, `text_labels`), time series
(the UEA/UCR `.ts` format) and images (MNIST's `idx`).

Each text reader streams `(key, example)` pairs, where `key` is the 1-based line number (as a
string) on which the example starts, so a caller can name the line of a later problem, such as
a label unknown to the training split. Files are UTF-8 (an opening byte-order mark is ignored).
The `.ts` and `idx` readers return whole arrays: their files are small enough to hold.

Bad input raises `DataError` naming the file, the line and the problem; nothing is skipped
silently. A caller of a text reader that chooses to drop bad rows passes a list as `dropped`:
each bad row's `DataError` is appended to it instead of raised, and the reader logs how many
rows it dropped. Problems that make the rest of a file unreadable (broken encoding or CSV
quoting, parallel files of different lengths, a file without any example) always raise, and so
does every problem of a `.ts` or `idx` file.
"""
import csv
import dataclasses
import gzip
import json
import logging
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np

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


# ---------------------------------------------------------------------------------------------
# ts: the UEA/UCR time series classification archive (`NAME_TRAIN.ts`, `NAME_TEST.ts`)
# ---------------------------------------------------------------------------------------------

# A decimal number as the archive writes them ("0.079106", "-1.5e-05", "3."): no NaN, inf or "?".
_TS_NUMBER = r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*"
_TS_VALUE = re.compile(_TS_NUMBER)
_TS_CHANNEL = re.compile(rf"{_TS_NUMBER}(?:,{_TS_NUMBER})*")
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclasses.dataclass
class TsFile:
    """The examples and header of a `.ts` classification file.

    Attributes:
        series: one float32 array [T_i, N] an example, time-major: rows are time steps, columns
            channels.
        labels: each example's class label, as written.
        lines: the 1-based line number of each example.
        class_labels: the labels of `@classLabel true <labels>`, in header order.
        num_channels: N, from `@dimensions`, `@univariate true` (1) or else the first example.
        equal_length: `@equalLength`, or when the header lacks it, whether all series have one
            length.
        series_length: that one length T when `equal_length`, else None.
        attributes: each header line's value by its keyword, lower-cased without the `@`, e.g.
            `{"problemname": "BasicMotions", "dimensions": "6", "classlabel": "true a b"}`.
    """

    series: list[np.ndarray]
    labels: list[str]
    lines: list[int]
    class_labels: tuple[str, ...]
    num_channels: int
    equal_length: bool
    series_length: int | None
    attributes: dict[str, str]


@dataclasses.dataclass
class _TsHeaderField:
    line: int
    keyword: str  # as written, e.g. "classLabel", to name it in messages
    value: str


def _read_ts_header(path: FilePath, lines: Iterator[tuple[int, str]]) -> tuple[dict[str, _TsHeaderField], int]:
    """Reads `lines` up to `@data`; returns the header fields by lower-cased keyword and the @data line."""
    header = {}
    for number, text in lines:
        text = text.strip()
        if not text or text.startswith("#"):
            continue
        if not text.startswith("@"):
            raise DataError(path, number, "expected a header line (@keyword value) or @data before the examples")
        parts = text[1:].split(maxsplit=1)
        if not parts:
            raise DataError(path, number, "no keyword after '@'")
        keyword, value = parts[0], parts[1] if len(parts) == 2 else ""
        key = keyword.lower()
        if key == "data":
            return header, number
        if key in header:
            raise DataError(path, number, f"@{keyword} repeats line {header[key].line}")
        header[key] = _TsHeaderField(number, keyword, value.strip())
    raise DataError(path, None, "no @data line")


def _ts_boolean(path: FilePath, header: dict[str, _TsHeaderField], key: str) -> bool | None:
    """The value of a `true`/`false` header field, None when the header lacks it."""
    field = header.get(key)
    if field is None:
        return None
    if field.value.lower() not in ("true", "false"):
        raise DataError(path, field.line, f"@{field.keyword} must be true or false, not {field.value!r}")
    return field.value.lower() == "true"


def _ts_count(path: FilePath, header: dict[str, _TsHeaderField], key: str) -> int | None:
    """The value of a positive integer header field, None when the header lacks it."""
    field = header.get(key)
    if field is None:
        return None
    if not _INTEGER.fullmatch(field.value) or int(field.value) < 1:
        raise DataError(path, field.line, f"@{field.keyword} must be a positive integer, not {field.value!r}")
    return int(field.value)


def _ts_class_labels(path: FilePath, header: dict[str, _TsHeaderField], data_line: int) -> tuple[str, ...]:
    """The labels of `@classLabel true <labels>`; any other kind of file is an error."""
    classification = "only classification files (@classLabel true <labels>) are supported"
    if "targetlabel" in header:
        field = header["targetlabel"]
        raise DataError(path, field.line, f"@{field.keyword}: regression files are not supported; {classification}")
    field = header.get("classlabel")
    if field is None:
        raise DataError(path, data_line, f"no @classLabel line before @data; {classification}")
    flag, *labels = field.value.split() or [""]
    if flag.lower() != "true":
        declared = f"@{field.keyword} {field.value}".rstrip()
        raise DataError(path, field.line, f"{declared}: {classification}")
    if not labels:
        raise DataError(path, field.line, f"@{field.keyword} true names no class labels")
    for index, label in enumerate(labels):
        if label in labels[:index]:
            raise DataError(path, field.line, f"class label {label!r} repeats in @{field.keyword}")
    return tuple(labels)


def _ts_value_problem(field: str) -> str:
    """What is wrong with a value that is not a decimal number."""
    value = field.strip()
    if not value:
        return "empty value"
    if value == "?" or value.lower().lstrip("+-") == "nan":
        return f"missing value {value!r} (missing values are not supported)"
    return f"{value!r} is not a decimal number"


def _parse_ts_channel(path: FilePath, line: int, channel: int, text: str) -> np.ndarray:
    """The comma-separated values of the 1-based `channel` of an example, as float32 [T]."""
    if not text.strip():
        raise DataError(path, line, f"channel {channel} is empty")
    fields = text.split(",")
    # One match for the whole channel is fast; only a bad channel is searched value by value.
    if not _TS_CHANNEL.fullmatch(text):
        for position, field in enumerate(fields, start=1):
            if not _TS_VALUE.fullmatch(field):
                raise DataError(path, line, f"channel {channel}, value {position}: {_ts_value_problem(field)}")
    values = np.array(fields, dtype=np.float64)
    too_large = np.abs(values) > _FLOAT32_MAX
    if too_large.any():
        position = 1 + int(np.argmax(too_large))
        problem = f"{fields[position - 1].strip()!r} is too large for float32"
        raise DataError(path, line, f"channel {channel}, value {position}: {problem}")
    return values.astype(np.float32)


def read_ts(path: FilePath) -> TsFile:
    """Reads a `.ts` file of the UEA/UCR time series classification archive (sktime's format).

    The header (keywords case-insensitive) precedes `@data`: `@problemName`, `@timeStamps false`,
    `@missing`, `@univariate true|false`, `@dimensions D` (may be absent when univariate),
    `@equalLength true|false`, `@seriesLength L`, `@classLabel true <labels>`. Each non-blank line
    after `@data` is one example: channels separated by `:`, values within a channel by `,`, the
    class label after the last `:`. Lines starting with `#` are comments; blank lines, surrounding
    whitespace and Windows line endings are ignored.

    Returns:
        The examples with their labels and line numbers, and the header; see `TsFile`.

    Raises:
        DataError: a regression file (`@targetLabel`), a file without class labels, timestamped
            series (`@timeStamps true`), a malformed header line; an example whose channel count
            disagrees with `@dimensions` (or the first example), whose length disagrees with
            `@seriesLength` (or with the first example, under `@equalLength true`), whose channels
            have different lengths, with a value that is not a finite decimal number (NaN and the
            missing value `?` included) or a class label not in `@classLabel`; no `@data` line, no
            examples.
    """
    lines = _lines(path)
    header, data_line = _read_ts_header(path, lines)
    class_labels = _ts_class_labels(path, header, data_line)
    if _ts_boolean(path, header, "timestamps"):
        field = header["timestamps"]
        raise DataError(path, field.line, f"@{field.keyword} true: timestamped series are not supported")
    univariate = _ts_boolean(path, header, "univariate")
    dimensions = _ts_count(path, header, "dimensions")
    if univariate and dimensions not in (None, 1):
        raise DataError(path, header["dimensions"].line, f"@dimensions {dimensions} contradicts @univariate true")
    equal_length = _ts_boolean(path, header, "equallength")
    declared_length = _ts_count(path, header, "serieslength")

    # What each example must agree with, and where that comes from, for the messages; what the
    # header leaves open the first example fixes.
    expected_channels = None
    if dimensions is not None:
        expected_channels = dimensions, "@dimensions is"
    elif univariate:
        expected_channels = 1, "@univariate true means"
    expected_length = None
    if declared_length is not None and equal_length is not False:
        expected_length = declared_length, "@seriesLength is"

    series, labels, numbers = [], [], []
    for number, text in lines:
        text = text.strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith("@"):
            raise DataError(path, number, f"header line after @data (line {data_line})")
        *channels, label = text.split(":")
        if not channels:
            raise DataError(path, number, "expected channels and a class label separated by ':', found no ':'")
        if expected_channels is None:
            expected_channels = len(channels), f"the first example (line {number}) has"
        if len(channels) != expected_channels[0]:
            num_channels, source = expected_channels
            raise DataError(path, number, f"found {len(channels)} channel(s), but {source} {num_channels}")
        values = [_parse_ts_channel(path, number, index, channel) for index, channel in enumerate(channels, start=1)]
        for index, channel_values in enumerate(values[1:], start=2):
            if len(channel_values) != len(values[0]):
                raise DataError(path, number, f"channel {index} has {len(channel_values)} values, but channel 1 "
                                              f"has {len(values[0])}")
        length = len(values[0])
        if expected_length is None and equal_length:
            expected_length = length, f"the first example (line {number}) has"
        if expected_length is not None and length != expected_length[0]:
            series_length, source = expected_length
            raise DataError(path, number, f"found {length} time steps, but {source} {series_length}")
        label = label.strip()
        if label not in class_labels:
            raise DataError(path, number, f"class label {label!r} is not in @classLabel ({' '.join(class_labels)})")
        series.append(np.stack(values, axis=1))
        labels.append(label)
        numbers.append(number)
    if not series:
        raise DataError(path, data_line, "no examples after @data")

    lengths = {len(example) for example in series}
    if equal_length is None:
        equal_length = len(lengths) == 1
    return TsFile(
        series=series,
        labels=labels,
        lines=numbers,
        class_labels=class_labels,
        num_channels=expected_channels[0],
        equal_length=equal_length,
        series_length=lengths.pop() if equal_length else None,
        attributes={key: field.value for key, field in header.items()},
    )


# ---------------------------------------------------------------------------------------------
# idx: MNIST's `train-images-idx3-ubyte[.gz]`, `train-labels-idx1-ubyte[.gz]`, ...
# ---------------------------------------------------------------------------------------------

# The third byte of the magic number: the type of the values, all big-endian.
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_LABELS_MAGIC = 0x00000801
_IDX_IMAGES_MAGIC = 0x00000803
_GZIP_MAGIC = b"\x1f\x8b"


def _read_maybe_gzipped(path: FilePath) -> bytes:
    """The bytes of a file, decompressed when they are gzip data (whatever the file's name)."""
    with open(path, "rb") as file:
        data = file.read()
    if not data.startswith(_GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(path, None, f"broken gzip data: {error}") from None


def read_idx(path: FilePath) -> np.ndarray:
    """Reads an idx file, gzipped or not, as an array of its shape and type in native byte order.

    The file holds a magic number (two zero bytes, a type code, the number of dimensions), each
    dimension's size as a big-endian int32, then the values in C order. MNIST's labels are magic
    0x00000801 (uint8 [n]), its images 0x00000803 (uint8 [n, rows, cols]).

    Raises:
        DataError: a magic number that does not start with two zero bytes, an unknown type code,
            no dimensions, a truncated header, a payload whose size disagrees with the header.
    """
    data = _read_maybe_gzipped(path)
    if len(data) < 4 or data[:2] != b"\0\0":
        raise DataError(path, None, f"not an idx file: magic number 0x{data[:4].hex()} does not start with 0x0000")
    code, num_dimensions = data[2], data[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{known:02x}" for known in _IDX_DTYPES)
        raise DataError(path, None, f"unknown idx type code 0x{code:02x} (known: {known})")
    if num_dimensions == 0:
        raise DataError(path, None, "idx file without dimensions")
    header_size = 4 + 4 * num_dimensions
    if len(data) < header_size:
        raise DataError(path, None, f"truncated header: {num_dimensions} dimension sizes need {header_size} bytes, "
                                    f"the file has {len(data)}")
    shape = tuple(int(size) for size in np.frombuffer(data, ">i4", num_dimensions, offset=4))
    if min(shape) < 0:
        raise DataError(path, None, f"negative dimension size in {shape}")
    dtype = _IDX_DTYPES[code]
    expected_size = int(np.prod(shape)) * dtype.itemsize
    payload_size = len(data) - header_size
    if payload_size != expected_size:
        raise DataError(path, None, f"the header promises {shape} values of type {dtype.newbyteorder('=')} "
                                    f"({expected_size} bytes), but the payload has {payload_size} bytes")
    return np.frombuffer(data, dtype, offset=header_size).reshape(shape).astype(dtype.newbyteorder("="))


def read_idx_images_as_sequences(images_path: FilePath, labels_path: FilePath) -> tuple[np.ndarray, np.ndarray]:
    """Reads MNIST-style idx images and labels, each image as a sequence of its rows.

    Args:
        images_path: uint8 images [n, rows, cols] (magic 0x00000803), e.g. `train-images-idx3-ubyte.gz`.
        labels_path: uint8 labels [n] (magic 0x00000801), e.g. `train-labels-idx1-ubyte.gz`.

    Returns:
        `(series, labels)`: float32 [n, rows, cols] scaled from 0..255 to [0, 1], read row by row
        as `rows` time steps of `cols` features (28 x 28 for MNIST), and int32 [n].

    Raises:
        DataError: anything `read_idx` rejects, files of the wrong magic number, different counts
            of images and labels.
    """
    images, labels = read_idx(images_path), read_idx(labels_path)
    for path, array, magic, what in ((images_path, images, _IDX_IMAGES_MAGIC, "images [n, rows, cols]"),
                                     (labels_path, labels, _IDX_LABELS_MAGIC, "labels [n]")):
        if array.dtype != np.uint8 or array.ndim != magic & 0xFF:
            raise DataError(path, None, f"expected uint8 {what} (magic 0x{magic:08x}), found {array.dtype} "
                                        f"of {array.ndim} dimension(s)")
    if len(images) != len(labels):
        raise DataError(images_path, None, f"has {len(images)} images but {os.fspath(labels_path)} has "
                                           f"{len(labels)} labels")
    return images.astype(np.float32) / 255.0, labels.astype(np.int32)
