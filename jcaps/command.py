"""The `jcaps` command: `jcaps COMMAND [FLAGS]` runs `python -m MODULE [FLAGS]` of that command.

jcaps train --config fasttext_ag_news:smoke --workdir W
jcaps evaluate --workdir W
jcaps predict --workdir W --text "..."
jcaps interpret --workdir W --limit 8
jcaps params --config cccapsnet_ag_news
jcaps configs
"""

from __future__ import annotations

import runpy
import sys

from jcaps.cli import COMMAND_MODULES

USAGE = (
    "usage: jcaps COMMAND [FLAGS]   (jcaps COMMAND --help lists its flags)\n\ncommands:\n"
    "  train      train a model: jcaps train --config NAME[:ARG] --workdir DIR\n"
    "  evaluate   evaluate a trained workdir on its test split\n"
    "  predict    classify texts with a trained workdir\n"
    "  interpret  explain a trained model's predictions and measure the explanations\n"
    "  params     count a config's parameters without training it\n"
    "  configs    list the shipped configs, which --config takes by name\n"
)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help", "help"):
        print(USAGE, end="")
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    command = sys.argv[1]
    if command not in COMMAND_MODULES:
        print(
            f"jcaps: unknown command {command!r}; one of {', '.join(COMMAND_MODULES)} (see jcaps --help)",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.argv = [f"jcaps {command}", *sys.argv[2:]]
    runpy.run_module(COMMAND_MODULES[command], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
