"""`jsonl`: `{"text": ..., "label": ...}` or `{"text": ..., "labels": [...]}` a line, with an
optional group field (such as the `source` package of a Debian package description) by which
validation is carved (`data.group_key`)."""

import json
from collections.abc import Iterator
from typing import Any

from jcaps.data.errors import DataError
from jcaps.data.readers.lines import Example, FilePath, check_text, keyed_examples, numbered_lines


def _name(path: FilePath, line: int, value: Any, what: str) -> str:
    """A label or group given as a string or an integer, as a non-empty string."""
    # bool is an int subclass, but `true` is no class name.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataError(path, line, f"{what} must be a string or an integer, not {type(value).__name__}")
    name = str(value)
    if not name.strip():
        raise DataError(path, line, f"empty {what}")
    return name


def _parse_jsonl_line(path: FilePath, line: int, text: str, label_key: str, group_key: str) -> Example:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        if not text.strip():
            raise DataError(path, line, "blank line") from None
        problem = f"malformed JSON: {error.msg} at column {error.colno}"
        raise DataError(path, line, problem) from None
    if not isinstance(record, dict):
        raise DataError(path, line, f"expected a JSON object, not {type(record).__name__}")
    for key in ("text", label_key) + ((group_key,) if group_key else ()):
        if key not in record:
            raise DataError(path, line, f"missing key {key!r}")
    example: Example = {"text": check_text(path, line, record["text"])}
    if group_key:
        example[group_key] = _name(path, line, record[group_key], f"group {group_key!r}")
    if label_key == "label":
        example["label"] = _name(path, line, record["label"], "label")
        return example
    labels = record["labels"]
    if not isinstance(labels, list):
        raise DataError(path, line, f"'labels' must be a list, not {type(labels).__name__}")
    if not labels:
        raise DataError(path, line, "no labels")
    # A repeated label says nothing new (Reuters-21578 has a few); keep its first place.
    example["labels"] = list(dict.fromkeys(_name(path, line, label, "label") for label in labels))
    return example


def read_jsonl(
    path: FilePath, label_key: str = "label", *, group_key: str = "", dropped: list[DataError] | None = None
) -> Iterator[tuple[str, Example]]:
    """Reads a JSON-lines file with one `{"text": ..., label_key: ...}` object a line.

    Other keys (such as an `id`) are ignored, but `group_key`'s. The file may end with a newline;
    any other blank line is an error.

    Args:
        path: the `.jsonl` file.
        label_key: `"label"` (single-label: a string or an integer) or `"labels"` (multi-label: a
            non-empty list of strings or integers; a repeated label is kept once).
        group_key: if set, the key of each record's group (a non-empty string or integer), kept
            as the example's `group_key` feature; a record without it is an error.
        dropped: if a list, bad lines are appended to it as `DataError`s instead of raised.

    Yields:
        `(key, {"text": str, "label": str})` or `(key, {"text": str, "labels": list[str]})`,
        with `group_key: str` when it is set; integer labels and groups become strings.

    Raises:
        DataError: a blank line, malformed JSON, a missing key, a value of the wrong type, an empty
            text or label, no labels.
    """
    if label_key not in ("label", "labels"):
        raise ValueError(f"label_key must be 'label' or 'labels', not {label_key!r}")
    if group_key in ("text", "line", label_key):
        raise ValueError(f"group_key must name a field besides the text and labels, not {group_key!r}")

    def parse(line: int, text: str) -> Example:
        return _parse_jsonl_line(path, line, text, label_key, group_key)

    return keyed_examples(path, numbered_lines(path), parse, dropped)
