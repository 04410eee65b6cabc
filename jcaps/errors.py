"""The one exception type for problems the user can fix (flags, config, files, workdir).

Every command (`train.py`, `jcaps.evaluate`, `jcaps.predict`, `jcaps.interpret`,
`jcaps.params`) prints a `UserError` as `error: <message>` and its hint on stderr and exits
with status 2, without a traceback (`JCAPS_DEBUG=1` shows it); anything else is a bug and keeps
its traceback (`jcaps.cli.run`). This module imports nothing of jcaps, so every layer may raise
it; `writing(path)` turns a failed write (a full disk) into one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil


class UserError(Exception):
    """A problem the user can fix. `str(error)` is the one-line message (what, and where: the
    flag, config key, file and line, or workdir); `hint` says what to do about it (or None)."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class ConfigError(UserError, ValueError):
    """A config value out of its range or of the wrong type, naming the key and the value."""


class WriteFailed(UserError):
    """A file could not be written (a full disk, a read-only or vanished filesystem)."""


# What to do about a failed write of a training: nothing of the workdir is half-written that a
# rerun would trust (checkpoints are committed whole, metrics are rewound to the last one).
RERUN_HINT = (
    "free some space (or move the workdir to a larger disk) and run the same command again: it resumes "
    "from the last checkpoint saved"
)


def is_full_disk(error: BaseException) -> bool:
    """ENOSPC (or a disk quota), as an OSError or in the message of a library that reports it
    as another error (tensorstore, array_record)."""
    message = str(error)
    return (
        getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        or "os_error_code='28'" in message
        or "No space left on device" in message
    )


def failure_reason(error: BaseException) -> str:
    """Why a write failed, in words: "no space left on the device" for a full disk, else the
    OSError's words or the message's first 200 characters."""
    message = str(error)
    if is_full_disk(error):
        return "no space left on the device"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return " ".join(message.split())[:200]


def free_space(path: str) -> str:
    """The free space of the filesystem holding `path` (or its nearest existing parent)."""
    directory = path
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    try:
        free = float(shutil.disk_usage(directory).free)
    except OSError:
        return "unknown"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if free < 1024 or unit == "GiB":
            return f"{free:.0f} {unit}" if unit == "bytes" else f"{free:.1f} {unit}"
        free /= 1024
    raise AssertionError  # the loop returns at GiB


def write_failed(what: str, path: str, error: BaseException, hint: str = RERUN_HINT) -> WriteFailed:
    """The one-line `WriteFailed` of `error`: "cannot write WHAT PATH: why (X free there)"."""
    return WriteFailed(
        f"cannot write {what} {path}: {failure_reason(error)} ({free_space(path)} free there)", hint=hint
    )


@contextlib.contextmanager
def writing(what: str, path: str, hint: str = RERUN_HINT, full_disk_only: bool = False):
    """Raises the `write_failed` of any OSError of the block's writes to `path` (WHAT names it:
    "the metrics", "the lock of the workdir"); with `full_disk_only`, of a full disk alone, for a
    block that reads too (preparing data), whose other errors are its own."""
    try:
        yield
    except Exception as error:
        if is_full_disk(error) or (isinstance(error, OSError) and not full_disk_only):
            raise write_failed(what, path, error, hint) from error
        raise
