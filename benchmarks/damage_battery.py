"""Every file of a trained workdir, damaged four ways, under every command that reads it.

A text model (fastText's `:smoke` config) and a series model (the input-cell LSTM's boxes
`:smoke` config) are each trained twice, from seeds 0 and 1. Every file of the seed-0 workdir is
then, in a fresh copy of the workdir each time:

- "truncated" to half its size;
- "flipped": one byte in its middle inverted;
- "foreign": replaced by the file of the same name in the seed-1 workdir (same config, same step
  folders, other parameters);
- "linked": replaced by a symbolic link to a copy of itself outside the workdir;

and `evaluate` (the test split), `predict` (4 texts; text models), `interpret --limit 4` (into the
workdir's `interpretation/`) and a resumed training run on the copy, one after the other, in this
process. A `UserError` is what the commands print as one line (and a hint) with exit status 2.
Each command's outcome is:

- "same": the undamaged workdir's answer (warning lines allowed);
- "refused": a `UserError`, which with anything else printed or logged on stderr meanwhile
  makes at most two lines;
- a failure: another answer, any other exception (a traceback for the user), a refusal among more
  lines, or a write outside the workdir (the link's target, or the folder holding it, changed).

results.json: {"cases": how many (file, damage) pairs, "commands_run", "outcomes": {outcome:
count}, "failures": [every failure], "files": {model: the files damaged}, "_run"}. `--tiny`: the
text model alone, four of its files.

    python -m benchmarks.damage_battery --out DIR
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import math
import os
import shutil
import sys
import time

from recording.provenance import run_metadata

MODELS = {
    "text": ("configs/fasttext_ag_news.py", "smoke"),
    "series": ("configs/input_cell_boxes.py", "earlier,input_cell,smoke"),
}
DAMAGES = ("truncated", "flipped", "foreign", "linked")
TEXTS = ["stocks fell as the bank raised rates", "the team won the final match", "a new chip for phones", "rain"]
TINY_FILES = ("config.json", "checkpoints/labels.json", "final_params.msgpack", "metrics.jsonl")
TOLERANCE = 1e-6


def config_of(model: str, cache: str, seed: int):
    from jcaps.train import config as config_lib

    path, arg = MODELS[model]
    config = config_lib.load(f"{path}:{arg}")
    config.data.cache_dir, config.train.progress, config.train.seed = cache, "none", seed
    return config


def workdir_files(workdir: str) -> list[str]:
    """Every file of `workdir`, relative, sorted (the lock left out: it holds no data)."""
    files = []
    for folder, _, names in os.walk(workdir):
        for name in names:
            relative = os.path.relpath(os.path.join(folder, name), workdir)
            if name != ".lock":
                files.append(relative)
    return sorted(files)


def damage(path: str, how: str, foreign: str, outside: str) -> bool:
    """Damages `path` `how`; False where there is nothing to do it with (no foreign twin)."""
    if how == "truncated":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif how == "flipped":
        with open(path, "r+b") as f:
            size = os.path.getsize(path)
            if not size:
                return False
            f.seek(size // 2)
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif how == "foreign":
        if not os.path.isfile(foreign):
            return False
        shutil.copyfile(foreign, path)
    else:
        os.makedirs(outside, exist_ok=True)
        target = os.path.join(outside, os.path.basename(path))
        shutil.copyfile(path, target)
        os.remove(path)
        os.symlink(target, path)
    return True


def folder_digest(folder: str) -> str:
    """SHA-256 of the names and bytes of every file under `folder` (links not followed)."""
    digest = hashlib.sha256()
    if os.path.isdir(folder):
        for path in sorted(os.path.join(d, n) for d, _, names in os.walk(folder) for n in names):
            digest.update(path.encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def close(a, b) -> bool:
    """Whether two answers agree: numbers within `TOLERANCE`, everything else equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= TOLERANCE
    return a == b


def commands(model: str, cache: str) -> dict:
    """name -> (workdir -> its answer), the commands of `model`'s workdirs."""
    from jcaps.evaluate import evaluate
    from jcaps.interpret.corpus import explain_workdir
    from jcaps.predict import predict
    from jcaps.train import loop
    from jcaps.train.workdir import load_trained

    def interpret(workdir: str):
        trained = load_trained(workdir, with_data=True, data_overrides={"cache_dir": cache})
        out = os.path.join(workdir, "interpretation")
        return explain_workdir(trained, "test", out, methods=("gradient",), limit=4, batch_size=4)

    found = {
        "evaluate": lambda workdir: evaluate(workdir, "test", {"cache_dir": cache}, {}, "final"),
        "interpret": interpret,
        "resume": lambda workdir: loop.train_and_evaluate(config_of(model, cache, 0), workdir),
    }
    if model == "text":
        found["predict"] = lambda workdir: list(predict(load_trained(workdir), TEXTS))
    return found


