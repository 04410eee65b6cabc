"""What every reader shares: numbered lines of a UTF-8 file, the checks of a label and a text,
and the keying of parsed examples by their line (with bad rows raised or dropped)."""

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from jcaps.data.errors import DataError

FilePath = str | os.PathLike
Example = dict[str, Any]
Record = TypeVar("Record")

# ASCII digits only: `int` alone would also accept "1_000" and non-ASCII digits.
INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")

_logger = logging.getLogger(__name__)


def numbered_lines(path: FilePath) -> Iterator[tuple[int, str]]:
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


def without_newline(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def parse_label(path: FilePath, line: int, field: str, low: int, high: int | None) -> int:
    """Parses an integer class label that must lie in [low, high] (no upper bound if None)."""
    if not INTEGER.fullmatch(field):
        raise DataError(path, line, f"label {field!r} is not an integer")
    label = int(field)
    if label < low or (high is not None and label > high):
        allowed = f"{low}..{high}" if high is not None else f">= {low}"
        raise DataError(path, line, f"label {label} is out of range {allowed}")
    return label


def check_text(path: FilePath, line: int, text: Any) -> str:
    """Returns `text` if it is a string with a non-blank character."""
    if not isinstance(text, str):
        raise DataError(path, line, f"text must be a string, not {type(text).__name__}")
    if not text.strip():
        raise DataError(path, line, "empty text")
    return text


def keyed_examples(
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
        _logger.warning("%s: dropped %d of %d examples as bad input", os.fspath(path), num_dropped, num_records)
