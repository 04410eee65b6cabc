"""The command-line reference, generated from the argument parsers: the directive

    ```{command-help} python -m jcaps.evaluate
    ```

shows what `COMMAND --help` prints. The commands (train.py, `python -m jcaps.X`) parse their
flags with absl: their help is `--helpfull` cut to the flags jcaps defines (those of absl,
orbax and tensorflow_datasets left out). The speed suite and the studies (`python -m benchmarks.X`,
`python -m studies.X`) parse theirs with argparse: they print their `--help` in one Python
process, so JAX is imported once for all of them. Every command
named in the pages runs once per build, several at a time.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRECTIVE = re.compile(r"^```\{command-help\}\s+(.+?)\s*$", re.M)
# The packages whose modules are argparse commands.
ARGPARSE_PACKAGES = ("benchmarks.", "studies.")
# Prints {module: its --help} for the argparse modules named in argv.
ARGPARSE_HELP = r"""
import contextlib, io, json, runpy, sys
helps = {}
for module in sys.argv[1:]:
    out = io.StringIO()
    sys.argv = [module, "--help"]
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit:
            pass
    helps[module] = out.getvalue()
print(json.dumps(helps))
"""
_helps: dict[str, str] = {}


def _environment() -> dict:
    return dict(os.environ, JAX_PLATFORMS="cpu", COLUMNS="100", PYTHONPATH=ROOT)


def _argv(command: str) -> list[str]:
    words = command.split()
    if words[0] != "python":
        raise ValueError(f"command-help: {command!r} does not start with 'python'")
    return [sys.executable, *words[1:]]


def _absl_help(command: str) -> str:
    """`--helpfull` of an absl command, with the flags of absl's own modules left out."""
    result = subprocess.run([*_argv(command), "--helpfull"], cwd=ROOT, env=_environment(), capture_output=True,
                            text=True, check=False, timeout=300)
    text = result.stdout or result.stderr
    # absl's help flags exit with status 1 once they have printed the help.
    if result.returncode not in (0, 1) or "\nflags:\n" not in text:
        raise RuntimeError(f"command-help: {command} --helpfull failed:\n{result.stderr[-2000:]}")
    description, _, flags_text = text.partition("\nflags:\n")
    sections = re.split(r"\n(?=\S[^\n]*:\n)", "\n" + flags_text)
    sections = [s.strip("\n").replace(ROOT + os.sep, "") for s in sections if s.strip()]
    # jcaps' own flags: those of the command's file and of the jcaps modules it imports, not
    # those of absl, orbax or tensorflow_datasets.
    kept = [s for s in sections if s.startswith(("jcaps", "train.py"))]
    return description.rstrip() + "\n\nflags:\n\n" + "\n\n".join(kept) + "\n"


def _argparse_helps(modules: list[str]) -> dict[str, str]:
    result = subprocess.run([sys.executable, "-c", ARGPARSE_HELP, *modules], cwd=ROOT, env=_environment(),
                            capture_output=True, text=True, check=False, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"command-help: the speed suite's or studies' --help failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _module(command: str) -> str | None:
    """The argparse module `command` runs (`python -m benchmarks.NAME`, `python -m studies.NAME`), else None."""
    words = command.split()
    return words[2] if len(words) == 3 and words[1] == "-m" and words[2].startswith(ARGPARSE_PACKAGES) else None


def collect(commands: list[str]) -> dict[str, str]:
    """{command: its help} for `commands`, run several at a time."""
    argparse_commands = [c for c in commands if _module(c)]
    absl = [c for c in commands if not _module(c)]
    helps = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        argparse_future = (pool.submit(_argparse_helps, [_module(c) for c in argparse_commands])
                           if argparse_commands else None)
        absl_futures = {command: pool.submit(_absl_help, command) for command in absl}
        for command, future in absl_futures.items():
            helps[command] = future.result()
        if argparse_future is not None:
            by_module = argparse_future.result()
            for command in argparse_commands:
                helps[command] = by_module[_module(command)]
    return helps


def _prefetch(app) -> None:
    commands = []
    for name in sorted(os.listdir(app.srcdir)):
        if name.endswith(".md"):
            with open(os.path.join(app.srcdir, name), encoding="utf-8") as f:
                commands += DIRECTIVE.findall(f.read())
    _helps.update(collect(sorted(set(commands))))


class CommandHelp(SphinxDirective):
    required_arguments = 1
    final_argument_whitespace = True

    def run(self):
        command = self.arguments[0].strip()
        if command not in _helps:
            _helps.update(collect([command]))
        text = _helps[command]
        if not text.strip():
            raise self.error(f"command-help: {command} --help printed nothing")
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def setup(app):
    app.add_directive("command-help", CommandHelp)
    app.connect("builder-inited", _prefetch)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
