"""`ts`: the UEA/UCR time series classification archive (`NAME_TRAIN.ts`, `NAME_TEST.ts`)."""

import dataclasses
import re
from collections.abc import Iterator

import numpy as np

from jcaps.data.errors import DataError
from jcaps.data.readers.lines import INTEGER, FilePath, numbered_lines

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
    header: dict[str, _TsHeaderField] = {}
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
    if not INTEGER.fullmatch(field.value) or int(field.value) < 1:
        raise DataError(path, field.line, f"@{field.keyword} must be a positive integer, not {field.value!r}")
    return int(field.value)


def _ts_class_labels(path: FilePath, header: dict[str, _TsHeaderField], data_line: int) -> tuple[str, ...]:
    """The labels of `@classLabel true <labels>`; any other kind of file is an error."""
    classification = "only classification files (@classLabel true <labels>) are supported"
    if "targetlabel" in header:
        target = header["targetlabel"]
        raise DataError(path, target.line, f"@{target.keyword}: regression files are not supported; {classification}")
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
    lines = numbered_lines(path)
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
    expected_channels: tuple[int, str] | None = None
    if dimensions is not None:
        expected_channels = dimensions, "@dimensions is"
    elif univariate:
        expected_channels = 1, "@univariate true means"
    expected_length: tuple[int, str] | None = None
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
                raise DataError(
                    path,
                    number,
                    f"channel {index} has {len(channel_values)} values, but channel 1 has {len(values[0])}",
                )
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
    if not series or expected_channels is None:  # the first example sets expected_channels
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
