"""The error every data reader raises for bad input: it names the file, the line and the problem."""

import os

from jcaps.errors import UserError


class DataError(UserError, ValueError):
    """Bad input data, located as `"{path}:{line}: {problem}"` (or `"{path}: {problem}"`).

    Attributes:
        path: the file, as a string.
        line: the 1-based line number, a description such as `"example 12"`, or None when the
            problem concerns the whole file.
        problem: what is wrong, e.g. `"expected 3 columns, found 2"`.
    """

    def __init__(self, path: str | os.PathLike, line: int | str | None, problem: str):
        # The arguments themselves go to ValueError so the error pickles (e.g. across worker
        # processes) and rebuilds with the same fields.
        ValueError.__init__(self, os.fspath(path), line, problem)
        self.hint = None
        self.path = os.fspath(path)
        self.line = line
        self.problem = problem

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.problem}"
        return f"{self.path}:{self.line}: {self.problem}"
