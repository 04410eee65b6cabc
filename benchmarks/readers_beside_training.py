"""Loading a workdir's parameters, and predicting, while a training writes it.

    python -m benchmarks.readers_beside_training --out DIR [--loads 500] [--predicts 100] [--tiny]

Starts `train.py` on the fastText `:smoke` config (generated data) with an evaluation every step,
a checkpoint every 2 steps and 2 checkpoints kept, so that `best/` and `checkpoints/` change
under the readers all the time; once it has a checkpoint, loads the final parameters
(`load_trained`, alternately `parameters="final"` and `"last"`) `--loads` times in this process,
then runs `python -m jcaps.predict --text ...` `--predicts` times, and stops the training
(SIGTERM) when done. Every load and every predict call must succeed.

Writes DIR/results.json: `loads`, `load_failures`, `predicts`, `predict_failures`, the first
few failure messages (`failures`), the training steps done meanwhile (`steps_during_reads`),
the mean seconds a load took and "_run" (`recording.provenance.run_metadata`). `--tiny`: 30 loads and 1
predict call (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from recording.provenance import run_metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.path.join(ROOT, "configs", "fasttext_ag_news.py") + ":smoke"


def start_training(workdir: str, cache_dir: str, env: dict) -> subprocess.Popen:
    """train.py on the smoke config, changing best/ at every step and checkpoints every 2."""
    flags = ["--config", SMOKE, "--workdir", workdir, f"--config.data.cache_dir={cache_dir}",
             "--config.train.progress=none", "--config.train.num_steps=1000000", "--config.train.eval_every_steps=1",
             "--config.train.checkpoint_every_steps=2", "--config.train.keep_checkpoints=2",
             "--config.train.log_every_steps=1000"]
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *flags], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def latest_step(workdir: str) -> int:
    directory = os.path.join(workdir, "checkpoints")
    steps = [int(name) for name in os.listdir(directory) if name.isdigit()] if os.path.isdir(directory) else []
    return max(steps, default=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--loads", type=int, default=500)
    parser.add_argument("--predicts", type=int, default=100)
    parser.add_argument("--tiny", action="store_true", help="30 loads, 1 predict call")
    args = parser.parse_args()
    loads, predicts = (30, 1) if args.tiny else (args.loads, args.predicts)
    metadata = run_metadata(args.tiny)
    os.makedirs(args.out, exist_ok=True)
    workdir, cache_dir = os.path.join(args.out, "workdir"), os.path.join(args.out, "cache")
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
    os.environ.update(env)
    from jcaps.train.workdir import load_trained  # after XLA_FLAGS: one device, as train.py's

    training = start_training(workdir, cache_dir, env)
    failures: list[str] = []
    try:
        while latest_step(workdir) < 2 or not os.path.isdir(os.path.join(workdir, "best")):
            if training.poll() is not None:
                raise SystemExit(f"the training stopped: {training.stderr.read()}")
            time.sleep(0.2)
        first_step, started, load_failures = latest_step(workdir), time.perf_counter(), 0
        for attempt in range(loads):
            try:
                load_trained(workdir, parameters=("final", "last")[attempt % 2])
            except Exception as error:  # every failure counts, of any kind
                load_failures += 1
                failures.append(f"load: {type(error).__name__}: {error}"[:300])
        load_seconds = (time.perf_counter() - started) / loads
        predict_failures = 0
        for _ in range(predicts):
            result = subprocess.run([sys.executable, "-m", "jcaps.predict", "--workdir", workdir, "--text",
                                     "shares rose"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            if result.returncode != 0 or not result.stdout.strip():
                predict_failures += 1
                failures.append(f"predict: exit {result.returncode}: {result.stderr.strip()[-300:]}")
        steps = latest_step(workdir) - first_step
    finally:
        training.send_signal(signal.SIGTERM)
        training.wait(timeout=120)
    results = {"loads": loads, "load_failures": load_failures, "predicts": predicts,
               "predict_failures": predict_failures, "failures": failures[:10], "steps_during_reads": steps,
               "load_s": load_seconds, "cores": os.cpu_count(), "_run": metadata}
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
