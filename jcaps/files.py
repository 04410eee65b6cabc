"""Writing files in folders that may hold someone else's links: no write follows a symbolic link.

A workdir (or an explanation run's `--out`) may come from someone else, and a link in it, a
`report.html` or a `.lock` pointing at the user's `.bashrc`, must not turn a write into one
outside it. So every file jcaps writes into one is either

- replaced (`replace_file`, `replacing`): written to a new temporary file of a random name in the
  same folder (`O_EXCL`: never an existing file or link) and renamed over the name, which replaces
  a link itself, never its target; or
- opened to append or lock with `open(path, mode, opener=no_follow)`: `O_NOFOLLOW`, so a link at
  the name is refused (`LinkRefused`, one line) instead of followed;

and a folder jcaps writes into inside one (`refuse_linked_folder`) must not be a link either.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from jcaps.errors import UserError


class LinkRefused(UserError):
    """A name jcaps would write through is a symbolic link."""

    def __init__(self, path: str, what: str = "file"):
        super().__init__(
            f"{path} is a symbolic link: jcaps writes no {what} through a link (a folder from someone else?)",
            hint="remove the link, or pass another folder",
        )


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """A new file to write, which replaces `path` (a file or a link, never a link's target) when
    the block ends, fsynced; nothing is replaced when the block raises. `mode`: "w" or "wb"."""
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(descriptor, mode, encoding=None if "b" in mode else encoding) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def replace_file(path: str | os.PathLike, content: str | bytes) -> None:
    """Writes `content` as `path`, replacing it whole (`replacing`)."""
    with replacing(path, "wb" if isinstance(content, bytes) else "w") as file:
        file.write(content)


def no_follow(path: str, flags: int) -> int:
    """The `opener` of `open` that never opens through a link: a link at `path` raises
    `LinkRefused` (`open(path, "a", opener=no_follow)`)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise LinkRefused(path) from None
        raise


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of the file at `path`, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def refuse_linked_folder(path: str | os.PathLike) -> None:
    """Raises `LinkRefused` when the folder `path` (inside a workdir) is a symbolic link."""
    if os.path.islink(path):
        raise LinkRefused(os.fspath(path), "folder's files")