class _Records(logging.Handler):
    """The log records of a command (a library's log line on stderr)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}:{record.name}:{record.getMessage()}"[:300])


def run_command(command, workdir: str) -> tuple[str, object, list[str]]:
    """(kind, answer or message, what else the user would read on stderr: printed lines and
    library log records): kind "answer", "refused" (a UserError) or "error"."""
    from absl import logging as absl_logging

    from jcaps.errors import UserError

    absl_logging.set_verbosity(absl_logging.WARNING)  # a new process's, before the command quiets what it quiets
    stderr, records = io.StringIO(), _Records()
    logging.getLogger().addHandler(records)
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            answer = command(workdir)
        return "answer", json.loads(json.dumps(answer, default=str)), stderr.getvalue().splitlines() + records.lines
    except UserError as error:
        message = f"{error}" + (f"\nhint: {error.hint}" if getattr(error, "hint", None) else "")
        return "refused", message, stderr.getvalue().splitlines() + records.lines
    except Exception as error:  # noqa: BLE001 (every other failure is one: a traceback for the user)
        return "error", f"{type(error).__name__}: {str(error)[:300]}", stderr.getvalue().splitlines() + records.lines
    finally:
        logging.getLogger().removeHandler(records)


def battery(model: str, scratch: str, tiny: bool) -> dict:
    import jax

    from jcaps.train import loop

    cache = os.path.join(scratch, "cache")
    workdirs = {}
    for seed in (0, 1):
        workdirs[seed] = os.path.join(scratch, f"{model}-seed{seed}")
        with contextlib.redirect_stdout(io.StringIO()):
            loop.train_and_evaluate(config_of(model, cache, seed), workdirs[seed])
    runs = commands(model, cache)
    reference = {}
    for name, command in runs.items():
        copy = os.path.join(scratch, f"{model}-reference-{name}")
        shutil.copytree(workdirs[0], copy, symlinks=True)
        kind, answer, _ = run_command(command, copy)
        if kind != "answer":
            raise SystemExit(f"{name} fails on the undamaged {model} workdir: {answer}")
        reference[name] = answer
        shutil.rmtree(copy)
    files = [f for f in workdir_files(workdirs[0]) if not tiny or f in TINY_FILES]
    cases, outcomes, failures, commands_run = 0, {"same": 0, "refused": 0}, [], 0
    for relative in files:
        print(f"{model}: {relative}", file=sys.stderr, flush=True)
        for how in DAMAGES:
            copy, outside = os.path.join(scratch, "case"), os.path.join(scratch, "outside")
            for folder in (copy, outside):
                shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(workdirs[0], copy, symlinks=True)
            if not damage(os.path.join(copy, relative), how, os.path.join(workdirs[1], relative), outside):
                continue
            cases += 1
            # Each command compiles its programs anew; hundreds of them in one process exhaust
            # the memory XLA:CPU maps for compiled code.
            jax.clear_caches()
            before = folder_digest(outside)
            for name, command in runs.items():
                commands_run += 1
                kind, answer, other_lines = run_command(command, copy)
                case = {"model": model, "file": relative, "damage": how, "command": name}
                if kind == "answer" and close(answer, reference[name]):
                    outcome = "same"
                elif kind == "refused" and len(str(answer).splitlines()) + len(other_lines) <= 2:
                    outcome = "refused"
                elif kind == "answer":
                    outcome = "another answer"
                elif kind == "refused":
                    outcome = "more than two lines"
                else:
                    outcome = "traceback"
                if folder_digest(outside) != before:
                    outcome = "wrote outside the workdir"
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                if outcome not in ("same", "refused"):
                    failures.append(
                        {**case, "outcome": outcome, "detail": str(answer)[:300], "stderr": other_lines[:5]}
                    )
    return {"cases": cases, "commands_run": commands_run, "outcomes": outcomes, "failures": failures, "files": files}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true", help="the text model alone, four of its files")
    args = parser.parse_args()
    metadata = run_metadata(args.tiny)
    os.environ.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    os.makedirs(args.out, exist_ok=True)
    scratch = os.path.join(args.out, "scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    started = time.perf_counter()
    results: dict = {"cases": 0, "commands_run": 0, "outcomes": {}, "failures": [], "files": {}}
    for model in ("text",) if args.tiny else tuple(MODELS):
        found = battery(model, scratch, args.tiny)
        results["cases"] += found["cases"]
        results["commands_run"] += found["commands_run"]
        for outcome, count in found["outcomes"].items():
            results["outcomes"][outcome] = results["outcomes"].get(outcome, 0) + count
        results["failures"] += found["failures"]
        results["files"][model] = found["files"]
    shutil.rmtree(scratch, ignore_errors=True)
    results.update(seconds=time.perf_counter() - started, _run=metadata)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(json.dumps({k: v for k, v in results.items() if k != "files"}, indent=2)[:5000])
    sys.exit(1 if results["failures"] else 0)


if __name__ == "__main__":
    main()
