"""Readers of the time series and image formats (`.ts`, `idx`): good files parse exactly; every bad
file names the file and, for `.ts`, the line."""
import gzip

import numpy as np
import pytest

from jcaps.data.errors import DataError
from jcaps.data.readers import idx, ts


def write(path, text):
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


# ---------------------------------------------------------------------------------------------
# .ts
# ---------------------------------------------------------------------------------------------

HEADER = [
    "@problemName Toy",
    "@timeStamps false",
    "@missing false",
    "@univariate false",
    "@dimensions 2",
    "@equalLength true",
    "@seriesLength 3",
    "@classLabel true b a c",
    "@data",
]
GOOD = "1,2,3:4,5,6:a"


def write_ts(tmp_path, lines, name="Toy_TRAIN.ts"):
    return write(tmp_path / name, "\n".join(lines) + "\n")


def test_ts_equal_length_multivariate(tmp_path):
    path = write_ts(tmp_path, ["# A toy problem.", "#", *HEADER,
                               "1,2,3:4,5,6:a", "-1.5,.25,1e-3:7.,+8,9E1:b", "", "0,0,0:1,1,1:c"])
    parsed = ts.read_ts(path)
    assert len(parsed.series) == 3
    np.testing.assert_array_equal(parsed.series[0], [[1, 4], [2, 5], [3, 6]])
    np.testing.assert_array_equal(parsed.series[1], np.array([[-1.5, 7], [0.25, 8], [1e-3, 90]], np.float32))
    assert all(series.dtype == np.float32 and series.shape == (3, 2) for series in parsed.series)
    assert parsed.labels == ["a", "b", "c"]
    assert parsed.lines == [12, 13, 15]
    assert parsed.class_labels == ("b", "a", "c")
    assert (parsed.num_channels, parsed.equal_length, parsed.series_length) == (2, True, 3)
    assert parsed.attributes == {"problemname": "Toy", "timestamps": "false", "missing": "false", "univariate": "false",
                             "dimensions": "2", "equallength": "true", "serieslength": "3",
                             "classlabel": "true b a c"}


def test_ts_univariate_without_dimensions_crlf_case_blank_lines_and_comments(tmp_path):
    text = ("\ufeff#\ufeff# A comment with a byte-order mark\r\n"
            "@PROBLEMNAME Toy \r\n"
            "@timestamps FALSE\t\r\n"
            "\r\n"
            "@Univariate true\r\n"
            "@classlabel TRUE 1 2\r\n"
            "@DATA\r\n"
            "0.5,1.5, 2.5 :2  \r\n"
            "# a comment among the examples\r\n"
            "   \r\n"
            "3,4,5:1\r\n")
    parsed = ts.read_ts(write(tmp_path / "Uni_TEST.ts", text))
    np.testing.assert_array_equal(parsed.series[0], [[0.5], [1.5], [2.5]])
    np.testing.assert_array_equal(parsed.series[1], [[3], [4], [5]])
    assert parsed.labels == ["2", "1"]
    assert parsed.lines == [8, 11]
    assert parsed.class_labels == ("1", "2")
    # Without @equalLength, the data decide.
    assert (parsed.num_channels, parsed.equal_length, parsed.series_length) == (1, True, 3)


def test_ts_unequal_lengths(tmp_path):
    header = [line.replace("@equalLength true", "@equalLength false") for line in HEADER if "seriesLength" not in line]
    parsed = ts.read_ts(write_ts(tmp_path, [*header, "1,2,3:4,5,6:a", "7:8:b"]))
    assert [series.shape for series in parsed.series] == [(3, 2), (1, 2)]
    assert (parsed.equal_length, parsed.series_length) == (False, None)
    # Without @equalLength, unequal data are unequal length.
    header = [line for line in header if "equalLength" not in line]
    parsed = ts.read_ts(write_ts(tmp_path, [*header, "1,2,3:4,5,6:a", "7:8:b"]))
    assert (parsed.equal_length, parsed.series_length) == (False, None)


