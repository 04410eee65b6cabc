"""Settings searched on validation for the shipped configs: a fixed list of trials a search (its
budget), each trained once (seed 0); the one best on validation is then trained with seeds 1
and 2, as the shipped config is, and both are reported on test with their spread.

    python -m studies.tuning.tuning --search NAME --data_root ../shared/data --workdirs DIR [--jobs 1]
        [--trials shipped,epochs_10,...] [--report_only]
    python -m studies.tuning.tuning --search NAME --tiny --workdirs DIR

A trial is the search's config with config flags (`SEARCHES`; `--list` prints them), over what
the papers and the models' own options allow (epochs and schedule, learning rate, dropout,
embedding and capsule sizes, bigram buckets, weight decay). Each trains through `train.py` in
`DIR/NAME/TRIAL_seedS` (`studies/training_runs.py`: a finished run is reused and an interrupted
one resumes, so the same command continues the search). Selection reads the validation score of
the model each run selected (`train.select_metric`), never test. `--trials` limits the first
stage to some trials (the others stay pending); the seeds stage starts once every trial of the
search has finished.

Writes `studies/tuning/results/NAME/results.json` (`--tiny`: `DIR/NAME/results.json`): every
trial's validation and test scores, the budget (the trials and their seeds), the trial chosen,
and for the shipped config and the chosen trial their test metric over seeds 0 to 2 (mean, min,
max). A setting enters a shipped config only where it wins on validation. `--tiny` runs the
first two trials' `:smoke` forms for 3 steps, seed 0 alone (seconds; the tests run it).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from recording.provenance import run_metadata
from recording.results import write_results
from studies import ROOT
from studies.training.training_results import MULTI_LABEL, SINGLE_LABEL, record_start, run, run_record, train_flags
from studies.training_runs import final_test_metrics, train_pending

SEEDS = (0, 1, 2)
SEARCHES: dict[str, dict] = {
    "fasttext_ag_news": {
        "data": "ag_news", "metrics": SINGLE_LABEL, "select": "accuracy", "config": "configs/fasttext_ag_news.py",
        "trials": {
            "shipped": (),
            "epochs_10": ("--config.train.num_epochs=10", "--config.train.eval_every_steps=158"),
            "lr_2e-2": ("--config.train.learning_rate=2e-2",),
            "lr_5e-3": ("--config.train.learning_rate=5e-3",),
            "embed_100": ("--config.model.embed_dim=100",),
            "dropout_0.2": ("--config.model.dropout_rate=0.2",),
            "buckets_2e20": ("--config.model.bigram_buckets=1048576",),
            "weight_decay_1e-4": ("--config.train.optimizer=adamw", "--config.train.weight_decay=1e-4"),
        }},
    "icapsnet_short_ag_news": {
        "data": "ag_news", "metrics": SINGLE_LABEL, "select": "accuracy", "config": "configs/icapsnet_short_ag_news.py",
        "trials": {
            "shipped": (),
            "paper_sizes": ("--config.model.embed_dim=300", "--config.model.region_dim=256",
                            "--config.model.num_capsules=32"),
            "epochs_8": ("--config.train.num_epochs=8",),
            "lr_halved": ("--config.train.learning_rate=5e-4",),
            "cosine": ("--config.train.schedule=cosine",),
        }},
    "sgm_reuters": {
        "data": "reuters21578", "metrics": MULTI_LABEL, "select": "micro_f1", "config": "configs/sgm_reuters.py",
        "trials": {
            "shipped": (),
            "epochs_20": ("--config.train.num_epochs=20",),
            "lr_1.5e-3": ("--config.train.learning_rate=1.5e-3",),
            # The linear bar reads whole stories; the shipped model their first 128 tokens.
            "max_len_256": ("--config.data.max_len=256", "--config.data.bucket_boundaries=(64,128,192,256)"),
            "encoder_256": ("--config.model.embed_dim=256", "--config.model.encoder_dim=256"),
        }},
}


def spec_of(search: dict, trial: str) -> dict:
    return run(trial, search["config"], search["trials"][trial], seeds=SEEDS)


def validation_score(record: dict, select: str) -> float:
    return float(record["validation"][select])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--search", help=f"one of {', '.join(SEARCHES)}")
    parser.add_argument("--workdirs", help="where the runs train (DIR/SEARCH/TRIAL_seedS)")
    parser.add_argument("--data_root", default="")
    parser.add_argument("--trials", default="", help="train only these trials of the first stage")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--report_only", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--cache_dir", default="")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        for name, search in SEARCHES.items():
            for trial, flags in search["trials"].items():
                print(f"{name}/{trial}: --config {search['config']} {' '.join(flags)}")
        return
    if args.search not in SEARCHES or not args.workdirs:
        parser.error(f"--search (one of {', '.join(SEARCHES)}) and --workdirs are required")
    if not (args.data_root or args.tiny or args.report_only):
        parser.error("the following arguments are required: --data_root (or --tiny)")
    search = SEARCHES[args.search]
    if args.tiny:  # the first two trials: a check that the search runs end to end
        search = {**search, "trials": dict(list(search["trials"].items())[:2])}
    chosen = [t for t in args.trials.split(",") if t] or list(search["trials"])
    unknown = sorted(set(chosen) - set(search["trials"]))
    if unknown:
        parser.error(f"--trials: {args.search} has no trials {unknown}; it has {', '.join(search['trials'])}")
    load_average_before = os.getloadavg()[0]
    study = {"data": search["data"]}

    def workdir(trial: str, seed: int) -> str:
        return os.path.join(args.workdirs, args.search, f"{trial}_seed{seed}")

    def train(pairs: list[tuple[str, int]]) -> None:
        if args.report_only:
            return
        todo = [(workdir(t, s), train_flags(spec_of(search, t), study, s, workdir(t, s), args)) for t, s in pairs]
        train_pending(todo, args.jobs, on_start=lambda path: record_start(path, args.jobs))

    train([(trial, 0) for trial in chosen])
    trials = {}
    for trial in search["trials"]:
        if final_test_metrics(workdir(trial, 0)) is not None:
            trials[trial] = {"flags": list(search["trials"][trial]), **run_record(workdir(trial, 0), search["metrics"])}
    results: dict = {"search": args.search, "config": search["config"], "select": search["select"],
                     "budget": {"trials": {t: list(f) for t, f in search["trials"].items()},
                                "first_stage_seed": 0, "seeds": list(SEEDS)},
                     "trials": trials, "pending": [t for t in search["trials"] if t not in trials]}
    if not results["pending"]:
        best = max(trials, key=lambda t: validation_score(trials[t], search["select"]))
        results["chosen"] = best
        compared = ["shipped"] + ([best] if best != "shipped" else [])
        seeds = SEEDS[:1] if args.tiny else SEEDS
        train([(trial, seed) for trial in compared for seed in seeds[1:]])
        results["seeds"] = {}
        for trial in compared:
            scores = [final_test_metrics(workdir(trial, seed)) for seed in seeds]
            if any(score is None for score in scores):
                results["pending"] += [f"{trial}_seed{s}" for s, score in zip(seeds, scores) if score is None]
                continue
            test = [float(score[search["select"]]) for score in scores]
            results["seeds"][trial] = {"seeds": list(seeds), "test": test, "mean": float(np.mean(test)),
                                       "min": min(test), "max": max(test)}
    results["_run"] = run_metadata(args.tiny, load_average_before)
    folder = os.path.join(args.workdirs, args.search) if args.tiny else os.path.join(
        ROOT, "studies", "tuning", "results", args.search)
    write_results(folder, results)
    print(f"{len(trials)} trials finished, chosen: {results.get('chosen')}; wrote {folder}/results.json")


if __name__ == "__main__":
    main()
