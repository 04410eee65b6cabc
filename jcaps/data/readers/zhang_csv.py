"""`zhang_csv`: `train.csv` / `test.csv` with the class index 1..J first, optional `classes.txt`
(the format of Zhang et al., 2015)."""

import csv
import os
from collections.abc import Iterator

from jcaps.data.errors import DataError
from jcaps.data.readers.lines import Example, FilePath, check_text, keyed_examples, numbered_lines, parse_label

ZHANG_CSV_TRAIN = "train.csv"
ZHANG_CSV_CLASSES = "classes.txt"


def _csv_records(path: FilePath) -> Iterator[tuple[int, list[str] | DataError]]:
    """Yields `(first_line, fields)` for each CSV record, quoted multi-line fields included, and
    `(first_line, DataError)` for a record with a field longer than the csv module's limit
    (`csv.field_size_limit()`, 131,072 characters): the reader has read past it, so a caller
    that drops bad rows goes on with the next record."""
    # strict: a stray or unclosed quote is an error, not a field that swallows later lines.
    reader = csv.reader((line for _, line in numbered_lines(path)), strict=True)
    while True:
        first_line = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            if str(error).startswith("field larger than field limit"):
                limit = f"a field longer than {csv.field_size_limit():,} characters"
                yield first_line, DataError(path, first_line, limit)
                continue
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
            not an integer or is out of range, an empty text, a field longer than 131,072
            characters.
    """
    num_columns = None

    def parse(line: int, fields: list[str] | DataError) -> Example:
        nonlocal num_columns
        if isinstance(fields, DataError):
            raise fields
        if len(fields) < 2:
            raise DataError(path, line, f"found {len(fields)} column(s), expected a label and at least one text column")
        if num_columns is None:
            num_columns = len(fields)
        elif len(fields) != num_columns:
            raise DataError(path, line, f"found {len(fields)} columns, but the first row has {num_columns}")
        label = parse_label(path, line, fields[0], 1, num_classes)
        text = check_text(path, line, " ".join(fields[1:]))
        return {"text": text, "label": label - 1}

    return keyed_examples(path, _csv_records(path), parse, dropped)


def read_classes(path: FilePath) -> list[str]:
    """Reads `classes.txt`: one unique, non-blank class name a line, in class-index order."""
    names = []
    seen: dict[str, int] = {}
    for line, text in numbered_lines(path):
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
