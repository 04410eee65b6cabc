"""Readers of the local formats: good files parse exactly; every bad file names file and line."""
import logging
import pickle

import pytest

from jcaps.data.errors import DataError
from jcaps.data.readers import jsonl, text_labels, zhang_csv


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


# ---------------------------------------------------------------------------------------------
# DataError
# ---------------------------------------------------------------------------------------------


def test_data_error_message_and_fields_survive_pickling():
    error = pickle.loads(pickle.dumps(DataError("a/train.csv", 3, "empty text")))
    assert str(error) == "a/train.csv:3: empty text"
    assert (error.path, error.line, error.problem) == ("a/train.csv", 3, "empty text")
    assert str(DataError("x.json", None, "no examples")) == "x.json: no examples"
    assert isinstance(error, ValueError)


# ---------------------------------------------------------------------------------------------
# zhang_csv
# ---------------------------------------------------------------------------------------------


def test_zhang_csv_joins_text_columns_and_keys_by_starting_line(tmp_path):
    path = write(tmp_path / "train.csv",
                 '"3","Oil up","Prices\\rose"\r\n'
                 '"1","Two\nline title","body, with comma"\r\n'
                 '2,"He said ""hi""",x\r\n')
    examples = list(zhang_csv.read_zhang_csv(path, num_classes=3))
    assert examples == [
        ("1", {"text": "Oil up Prices\\rose", "label": 2}),
        ("2", {"text": "Two\nline title body, with comma", "label": 0}),
        ("4", {"text": 'He said "hi" x', "label": 1}),
    ]


@pytest.mark.parametrize("bad_row, problem", [
    ("2", r"found 1 column"),
    ("", r"found 0 column"),
    ('2,"a","b","c"', r"found 4 columns, but the first row has 3"),
    ("two,a,b", r"label 'two' is not an integer"),
    ("1.0,a,b", r"label '1.0' is not an integer"),
    ("5,a,b", r"label 5 is out of range 1\.\.4"),
    ("0,a,b", r"label 0 is out of range 1\.\.4"),
    ('2," "," "', r"empty text"),
    ('2,"a"b",c', r"malformed CSV"),
])
def test_zhang_csv_bad_row_names_file_line_and_problem(tmp_path, bad_row, problem):
    path = write(tmp_path / "train.csv", f"1,a,b\n2,c,d\n{bad_row}\n3,e,f\n")
    with pytest.raises(DataError, match=rf"train\.csv:3: {problem}"):
        list(zhang_csv.read_zhang_csv(path, num_classes=4))


def test_zhang_csv_without_num_classes_still_rejects_labels_below_one(tmp_path):
    path = write(tmp_path / "test.csv", "1,a\n-2,b\n")
    with pytest.raises(DataError, match=r"test\.csv:2: label -2 is out of range >= 1"):
        list(zhang_csv.read_zhang_csv(path))


def test_zhang_csv_unclosed_quote_is_an_error_not_a_swallowed_file(tmp_path):
    path = write(tmp_path / "train.csv", '1,a\n2,"b\n3,c\n')
    with pytest.raises(DataError, match=r"train\.csv:2: malformed CSV"):
        list(zhang_csv.read_zhang_csv(path))


def test_invalid_utf8_names_the_line(tmp_path):
    path = write(tmp_path / "train.csv", b"1,a\n2,caf\xe9\n")
    with pytest.raises(DataError, match=r"train\.csv:2: not valid UTF-8"):
        list(zhang_csv.read_zhang_csv(path))


def test_byte_order_mark_is_ignored(tmp_path):
    path = write(tmp_path / "train.csv", "\ufeff1,a\n")
    assert list(zhang_csv.read_zhang_csv(path)) == [("1", {"text": "a", "label": 0})]


def test_empty_file_is_an_error(tmp_path):
    path = write(tmp_path / "test.csv", "")
    with pytest.raises(DataError, match=r"test\.csv: no examples"):
        list(zhang_csv.read_zhang_csv(path))


def test_dropped_rows_are_collected_counted_and_logged(tmp_path, caplog):
    path = write(tmp_path / "train.csv", "1,a\nx,b\n2, \n2,c\n")
    dropped = []
    with caplog.at_level(logging.WARNING):
        examples = list(zhang_csv.read_zhang_csv(path, dropped=dropped))
    assert [key for key, _ in examples] == ["1", "4"]
    assert [(error.line, error.problem) for error in dropped] == [
        (2, "label 'x' is not an integer"), (3, "empty text")]
    assert "train.csv: dropped 2 of 4 examples" in caplog.text


def test_a_field_over_the_csv_limit_is_a_bad_row_that_can_be_dropped(tmp_path):
    path = write(tmp_path / "train.csv", "1,a\n2," + "x" * 200_000 + "\n3,c\n")
    with pytest.raises(DataError, match=r"train\.csv:2: a field longer than 131,072 characters"):
        list(zhang_csv.read_zhang_csv(path))
    dropped = []
    assert [key for key, _ in zhang_csv.read_zhang_csv(path, dropped=dropped)] == ["1", "3"]
    assert [(error.line, error.problem) for error in dropped] == [(2, "a field longer than 131,072 characters")]


def test_read_classes(tmp_path):
    assert zhang_csv.read_classes(write(tmp_path / "classes.txt", "World\nSci/Tech\n")) == [
        "World", "Sci/Tech"]
    with pytest.raises(DataError, match=r"classes\.txt:2: blank class name"):
        zhang_csv.read_classes(write(tmp_path / "classes.txt", "World\n\nSports\n"))
    with pytest.raises(DataError, match=r"classes\.txt:3: class 'World' repeats line 1"):
        zhang_csv.read_classes(write(tmp_path / "classes.txt", "World\nSports\nWorld\n"))


