"""`text_labels`: parallel `NAME.text` / `NAME.labels` files, one example a line with a 0-based
class index (SemEval-2018 emoji prediction), and the emoji mapping that names the classes."""

import os
from collections.abc import Iterator

from jcaps.data.errors import DataError
from jcaps.data.readers.lines import (
    Example,
    FilePath,
    check_text,
    keyed_examples,
    numbered_lines,
    parse_label,
    without_newline,
)


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
        raise DataError(text_path, None, f"has {num_texts} lines but {os.fspath(labels_path)} has {num_labels}")
    high = None if num_classes is None else num_classes - 1
    records = (
        (line, (text, label))
        for (line, text), (_, label) in zip(numbered_lines(text_path), numbered_lines(labels_path))
    )

    def parse(line: int, record: tuple[str, str]) -> Example:
        text, label = map(without_newline, record)
        return {"text": check_text(text_path, line, text), "label": parse_label(labels_path, line, label, 0, high)}

    return keyed_examples(text_path, records, parse, dropped)


def read_emoji_mapping(path: FilePath) -> list[str]:
    """Reads a SemEval-2018 emoji mapping: `index<TAB>emoji<TAB>_name_` a line, index 0, 1, ...

    Returns:
        The names without their surrounding underscores, in index order, e.g. `["red_heart",
        "smiling_face_with_hearteyes", ...]`.
    """
    names: list[str] = []
    for line, text in numbered_lines(path):
        fields = [field.strip() for field in without_newline(text).split("\t")]
        while fields and not fields[-1]:  # the files end each line with a tab
            fields.pop()
        if len(fields) != 3:
            raise DataError(path, line, f"expected 3 tab-separated fields (index, emoji, name), found {len(fields)}")
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
