"""Folders that every pytest-xdist worker of a test session shares, and locks on them: what one
worker builds there (a trained workdir), the others reuse instead of building it again."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


def shared_folder(tmp_path_factory, name: str) -> Path:
    """TMP/NAME, TMP the session's base folder, which pytest-xdist's workers share as the parent
    of their own."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / name
    path.mkdir(exist_ok=True)
    return path


@contextlib.contextmanager
def locked(folder, names: list[str]):
    """Exclusive locks on FOLDER/.NAME.lock for every name (in sorted order, so two workers
    never wait on each other): one worker at a time builds or uses what NAME stands for."""
    with contextlib.ExitStack() as stack:
        for name in sorted(set(names)):
            lock = stack.enter_context(open(os.path.join(folder, f".{name}.lock"), "w"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