def test_zhang_csv_num_classes_prefers_classes_txt(tmp_path):
    write(tmp_path / "train.csv", "1,a\n3,b\n")
    assert zhang_csv.zhang_csv_num_classes(tmp_path) == 3
    write(tmp_path / "classes.txt", "a\nb\nc\nd\n")
    assert zhang_csv.zhang_csv_num_classes(tmp_path) == 4


# ---------------------------------------------------------------------------------------------
# jsonl
# ---------------------------------------------------------------------------------------------


def test_jsonl_single_and_multi_label(tmp_path):
    path = write(tmp_path / "train.jsonl",
                 '{"id": 7, "text": "cocoa up", "label": "cocoa"}\n{"text": "b", "label": 3}\n')
    assert list(jsonl.read_jsonl(path)) == [
        ("1", {"text": "cocoa up", "label": "cocoa"}), ("2", {"text": "b", "label": "3"})]
    path = write(tmp_path / "test.jsonl",
                 '{"text": "a", "labels": ["corn", "wheat", "corn"]}\n{"text": "b", "labels": [1]}')
    assert list(jsonl.read_jsonl(path, label_key="labels")) == [
        ("1", {"text": "a", "labels": ["corn", "wheat"]}), ("2", {"text": "b", "labels": ["1"]})]


@pytest.mark.parametrize("label_key, bad_line, problem", [
    ("label", '{"text": "a", "label": "x"', r"malformed JSON: .* column"),
    ("label", "", r"blank line"),
    ("label", '["a", "x"]', r"expected a JSON object, not list"),
    ("label", '{"label": "x"}', r"missing key 'text'"),
    ("label", '{"text": "a", "labels": ["x"]}', r"missing key 'label'"),
    ("label", '{"text": null, "label": "x"}', r"text must be a string, not NoneType"),
    ("label", '{"text": " \\n", "label": "x"}', r"empty text"),
    ("label", '{"text": "a", "label": true}', r"label must be a string or an integer, not bool"),
    ("label", '{"text": "a", "label": 1.5}', r"label must be a string or an integer, not float"),
    ("label", '{"text": "a", "label": ""}', r"empty label"),
    ("labels", '{"text": "a", "labels": "x"}', r"'labels' must be a list, not str"),
    ("labels", '{"text": "a", "labels": []}', r"no labels"),
    ("labels", '{"text": "a", "labels": ["x", null]}', r"label must be a string or an integer"),
])
def test_jsonl_bad_line_names_file_line_and_problem(tmp_path, label_key, bad_line, problem):
    good = '{"text": "a", "%s": %s}' % (label_key, '["x"]' if label_key == "labels" else '"x"')
    path = write(tmp_path / "test.jsonl", f"{good}\n{good}\n{bad_line}\n{good}\n")
    with pytest.raises(DataError, match=rf"test\.jsonl:3: {problem}"):
        list(jsonl.read_jsonl(path, label_key=label_key))


def test_jsonl_rejects_unknown_label_key(tmp_path):
    with pytest.raises(ValueError, match="label_key"):
        jsonl.read_jsonl(tmp_path / "x.jsonl", label_key="tags")


# ---------------------------------------------------------------------------------------------
# text_labels
# ---------------------------------------------------------------------------------------------


def test_text_labels_pairs_lines(tmp_path):
    text = write(tmp_path / "us_test.text", "Hello @user 🎄\nsun is out\r\n")
    labels = write(tmp_path / "us_test.labels", "17\n0\n")
    assert list(text_labels.read_text_labels(text, labels, num_classes=20)) == [
        ("1", {"text": "Hello @user 🎄", "label": 17}), ("2", {"text": "sun is out", "label": 0})]


def test_text_labels_line_counts_must_agree(tmp_path):
    text = write(tmp_path / "us_test.text", "a\nb\nc\n")
    labels = write(tmp_path / "us_test.labels", "1\n2\n")
    with pytest.raises(DataError,
                       match=r"us_test\.text: has 3 lines but .*us_test\.labels has 2"):
        text_labels.read_text_labels(text, labels)


@pytest.mark.parametrize("text_line, label_line, bad_file, problem", [
    ("c", "x", "labels", r"label 'x' is not an integer"),
    ("c", "20", "labels", r"label 20 is out of range 0\.\.19"),
    ("c", "-1", "labels", r"label -1 is out of range 0\.\.19"),
    ("  ", "3", "text", r"empty text"),
])
def test_text_labels_bad_line_names_the_right_file(tmp_path, text_line, label_line, bad_file,
                                                   problem):
    text = write(tmp_path / "us_test.text", f"a\nb\n{text_line}\n")
    labels = write(tmp_path / "us_test.labels", f"1\n2\n{label_line}\n")
    with pytest.raises(DataError, match=rf"us_test\.{bad_file}:3: {problem}"):
        list(text_labels.read_text_labels(text, labels, num_classes=20))


def test_read_emoji_mapping(tmp_path):
    path = write(tmp_path / "us_mapping.txt", "0\t❤\t_red_heart_\t\n1\t🔥\t_fire_\t\n")
    assert text_labels.read_emoji_mapping(path) == ["red_heart", "fire"]
    with pytest.raises(DataError, match=r"us_mapping\.txt:2: index '2' where 1 was expected"):
        text_labels.read_emoji_mapping(write(path, "0\t❤\t_red_heart_\t\n2\t🔥\t_fire_\t\n"))
    with pytest.raises(DataError, match=r"us_mapping\.txt:1: expected 3 tab-separated fields"):
        text_labels.read_emoji_mapping(write(path, "0 ❤ _red_heart_\n"))
