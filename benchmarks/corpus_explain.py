"""Explaining a whole test split with `python -m jcaps.interpret`: examples a second of each
method, the peak memory at two corpus sizes, and whether runs killed at random moments resume to
the file of an uninterrupted run.

    python -m benchmarks.corpus_explain --workdir W [--data_dir PATH] --out DIR [--limits 1000,0]
        [--methods integrated_gradients,kernel_shap,random] [--kills 3] [--tiny]

Each limit (0: the whole split) is one `python -m jcaps.interpret --faithfulness --batch_size 32`
run into DIR/explained-LIMIT. The command resumes where it stopped, so an interrupted benchmark
continues when it runs again; each invocation's peak resident memory (`os.wait4`) and wall time
are kept in DIR/explained-LIMIT.invocations.json, and the figures are the largest peak and the
summed time. Examples a second of a method come from the run's own timing (faithfulness.json,
`seconds_per_100`: that method's scores, compiling left out); the wall time covers everything
(every method, faithfulness, the files).

`--kills K`: then the smallest limit is explained again into DIR/killed, killed with SIGKILL
at K random moments and restarted each time, then run to the end; the file must equal the
uninterrupted run's, every example once. Each moment is drawn after its invocation has begun
explaining, between a fifth and all of 1/(K+1) of the uninterrupted run's explaining time, so
that the K kills land within the work however short the run is.

Writes DIR/results.json: {"runs": {LIMIT: {"examples", "peak_rss_mib", "wall_seconds",
"invocations", "examples_per_second": {method: ...}, "faithfulness": {method: comprehensiveness,
...}}}, "rss_ratio": peak of the largest limit / peak of the smallest, "kills": {"count" (the runs
actually killed), "identical", "examples", "each_once"}, "_run": `recording.provenance.run_metadata`}.

`--tiny`: limits 40,128 and 1 kill, on `--workdir` where one is given, else on the fastText
`:smoke` config (generated data) trained into DIR/workdir first (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from recording.provenance import run_metadata
from recording.results import write_results

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def interpret_command(args, out: str, limit: int) -> list[str]:
    command = [sys.executable, "-m", "jcaps.interpret", "--workdir", args.workdir, "--out", out, "--faithfulness",
               "--methods", args.methods, "--batch_size", "32", "--progress", "lines"]
    if limit:
        command += ["--limit", str(limit)]
    if args.data_dir:
        command.append(f"--config.data.dir={args.data_dir}")
    if args.cache_dir:
        command.append(f"--config.data.cache_dir={args.cache_dir}")
    return command


def invoke(command: list[str], log: str, kill_after: float | None = None) -> dict:
    """Runs `command` (its output appended to `log`), killed with SIGKILL `kill_after` seconds
    after it starts explaining when given; its exit status, wall seconds, seconds from its first
    progress line to its end, and peak RSS (MiB)."""
    start = time.perf_counter()
    written_before = os.path.getsize(log) if os.path.exists(log) else 0  # earlier invocations' lines
    with open(log, "a", encoding="utf-8") as output:
        process = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    explaining = None
    while True:  # os.wait4, not Popen.poll: the rusage of the child is wanted, and poll reaps it
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.5)
        with open(log, encoding="utf-8") as f:
            f.seek(written_before)
            begun = "example " in f.read()
        if begun and explaining is None:
            explaining = time.perf_counter()
        if explaining is not None and kill_after is not None and time.perf_counter() - explaining >= kill_after:
            os.kill(process.pid, signal.SIGKILL)  # not Popen.send_signal: it polls, which would reap an exited child
            kill_after = None  # then wait for it
    end = time.perf_counter()
    return {"status": os.waitstatus_to_exitcode(status), "seconds": round(end - start, 2),
            "explaining_seconds": round(end - explaining, 2) if explaining is not None else 0.0,
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def explained_lines(out: str) -> list[str]:
    with open(os.path.join(out, "attributions.jsonl"), encoding="utf-8") as f:
        return f.readlines()


def explain_to_the_end(args, out: str, limit: int) -> list[dict]:
    """Runs (or resumes) the command into `out` until it finishes; every invocation's record."""
    path = out + ".invocations.json"
    invocations = json.loads(Path(path).read_text(encoding="utf-8")) if os.path.isfile(path) else []
    run = os.path.join(out, "run.json")
    if invocations and os.path.isfile(run) and json.loads(Path(run).read_text(encoding="utf-8")).get("finished"):
        return invocations
    record = invoke(interpret_command(args, out, limit), out + ".log")
    if record["status"] != 0:
        raise SystemExit(f"the command failed (exit {record['status']}); see {out}.log")
    invocations.append(record)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(invocations, f, indent=1)
    return invocations