@pytest.mark.parametrize("bad_line, problem", [
    ("1,2,3:a", r"found 1 channel\(s\), but @dimensions is 2"),
    ("1,2,3:4,5,6:7,8,9:a", r"found 3 channel\(s\), but @dimensions is 2"),
    ("1,2,3,4,5,6", r"expected channels and a class label separated by ':', found no ':'"),
    ("1,2:4,5:a", r"found 2 time steps, but @seriesLength is 3"),
    ("1,2,3:4,5:a", r"channel 2 has 2 values, but channel 1 has 3"),
    ("1,x,3:4,5,6:a", r"channel 1, value 2: 'x' is not a decimal number"),
    ("1,2,3:4,5,inf:a", r"channel 2, value 3: 'inf' is not a decimal number"),
    ("1,2,3:(0,1),5:a", r"channel 2, value 1: '\(0' is not a decimal number"),
    ("1,2,3:4,NaN,6:a", r"channel 2, value 2: missing value 'NaN' \(missing values are not supported\)"),
    ("1,2,3:4,5,?:a", r"channel 2, value 3: missing value '\?'"),
    ("1,,3:4,5,6:a", r"channel 1, value 2: empty value"),
    ("1,2,3:4,5,6,:a", r"channel 2, value 4: empty value"),
    ("1,2,3::a", r"channel 2 is empty"),
    ("1e39,2,3:4,5,6:a", r"channel 1, value 1: '1e39' is too large for float32"),
    ("1,2,3:4,5,6:d", r"class label 'd' is not in @classLabel \(b a c\)"),
    ("1,2,3:4,5,6:", r"class label '' is not in @classLabel"),
    ("@dimensions 2", r"header line after @data \(line 9\)"),
])
def test_ts_bad_example_names_file_line_and_problem(tmp_path, bad_line, problem):
    path = write_ts(tmp_path, [*HEADER, GOOD, bad_line, GOOD])  # the bad example is on line 11
    with pytest.raises(DataError, match=rf"Toy_TRAIN\.ts:11: {problem}") as error:
        ts.read_ts(path)
    assert error.value.line == 11


def replace_header(old, *new):
    """HEADER with the line starting with `old` replaced by `new` (none: removed)."""
    index = next(index for index, line in enumerate(HEADER) if line.startswith(old))
    return [*HEADER[:index], *new, *HEADER[index + 1:]]


@pytest.mark.parametrize("header, line, problem", [
    (replace_header("@classLabel", "@targetLabel true"), 8, r"@targetLabel: regression files are not supported"),
    (replace_header("@classLabel", "@classLabel false"), 8,
     r"@classLabel false: only classification files \(@classLabel true <labels>\) are supported"),
    (replace_header("@classLabel", "@classLabel"), 8, r"@classLabel: only classification files"),
    (replace_header("@classLabel"), 8, r"no @classLabel line before @data; only classification files"),
    (replace_header("@classLabel", "@classLabel true"), 8, r"@classLabel true names no class labels"),
    (replace_header("@classLabel", "@classLabel true a b a"), 8, r"class label 'a' repeats in @classLabel"),
    (replace_header("@timeStamps", "@timeStamps true"), 2, r"@timeStamps true: timestamped series are not supported"),
    (replace_header("@dimensions", "@dimensions two"), 5, r"@dimensions must be a positive integer, not 'two'"),
    (replace_header("@seriesLength", "@seriesLength 0"), 7, r"@seriesLength must be a positive integer, not '0'"),
    (replace_header("@equalLength", "@equalLength yes"), 6, r"@equalLength must be true or false, not 'yes'"),
    (replace_header("@univariate", "@univariate true"), 5, r"@dimensions 2 contradicts @univariate true"),
    (replace_header("@missing", "@missing false", "@MISSING false"), 4, r"@MISSING repeats line 3"),
    (replace_header("@missing", "missing false"), 3,
     r"expected a header line \(@keyword value\) or @data before the examples"),
    (replace_header("@missing", "@"), 3, r"no keyword after '@'"),
])
def test_ts_bad_header_names_file_line_and_problem(tmp_path, header, line, problem):
    path = write_ts(tmp_path, [*header, GOOD])
    with pytest.raises(DataError, match=rf"Toy_TRAIN\.ts:{line}: {problem}") as error:
        ts.read_ts(path)
    assert error.value.line == line


