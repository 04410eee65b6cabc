"""The XLA settings of the test suite (`tests/command_env.py`), measured: the suite compiles
thousands of small programs, most of them once, so it trades run time for compile time.

    python -m benchmarks.suite_xla_settings --out DIR [--files tests/models/test_outputs.py,...]
        [--configs cccapsnet_ag_news.py,br_reuters.py,...] [--tiny]

1. Test files under each candidate XLA_FLAGS (`FLAG_SETTINGS`: the suite's, XLA's MLIR fusion
   emitters instead of the classic loop emitters, XLA's default backend optimisation level
   instead of -O0), each run as
   `pytest -q -n 0 FILES` in a fresh process: the wall seconds of each.
2. Each `:smoke` config of `--configs` trained in a fresh process under the suite's flags, once
   as it is and once with its train and eval steps compiled at -O2
   (`compiler_options={"xla_backend_optimization_level": 2}`, what
   `tests.command_env.O2_COMPILED_CONFIGS` gets): the wall seconds of each.

Writes DIR/results.json: {"files": {"<setting>": s}, "training": {"<config>": {"suite": s,
"o2": s}}, "_run": {...}}. A flag the installed XLA does not accept is recorded as null.
`--tiny` times one small test and one config (a check that it runs).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from recording.provenance import run_metadata
from recording.results import write_results
from tests.command_env import SUITE_XLA_FLAGS, TEST_DEVICES, suite_xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAG_SETTINGS = {
    "suite": " ".join(SUITE_XLA_FLAGS),
    "fusion_emitters": "--xla_backend_optimization_level=0",
    "default_level": "--xla_cpu_use_fusion_emitters=false",
}
# Trains configs/CONFIG:smoke in WORKDIR with the train and eval steps' compiler options given.
TRAIN = """
import sys
from jcaps.train import loop
from jcaps.train.config import load
config_name, workdir, level = sys.argv[1:]
options = None if level == "suite" else {"xla_backend_optimization_level": 2}
loop.train_and_evaluate(load(f"configs/{config_name}:smoke"), workdir, compiler_options=options)
"""


def timed(command: list[str], xla_flags: str) -> float | None:
    """Wall seconds of `command` under `xla_flags`; None when it fails (a flag XLA refuses)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stderr[-2000:], file=sys.stderr)
        return None
    return seconds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--files", default="tests/models/test_outputs.py,tests/ops/test_capsules.py")
    parser.add_argument("--configs", default="cccapsnet_ag_news.py,br_reuters.py,icapsnet_long_ag_news.py,sgm_reuters.py")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)
    if args.tiny:
        args.files, args.configs = "tests/test_layers.py::test_the_circle_finder_finds_a_circle", "fasttext_ag_news.py"
    load = os.getloadavg()[0]
    results: dict = {"files": {}, "training": {}}
    for setting, flags in FLAG_SETTINGS.items():
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *args.files.split(",")]
        # on the suite's test devices, as its test processes run
        results["files"][setting] = timed(command, f"--xla_force_host_platform_device_count={TEST_DEVICES} {flags}")
        print(setting, results["files"][setting], flush=True)
        write_results(args.out, {**results, "_run": run_metadata(args.tiny, load)})
    import tempfile

    for config in args.configs.split(","):
        row = results["training"].setdefault(config, {})
        for level in ("suite", "o2"):
            with tempfile.TemporaryDirectory() as folder:
                row[level] = timed([sys.executable, "-c", TRAIN, config, os.path.join(folder, "w"), level],
                                   suite_xla_flags())
            print(config, level, row[level], flush=True)
            write_results(args.out, {**results, "_run": run_metadata(args.tiny, load)})


if __name__ == "__main__":
    main()
