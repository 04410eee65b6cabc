"""How long the commands take to start: each `--help`, and `jcaps predict` on one text against a
bare `python -c "import jax"`.

    python -m benchmarks.startup --out DIR [--repeats 7] [--tiny]

Trains the fastText `:smoke` config (generated data) into a temporary workdir, runs `jcaps predict`
on it once to fill a compilation cache of its own (a user's second call finds its programs
compiled), then times, in turns so that a machine whose speed drifts slows all
alike, `--repeats` runs of each command line: `python -c "import jax"`, `jcaps --help`,
`jcaps COMMAND --help` for every command, and `jcaps predict --workdir DIR/workdir --text ...`.
Each is a new process, timed from its start to its exit.

Writes DIR/results.json: {"seconds": {name: median seconds}, "range": {name: [lowest, highest]},
"predict_over_import_jax": the median of the paired ratios predict / import jax, with their
lowest and highest, "_run": `recording.provenance.run_metadata`}. `--tiny`: 2 repeats (the tests
run it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from recording.provenance import run_metadata
from recording.results import write_results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = ("train", "evaluate", "predict", "interpret", "params")


def jcaps(*args: str) -> list[str]:
    """The `jcaps` command line of `args`, run by this interpreter (the console script's own code)."""
    return [sys.executable, "-c", "from jcaps.command import main; main()", *args]


def seconds(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tiny", action="store_true", help="2 repeats")
    args = parser.parse_args()
    repeats = 2 if args.tiny else args.repeats
    metadata = run_metadata(args.tiny)
    scratch = tempfile.mkdtemp(prefix="jcaps_startup_")
    workdir, cache = os.path.join(scratch, "workdir"), os.path.join(scratch, "compilation_cache")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run(jcaps("train", "--config", "fasttext_ag_news:smoke", "--workdir", workdir,
                         f"--config.data.cache_dir={os.path.join(scratch, 'data')}", "--config.train.progress=none"),
                   cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    predict = jcaps("predict", "--workdir", workdir, "--text", "the striker scored in the final",
                    f"--compilation_cache={cache}")
    lines = {"import jax": [sys.executable, "-c", "import jax"], "jcaps --help": jcaps("--help"),
             **{f"jcaps {command} --help": jcaps(command, "--help") for command in COMMANDS},
             "jcaps predict (one text)": predict}
    seconds(predict, env)  # fills the compilation cache
    measured: dict[str, list[float]] = {name: [] for name in lines}
    for _ in range(repeats):
        for name, command in lines.items():
            measured[name].append(seconds(command, env))
    ratios = [p / j for p, j in zip(measured["jcaps predict (one text)"], measured["import jax"])]
    shutil.rmtree(scratch)
    write_results(args.out, {
        "seconds": {name: statistics.median(values) for name, values in measured.items()},
        "range": {name: [min(values), max(values)] for name, values in measured.items()},
        "predict_over_import_jax": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "repeats": repeats,
        "_run": metadata,
    })


if __name__ == "__main__":
    main()
