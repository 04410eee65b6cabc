"""`jsonl`: `{"text": ..., "label": ...}` or `{"text": ..., "labels": [...]}` a line."""
import json
from collections.abc import Iterator
from typing import Any

from jcaps.data.errors import DataError
from jcaps.data.readers.lines import Example, FilePath, check_text, keyed_examples, numbered_lines


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
    example = {"text": check_text(path, line, record["text"])}
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

    return keyed_examples(path, numbered_lines(path), parse, dropped)