def test_ts_timestamped_file_is_rejected_at_its_header(tmp_path):
    header = replace_header("@timeStamps", "@timeStamps true")
    path = write_ts(tmp_path, [*header, "(0,1),(1,2),(2,3):(0,4),(1,5),(2,6):a"])
    with pytest.raises(DataError, match=r"Toy_TRAIN\.ts:2: @timeStamps true: timestamped series are not supported"):
        ts.read_ts(path)


def test_ts_what_the_header_leaves_open_the_first_example_fixes(tmp_path):
    # @equalLength true without @seriesLength: the first example's length.
    path = write_ts(tmp_path, [*replace_header("@seriesLength"), "# first", GOOD, "1,2:4,5:a"])
    with pytest.raises(DataError, match=r"Toy_TRAIN\.ts:11: found 2 time steps, but the first example \(line 10\) "
                                        r"has 3"):
        ts.read_ts(path)
    # Multivariate without @dimensions: the first example's channel count.
    path = write_ts(tmp_path, [*replace_header("@dimensions"), GOOD, "1,2,3:a"])
    with pytest.raises(DataError, match=r"Toy_TRAIN\.ts:10: found 1 channel\(s\), but the first example \(line 9\) "
                                        r"has 2"):
        ts.read_ts(path)
    assert ts.read_ts(write_ts(tmp_path, [*replace_header("@dimensions"), GOOD])).num_channels == 2
    # Univariate without @dimensions: one channel.
    header = [line for line in replace_header("@univariate", "@univariate true") if "dimensions" not in line]
    path = write_ts(tmp_path, [*header, GOOD])
    with pytest.raises(DataError, match=r"Toy_TRAIN\.ts:9: found 2 channel\(s\), but @univariate true means 1"):
        ts.read_ts(path)


def test_ts_without_data_line_or_examples(tmp_path):
    with pytest.raises(DataError, match=r"Toy_TRAIN\.ts: no @data line") as error:
        ts.read_ts(write_ts(tmp_path, HEADER[:-1]))
    assert error.value.line is None
    with pytest.raises(DataError, match=r"Toy_TRAIN\.ts:9: no examples after @data"):
        ts.read_ts(write_ts(tmp_path, [*HEADER, "", "# nothing"]))
    with pytest.raises(DataError, match=r"Toy_TRAIN\.ts: no @data line"):
        ts.read_ts(write(tmp_path / "Toy_TRAIN.ts", ""))


def test_ts_invalid_utf8_names_the_line(tmp_path):
    path = write(tmp_path / "Toy_TRAIN.ts", "\n".join(HEADER).encode() + b"\n1,2,3:4,5,6:\xe9\n")
    with pytest.raises(DataError, match=r"Toy_TRAIN\.ts:10: not valid UTF-8"):
        ts.read_ts(path)


# ---------------------------------------------------------------------------------------------
# idx
# ---------------------------------------------------------------------------------------------

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int16): 0x0B, np.dtype(np.float32): 0x0D}


def idx_bytes(array):
    """An idx file's bytes for `array`: magic number, big-endian int32 sizes, big-endian values."""
    array = np.asarray(array)
    magic = bytes([0, 0, IDX_CODES[array.dtype], array.ndim])
    sizes = np.array(array.shape, ">i4").tobytes()
    return magic + sizes + array.astype(array.dtype.newbyteorder(">")).tobytes()


IMAGES = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4) * 10
LABELS = np.array([7, 0], np.uint8)


@pytest.mark.parametrize("compress", [False, True])
def test_idx_reads_plain_and_gzipped_files(tmp_path, compress):
    data = idx_bytes(IMAGES)
    path = write(tmp_path / "images-idx3-ubyte.gz", gzip.compress(data) if compress else data)
    images = idx.read_idx(path)
    assert images.dtype == np.uint8
    np.testing.assert_array_equal(images, IMAGES)
    images.flat[0] = 1  # a writable copy, not a view of the file's bytes


