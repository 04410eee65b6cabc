"""The two ends of `benchmarks/device_check.sh`: what machine it ran on, and what it measured.

    python -m benchmarks.device_summary environment OUT/environment.json --commit-file F --dry-run false
    python -m benchmarks.device_summary summary OUT --work WORK

`environment` writes the provenance of the check: `recording.provenance.run_metadata` (date,
cores, device, load), the commit (from F, which `device_check.sh --prepare` wrote where git was
at hand; from git otherwise), JAX's backend and version, jaxlib's, the CUDA plugin's and the
platform version JAX reports (CUDA's), and what nvidia-smi says of the GPU and its driver. Outside
a dry run it refuses a machine where JAX sees no GPU (exit 2), so no CPU figure can pass for a
GPU one.

`summary` reads what the steps left (WORK/steps.tsv: step, exit status, milliseconds; the files
in OUT and WORK) and writes OUT/ag_news.json (the training's test metrics and times) and
OUT/summary.json: each step's status and seconds, the GPU tests' counts, cuDNN against the scan,
every model's examples/s, compile time and fraction of the matmul ceiling in each dtype, and the
AG News accuracy, under "_run" the environment. It prints them as Markdown and exits 1 when a
step failed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

from recording.provenance import run_metadata

CUDA_PLUGINS = ("jax-cuda13-plugin", "jax-cuda12-plugin")
TRAINING_CONFIG = "configs/icapsnet_short_ag_news.py"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvidia_smi() -> str | None:
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def environment(commit_file: str, dry_run: bool) -> dict:
    import jax

    backend = jax.default_backend()
    if not dry_run and backend != "gpu":
        raise SystemExit(f"device_check.sh needs a GPU backend; JAX sees {backend!r} ({jax.devices()})")
    result = run_metadata(tiny=dry_run)
    if os.path.isfile(commit_file):
        with open(commit_file, encoding="utf-8") as f:
            result["commit"] = f.read().strip()
    plugins = {name: _version(name) for name in CUDA_PLUGINS if _version(name)}
    result.update({
        "dry_run": dry_run,
        "backend": backend,
        "devices": [str(device) for device in jax.devices()],
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "cuda_plugins": plugins,
        "platform_version": jax.devices()[0].client.platform_version,
        "nvidia_smi": _nvidia_smi(),
        "python": sys.version.split()[0],
    })
    return result


def _read_json(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _steps(work: str) -> dict:
    steps = {}
    path = os.path.join(work, "steps.tsv")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, status, milliseconds = line.rstrip("\n").split("\t")
                steps[name] = {"exit": int(status), "seconds": int(milliseconds) / 1000}
    return steps


def _test_counts(path: str) -> dict | None:
    """The totals of a JUnit XML report: tests, failures, errors, skipped."""
    if not os.path.isfile(path):
        return None
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    return {key: sum(int(suite.get(key, 0)) for suite in suites) for key in ("tests", "failures", "errors", "skipped")}


def _speed(results: dict | None) -> dict | None:
    if results is None:
        return None
    keys = ("train_examples_per_s", "eval_examples_per_s", "compile_s", "fraction_of_ceiling", "peak_bytes",
            "greedy_examples_per_s", "beam_examples_per_s", "batch_size", "length")
    return {
        "dtype": results.get("dtype"),
        "ceiling_flops": results["ceiling_flops"],
        "ceiling_size": results["ceiling_size"],
        "models": {name: {k: row[k] for k in keys if k in row} for name, row in results["models"].items()},
    }


def summary(out: str, work: str) -> dict:
    steps = _steps(work)
    evaluation = _read_json(os.path.join(work, "ag_news_test.json"))
    environment_file = _read_json(os.path.join(out, "environment.json")) or {}
    loop = ((_read_json(os.path.join(work, "loop", "results.json")) or {}).get("loop_efficiency") or {}).get(
        "icapsnet_short_ag_news", {}
    )
    loop_keys = (
        "run_examples_per_s",
        "step_examples_per_s",
        "loop_efficiency",
        "loop_efficiency_with_compiling",
        "training_wall_seconds",
    )
    ag_news = {
        "config": TRAINING_CONFIG + (":smoke" if environment_file.get("dry_run") else ""),
        "test": evaluation,
        "training_seconds": steps.get("ag_news_training", {}).get("seconds"),
        "evaluation_seconds": steps.get("ag_news_evaluation", {}).get("seconds"),
        **{key: loop.get(key) for key in loop_keys},
    }
    with open(os.path.join(out, "ag_news.json"), "w", encoding="utf-8") as f:
        json.dump(ag_news, f, indent=2)
    rnn_impl = _read_json(os.path.join(out, "rnn_impl.json"))
    rnn_keys = ("cudnn_ran", "scan_over_cudnn", "max_abs_output_difference", "scan", "cudnn")
    return {
        "steps": steps,
        "tests": _test_counts(os.path.join(out, "tests.xml")),
        "rnn_impl": None if rnn_impl is None else {k: rnn_impl.get(k) for k in rnn_keys},
        "run_all": {dtype: _speed(_read_json(os.path.join(out, f"run_all_{dtype}.json")))
                    for dtype in ("float32", "bfloat16")},
        "ag_news": ag_news,
        "_run": environment_file,
    }


def markdown(result: dict) -> str:
    lines = ["| step | exit | seconds |", "| --- | --- | --- |"]
    lines += [f"| {name} | {s['exit']} | {s['seconds']:.1f} |" for name, s in result["steps"].items()]
    lines += ["", f"tests: {result['tests']}", f"cuDNN against the scan: {result['rnn_impl']}", ""]
    lines += ["| model | dtype | train ex/s | eval ex/s | compile s | of ceiling |",
              "| --- | --- | --- | --- | --- | --- |"]
    for dtype, speed in result["run_all"].items():
        for name, row in (speed or {"models": {}})["models"].items():
            lines.append(f"| {name} | {dtype} | {row['train_examples_per_s']:.0f} | {row['eval_examples_per_s']:.0f} | "
                         f"{row['compile_s']:.1f} | {100 * row['fraction_of_ceiling']:.1f} % |")
    test = result["ag_news"]["test"] or {}
    lines += ["", (f"AG News ({result['ag_news']['config']}): test accuracy {test.get('accuracy')}, "
                   f"training {result['ag_news']['training_seconds']} s, loop efficiency "
                   f"{result['ag_news'].get('loop_efficiency')}")]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    env_parser = commands.add_parser("environment")
    env_parser.add_argument("path")
    env_parser.add_argument("--commit-file", required=True)
    env_parser.add_argument("--dry-run", choices=("true", "false"), required=True)
    summary_parser = commands.add_parser("summary")
    summary_parser.add_argument("out")
    summary_parser.add_argument("--work", required=True)
    args = parser.parse_args()
    if args.command == "environment":
        result = environment(args.commit_file, args.dry_run == "true")
        with open(args.path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
        return
    result = summary(args.out, args.work)
    with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    print(markdown(result))
    if any(s["exit"] != 0 for s in result["steps"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
