"""`idx`: MNIST's `train-images-idx3-ubyte[.gz]`, `train-labels-idx1-ubyte[.gz]`, ..."""

import gzip
import os
import zlib

import numpy as np

from jcaps.data.errors import DataError
from jcaps.data.readers.lines import FilePath

# The third byte of the magic number: the type of the values, all big-endian.
_IDX_DTYPES: dict[int, np.dtype] = {
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
        raise DataError(
            path,
            None,
            f"truncated header: {num_dimensions} dimension sizes need {header_size} bytes, the file has {len(data)}",
        )
    shape = tuple(int(size) for size in np.frombuffer(data, ">i4", num_dimensions, offset=4))
    if min(shape) < 0:
        raise DataError(path, None, f"negative dimension size in {shape}")
    dtype = _IDX_DTYPES[code]
    expected_size = int(np.prod(shape)) * dtype.itemsize
    payload_size = len(data) - header_size
    if payload_size != expected_size:
        raise DataError(
            path,
            None,
            f"the header promises {shape} values of type {dtype.newbyteorder('=')} "
            f"({expected_size} bytes), but the payload has {payload_size} bytes",
        )
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
    for path, array, magic, what in (
        (images_path, images, _IDX_IMAGES_MAGIC, "images [n, rows, cols]"),
        (labels_path, labels, _IDX_LABELS_MAGIC, "labels [n]"),
    ):
        if array.dtype != np.uint8 or array.ndim != magic & 0xFF:
            raise DataError(
                path,
                None,
                f"expected uint8 {what} (magic 0x{magic:08x}), found {array.dtype} of {array.ndim} dimension(s)",
            )
    if len(images) != len(labels):
        raise DataError(
            images_path, None, f"has {len(images)} images but {os.fspath(labels_path)} has {len(labels)} labels"
        )
    return images.astype(np.float32) / 255.0, labels.astype(np.int32)