@pytest.mark.parametrize("array", [np.array([[-2, 300], [7, -32768]], np.int16), np.array([1.5, -0.25], np.float32)])
def test_idx_reads_other_types_in_native_byte_order(tmp_path, array):
    values = idx.read_idx(write(tmp_path / "values-idx", idx_bytes(array)))
    assert values.dtype == array.dtype and values.dtype.isnative
    np.testing.assert_array_equal(values, array)


@pytest.mark.parametrize("data, problem", [
    (b"\x01\x00\x08\x01" + idx_bytes(LABELS)[4:],
     r"not an idx file: magic number 0x01000801 does not start with 0x0000"),
    (b"\x00", r"not an idx file: magic number 0x00 does not start"),
    (b"\x00\x00\x0a\x01" + idx_bytes(LABELS)[4:], r"unknown idx type code 0x0a \(known: 0x08, 0x09, 0x0b"),
    (b"\x00\x00\x08\x00", r"idx file without dimensions"),
    (idx_bytes(IMAGES)[:10], r"truncated header: 3 dimension sizes need 16 bytes, the file has 10"),
    (idx_bytes(IMAGES)[:-1],
     r"the header promises \(2, 3, 4\) values of type uint8 \(24 bytes\), but the payload has 23 bytes"),
    (idx_bytes(IMAGES) + b"\x00", r"the header promises .* \(24 bytes\), but the payload has 25 bytes"),
    (b"\x00\x00\x08\x01\xff\xff\xff\xff", r"negative dimension size in \(-1,\)"),
    # mtime=0: the same bytes in every process (pytest-xdist workers must collect the same ids)
    (gzip.compress(idx_bytes(IMAGES), mtime=0)[:-6], r"broken gzip data"),
])
def test_idx_bad_file_names_the_file(tmp_path, data, problem):
    path = write(tmp_path / "t10k-images-idx3-ubyte", data)
    with pytest.raises(DataError, match=rf"t10k-images-idx3-ubyte: {problem}") as error:
        idx.read_idx(path)
    assert error.value.line is None


def test_idx_images_as_sequences_of_rows(tmp_path):
    images = write(tmp_path / "images-idx3-ubyte.gz", gzip.compress(idx_bytes(IMAGES)))
    labels = write(tmp_path / "labels-idx1-ubyte", idx_bytes(LABELS))
    series, classes = idx.read_idx_images_as_sequences(images, labels)
    assert series.shape == (2, 3, 4) and series.dtype == np.float32  # [n, rows = time steps, cols = features]
    np.testing.assert_allclose(series, IMAGES / 255.0, rtol=1e-6)
    assert series.max() == 230 / 255 and series.min() == 0
    assert classes.dtype == np.int32
    np.testing.assert_array_equal(classes, [7, 0])


def test_idx_images_as_sequences_checks_kinds_and_counts(tmp_path):
    images = write(tmp_path / "images-idx3-ubyte", idx_bytes(IMAGES))
    labels = write(tmp_path / "labels-idx1-ubyte", idx_bytes(np.array([1, 2, 3], np.uint8)))
    with pytest.raises(DataError, match=r"images-idx3-ubyte: has 2 images but .*labels-idx1-ubyte has 3 labels"):
        idx.read_idx_images_as_sequences(images, labels)
    with pytest.raises(DataError, match=r"labels-idx1-ubyte: expected uint8 images \[n, rows, cols\] \(magic "
                                        r"0x00000803\), found uint8 of 1 dimension\(s\)"):
        idx.read_idx_images_as_sequences(labels, labels)
    floats = write(tmp_path / "floats-idx1", idx_bytes(np.array([1.0, 2.0], np.float32)))
    with pytest.raises(DataError, match=r"floats-idx1: expected uint8 labels \[n\] \(magic 0x00000801\), found "
                                        r"float32 of 1 dimension\(s\)"):
        idx.read_idx_images_as_sequences(images, floats)