def run_summary(out: str, invocations: list[dict]) -> dict:
    with open(os.path.join(out, "faithfulness.json"), encoding="utf-8") as f:
        faithfulness = json.load(f)
    return {
        "examples": len(explained_lines(out)),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in invocations),
        "wall_seconds": round(sum(r["seconds"] for r in invocations), 1),
        "explaining_seconds": round(sum(r["explaining_seconds"] for r in invocations), 1),
        "invocations": len(invocations),
        "examples_per_second": {method: round(100 / values["seconds_per_100"], 2) if values["seconds_per_100"] else None
                                for method, values in faithfulness.items()},
        "faithfulness": {method: round(values["comprehensiveness"], 4) for method, values in faithfulness.items()},
    }


def killed_runs(args, reference: str, limit: int, kills: int, explaining_seconds: float, seed: int = 0) -> dict:
    """The run of `reference` (`explaining_seconds` of explaining) again, killed `kills` times
    and resumed: is its file the same?"""
    out = os.path.join(args.out, "killed")
    shutil.rmtree(out, ignore_errors=True)
    draw, killed = random.Random(seed), 0
    share = explaining_seconds / (kills + 1)  # at most this much work per killed invocation leaves work for the next
    for _ in range(kills):
        moment = draw.uniform(share / 5, share)
        record = invoke(interpret_command(args, out, limit), out + ".log", kill_after=moment)
        if record["status"] == 0:  # it finished before its moment came
            break
        killed += record["status"] == -signal.SIGKILL
    explain_to_the_end(args, out, limit)
    lines, expected = explained_lines(out), explained_lines(reference)
    indices = [json.loads(line)["index"] for line in lines]
    return {"count": killed, "identical": lines == expected, "examples": len(lines),
            "each_once": len(set(indices)) == len(indices)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir")
    parser.add_argument("--data_dir", default="")
    parser.add_argument("--cache_dir", default="")
    parser.add_argument("--out", required=True)
    parser.add_argument("--limits", default="1000,0")
    parser.add_argument("--methods", default="integrated_gradients,kernel_shap,random")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    metadata = run_metadata(args.tiny)
    os.makedirs(args.out, exist_ok=True)
    limits = [int(limit) for limit in args.limits.split(",")]
    if args.tiny:
        limits, args.kills = [40, 128], 1
        if not args.workdir:
            args.workdir, args.cache_dir = os.path.join(args.out, "workdir"), os.path.join(args.out, "data")
            if not os.path.isdir(args.workdir):
                subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--config", "fasttext_ag_news:smoke",
                                "--workdir", args.workdir, f"--config.data.cache_dir={args.cache_dir}",
                                "--config.train.progress=none"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    elif not args.workdir:
        parser.error("--workdir is required (or --tiny)")
    results = {"runs": {}, "_run": metadata}
    for limit in sorted(limits, key=lambda n: n or float("inf")):
        out = os.path.join(args.out, f"explained-{limit}")
        results["runs"][str(limit)] = run_summary(out, explain_to_the_end(args, out, limit))
        write_results(args.out, results)
    runs = list(results["runs"].values())
    results["rss_ratio"] = round(runs[-1]["peak_rss_mib"] / runs[0]["peak_rss_mib"], 3)
    if args.kills:
        smallest = min(limits, key=lambda n: n or float("inf"))
        results["kills"] = killed_runs(args, os.path.join(args.out, f"explained-{smallest}"), smallest, args.kills,
                                       results["runs"][str(smallest)]["explaining_seconds"])
    write_results(args.out, results)
    print(json.dumps({k: v for k, v in results.items() if k != "_run"}, indent=1))


if __name__ == "__main__":
    main()
