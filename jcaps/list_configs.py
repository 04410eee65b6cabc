"""jcaps configs: the shipped configs, each with the first paragraph of its docstring.

Each name is what `jcaps train --config NAME[:ARG]` and `jcaps params --config NAME` take; its
file's docstring gives the exact command, the variants (`:smoke`, ablations), the runtime and the
expected metric.
"""

from __future__ import annotations

import shutil
import sys
import textwrap

from jcaps.train.config import shipped_configs, shipped_configs_dir


def listing(width: int) -> str:
    """Every shipped config as `NAME  SUMMARY`, the summaries wrapped to `width` columns."""
    summaries = shipped_configs()
    column = max(map(len, summaries)) + 2
    lines = [f"the configs shipped with jcaps ({shipped_configs_dir()}):"]
    for name, summary in summaries.items():
        wrapped = textwrap.wrap(summary, max(width - column, 40), break_on_hyphens=False) or [""]
        lines.append(f"{name:<{column}}{wrapped[0]}")
        lines.extend(" " * column + line for line in wrapped[1:])
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:] and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return
    if sys.argv[1:]:
        print(f"error: jcaps configs takes no arguments, got {' '.join(sys.argv[1:])}", file=sys.stderr)
        sys.exit(2)
    print(listing(shutil.get_terminal_size().columns))


if __name__ == "__main__":
    main()
