"""The one exception type for problems the user can fix (flags, config, files, workdir).

Every command (`train.py`, `jcaps.evaluate`, `jcaps.predict`, `jcaps.interpret`,
`jcaps.params`) prints a `UserError` as `error: <message>` and its hint on stderr and exits
with status 2, without a traceback (`JCAPS_DEBUG=1` shows it); anything else is a bug and keeps
its traceback (`jcaps.cli.run`). This module imports nothing, so every layer may raise it.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix. `str(error)` is the one-line message (what, and where: the
    flag, config key, file and line, or workdir); `hint` says what to do about it (or None)."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class ConfigError(UserError, ValueError):
    """A config value out of its range or of the wrong type, naming the key and the value."""
