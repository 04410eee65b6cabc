"""One run at a time in a folder: a lock file held (`fcntl.flock`) for the length of the run.

Training holds WORKDIR/.lock, an explanation run its output folder's. The lock goes with the
process however it ends (`kill -9` included), so a stale lock file never blocks the next run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator

from jcaps.errors import UserError, writing
from jcaps.files import no_follow


class FolderInUse(UserError, RuntimeError):
    pass


@contextlib.contextmanager
def exclusive(folder: str, *, called: str, run: str, advice: str, hint: str, name: str = ".lock") -> Iterator[None]:
    """Holds FOLDER/NAME; a second run on the folder stops at once with `FolderInUse`: "FOLDER is
    in use by RUN (pid P on HOST); ADVICE". `called` is what a failed write calls the folder
    ("the workdir"), `hint` what to do then (the command's own words)."""
    path = os.path.join(folder, name)
    with writing(f"the lock of {called}", path, hint):
        # Opened under `writing` (so a full disk is named), then held by the `with` below.
        lock = open(path, "a+", encoding="utf-8", opener=no_follow)  # noqa: SIM115 (held below)
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise FolderInUse(f"{folder} is in use by {run} ({holder}); {advice}") from None
        with writing(f"the lock of {called}", path, hint):
            # Unbuffered: a write that fails leaves nothing for the file's close to fail on again.
            os.ftruncate(lock.fileno(), 0)
            os.pwrite(lock.fileno(), f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
