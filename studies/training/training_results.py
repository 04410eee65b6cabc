"""The test results of the shipped configs and of the variants the docs compare them with,
trained from scratch by today's code: one study per results table of the docs.

    python -m studies.training.training_results --study NAME --data_root ../shared/data --workdirs DIR
        [--runs RUN,...] [--jobs 2] [--report_only]
    python -m studies.training.training_results --study NAME --tiny --workdirs DIR
    python -m studies.training.training_results --study NAME --baseline_only --data_root ../shared/data

A study is a list of runs: a config, the flags it gets, the seeds and the data folder under
`--data_root` (`STUDIES`; `--list` prints them; `series`: its data are not texts). Each (run,
seed) trains through `train.py` in `DIR/NAME/RUN_seedS`; a finished run is reused and an
interrupted one resumes, so running the same command again continues the study where it stopped
(`studies/training_runs.py`, `--jobs` trainings at once, each pinned to its own core). When a run
starts, its provenance (commit, date, load, jobs) is kept in `RUN_seedS/provenance.json`, since
a study's runs may span days.

Then `studies/training/results/NAME/results.json` (`--tiny`: `DIR/NAME/results.json`) holds,
for every finished run, its test metrics of the model selected on validation, the validation
score that selected it, the parameter count, steps, epochs, the step selected, the wall time
train.py printed (summed over resumed parts) and the provenance; `studies/tables.py` renders
the docs' tables from it. Runs not finished yet are listed as pending. `--baseline` adds the bar
every model is read against: TF-IDF + a linear SVM (scikit-learn, in the `dev` and `compare`
extras) on the splits of the study's first run (its config, seed 0), its classes weighted as that
config weighs them in the loss, its n-gram range and C chosen on the validation split, scored on
test by the models' own metrics (`jcaps.train.metrics`); when the config weighs the classes an
unweighted fit is reported beside it. `--baseline_only` computes the baseline alone into the
study's committed results.json, keeping its runs.

`--tiny` trains each run's `:smoke` form for a few steps on generated data (seconds a run, no
data needed), a check that the study runs end to end; the tests run it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex

from recording.provenance import run_metadata
from recording.results import write_results
from studies import ROOT
from studies.training_runs import final_test_metrics, train_pending, training_record

SINGLE_LABEL = ("accuracy", "macro_f1")
MULTI_LABEL = ("hamming_loss", "micro_f1", "macro_f1", "example_f1", "labels_per_example",
               "true_labels_per_example")


def run(label: str, config: str, flags: tuple[str, ...] = (), seeds: tuple[int, ...] = (0,), data: str = "") -> dict:
    """One row of a study: `config` is `configs/FILE.py[:ARGUMENT]`; `data` the folder under
    --data_root (default: the study's)."""
    return {"label": label, "config": config, "flags": list(flags), "seeds": list(seeds), "data": data}


STUDIES: dict[str, dict] = {
    "ag_news": {
        "page": "docs/icapsnets.md", "data": "ag_news", "metrics": SINGLE_LABEL, "runs": {
            "fasttext": run("fastText (words + hashed bigrams)", "configs/fasttext_ag_news.py"),
            "icapsnet_long": run("iCapsNets Long (the paper's routing and selection)",
                                 "configs/icapsnet_long_ag_news.py"),
            "icapsnet_short_shared_w": run(
                "iCapsNets Short with the paper's shared W_j", "configs/icapsnet_short_ag_news.py",
                ("--config.model.shared_transform=True",)),
            "icapsnet_short_paper_sizes": run(
                "iCapsNets Short at the sizes of docs/models.md (d_e 300, d_w 256, I 32), no dropout, "
                "no class weights", "configs/icapsnet_short_ag_news.py",
                ("--config.model.embed_dim=300", "--config.model.region_dim=256", "--config.model.num_capsules=32",
                 "--config.model.embedding_dropout=0.0", "--config.train.class_weights=none")),
        }},
    "cccapsnet": {
        "page": "docs/cccapsnet.md", "data": "ag_news", "metrics": SINGLE_LABEL, "runs": {
            "cwc_capsule": run("CWC-Capsule, k-means routing (the paper's model)",
                               "configs/cccapsnet_ag_news.py", seeds=(0, 1, 2)),
            "cc_capsule": run("CC-Capsule (straight-through Gumbel codes)", "configs/cccapsnet_ag_news.py:cc-capsule"),
            "normal_linear": run("Normal-Linear (V x 64 table, linear classifier)",
                                 "configs/cccapsnet_ag_news.py:normal-linear"),
            "dynamic": run("CWC-Capsule, dynamic routing", "configs/cccapsnet_ag_news.py:dynamic"),
            "embedding_lr_3e-2": run("CWC-Capsule, embedding learning rate 3e-2", "configs/cccapsnet_ag_news.py",
                                     ("--config.train.param_groups.embedding.learning_rate=3e-2",)),
        }},
    "input_cell_real": {
        "page": "docs/input-cell-lstm.md", "data": "", "metrics": SINGLE_LABEL, "series": True, "runs": {
            "basicmotions": run("BasicMotions (40 / 40 series, 6 x 100)", "configs/input_cell_basicmotions.py",
                                data="ucr/BasicMotions"),
            "japanese_vowels": run("JapaneseVowels (270 / 370 series, 12 x 7-29)",
                                   "configs/input_cell_japanese_vowels.py", data="ucr/JapaneseVowels"),
            "mnist": run("MNIST rows as sequences (the 10,000 t10k images, 20 % held out for test)",
                         "configs/input_cell_mnist.py",
                         ("--config.data.train_file=t10k", "--config.data.test_fraction=0.2"), data="mnist"),
        }},
    "emoji_recipe": {
        "page": "docs/dilated-fcn.md", "data": "semeval2018_emoji", "metrics": SINGLE_LABEL, "runs": {
            "sqrt_balanced": run("class weights sqrt_balanced (P = 0.5), 8 epochs", "configs/dilated_fcn_emoji.py",
                                 ("--config.train.class_weights=sqrt_balanced", "--config.train.num_epochs=8")),
            "balanced_0.25": run("class weights balanced:0.25", "configs/dilated_fcn_emoji.py",
                                 ("--config.train.class_weights=balanced:0.25",)),
        }},
    "reuters": {
        "page": "docs/sgm.md", "data": "reuters21578", "metrics": MULTI_LABEL, "runs": {
            "br": run("BR (BiLSTM, max pool, sigmoid per label, threshold 0.5)", "configs/br_reuters.py"),
            "sgm": run("SGM (beam 5)", "configs/sgm_reuters.py", seeds=(0, 1, 2)),
            "sgm_ge": run("SGM + global embedding (beam 5)", "configs/sgm_ge_reuters.py", seeds=(0, 1, 2)),
        }},
    "debian_tags": {
        "page": "docs/sgm.md", "data": "debian_tags", "metrics": MULTI_LABEL, "runs": {
            "br": run("BR (BiLSTM, max pool, threshold chosen on validation)", "configs/br_debian_tags.py"),
            "sgm": run("SGM (beam 5, length penalty 0.5)", "configs/sgm_debian_tags.py", seeds=(0, 1, 2)),
            "sgm_ge": run("SGM + global embedding (beam 5, length penalty 0.5)", "configs/sgm_ge_debian_tags.py",
                          seeds=(0, 1, 2)),
        }},
}


def run_name(run_id: str, seed: int) -> str:
    return f"{run_id}_seed{seed}"


def seeds_of(spec: dict, tiny: bool) -> list[int]:
    """The seeds a command trains and reports: the first alone under --tiny."""
    return spec["seeds"][:1] if tiny else spec["seeds"]


def command_line(spec: dict, tiny: bool) -> str:
    """The config argument and flags as a user types them (`:smoke` added under --tiny)."""
    config = spec["config"]
    if tiny:
        config += ",smoke" if ":" in config else ":smoke"
    return " ".join([f"--config {config}", *spec["flags"]])


def train_flags(spec: dict, study: dict, seed: int, workdir: str, args) -> list[str]:
    flags = [*shlex.split(command_line(spec, args.tiny)), "--workdir", workdir, f"--config.train.seed={seed}"]
    if args.tiny:
        return [*flags, "--config.train.num_steps=3", *([f"--config.data.cache_dir={args.cache_dir}"] * bool(args.cache_dir))]
    return [*flags, f"--config.data.dir={os.path.join(args.data_root, spec['data'] or study['data'])}"]


def record_start(workdir: str, jobs: int) -> None:
    """Keeps the provenance of a run's first start (a resumed run keeps the first)."""
    path = os.path.join(workdir, "provenance.json")
    if not os.path.isfile(path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**run_metadata(tiny=False), "jobs": jobs}, f, indent=2)


def run_record(workdir: str, metrics: tuple[str, ...]) -> dict:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        finals = {r["split"]: r for r in map(json.loads, f) if r.get("final")}
    with open(os.path.join(workdir, "train.log"), encoding="utf-8") as f:
        parameters = re.search(r": ([\d,]+) parameters;", f.read())
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        select_metric = json.load(f)["train"]["select_metric"]
    provenance = None
    if os.path.isfile(os.path.join(workdir, "provenance.json")):
        with open(os.path.join(workdir, "provenance.json"), encoding="utf-8") as f:
            provenance = json.load(f)
    record = training_record(workdir)
    del record["steps_per_s"]  # the tables give wall times
    return {
        "test": {m: round(finals["test"][m], 4) for m in metrics if m in finals["test"]},
        "validation": {select_metric: round(finals["validation"][select_metric], 4)} if "validation" in finals else {},
        "parameters": int(parameters.group(1).replace(",", "")) if parameters else None,
        **record,
        "provenance": provenance,
    }


BASELINE = ("TF-IDF (sublinear tf, min_df 2) + linear SVM (one-vs-rest per label for label sets), the n-gram "
            "range and C chosen on the validation split")
# What the baseline's validation chooses from (scikit-learn's names).
BASELINE_GRID = {"ngram_range": ((1, 1), (1, 2)), "C": (0.25, 0.5, 1.0, 2.0)}


def baseline_dataset(study: dict, data_root: str, cache_dir: str, tiny: bool):
    """The splits of the study's first run (its config, seed 0, its data folder under `data_root`;
    `tiny`: its `:smoke` form on generated data): the train, validation and test examples every
    model of the study saw. Also returns the config's class weighting."""
    from jcaps.data import datasets
    from jcaps.train.config import load

    spec = next(iter(study["runs"].values()))
    config = load(spec["config"] + ((",smoke" if ":" in spec["config"] else ":smoke") if tiny else ""))
    if not tiny:
        config.data.dir = os.path.join(data_root, spec["data"] or study["data"])
    if cache_dir:
        config.data.cache_dir = cache_dir
    return datasets.load_dataset(config.data, 0), config.train.class_weights


def tfidf_svm(dataset, metrics: tuple[str, ...], class_weights: str) -> dict:
    """The baseline on `dataset`'s splits, weighting the classes as `class_weights`
    (`train.class_weights`) weighs them in the loss; `BASELINE_GRID` chosen on validation by
    accuracy (micro-F1 for label sets), test scored by the models' own metrics
    (`jcaps.train.metrics`)."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import LinearSVC

    from jcaps.train.config import class_weight_power
    from jcaps.train.metrics import multilabel_metrics, multilabel_sums

    def texts(split):
        return [record["text"].decode("utf-8") for record in dataset.splits[split].source]

    multi_label = dataset.multi_label
    field = "labels" if multi_label else "label"
    labels = {split: np.asarray(dataset.encoded(split).fields[field]) for split in ("train", "validation", "test")}
    power = class_weight_power(class_weights)
    weights = None if power is None else dict(enumerate(dataset.balanced_class_weights(power).tolist()))

    def scores(truth, predicted) -> dict:
        if multi_label:
            sums = multilabel_sums(predicted, truth, np.ones(len(predicted), np.float32))
            return {m: round(float(v), 4) for m, v in multilabel_metrics(sums).items() if m in metrics}
        return {"accuracy": round(float(accuracy_score(truth, predicted)), 4),
                "macro_f1": round(float(f1_score(truth, predicted, average="macro")), 4)}

    selection = "micro_f1" if multi_label else "accuracy"
    best = None
    for ngram_range in BASELINE_GRID["ngram_range"]:
        vectorizer = TfidfVectorizer(ngram_range=ngram_range, sublinear_tf=True, min_df=2)
        train = vectorizer.fit_transform(texts("train"))
        validation, test = vectorizer.transform(texts("validation")), vectorizer.transform(texts("test"))
        for c in BASELINE_GRID["C"]:
            svm = LinearSVC(C=c, class_weight=weights)
            model = (OneVsRestClassifier(svm) if multi_label else svm).fit(train, labels["train"])
            chosen = scores(labels["validation"], model.predict(validation))
            if best is None or chosen[selection] > best["validation"][selection]:
                best = {"ngram_range": list(ngram_range), "C": c, "validation": chosen,
                        "test": scores(labels["test"], model.predict(test))}
    return {"class_weights": class_weights, **best}


def linear_baselines(study: dict, data_root: str, cache_dir: str, tiny: bool) -> dict:
    """The study's baseline weighted as its first run's config weighs the classes (the bar), and
    unweighted beside it when that config weighs them."""
    dataset, class_weights = baseline_dataset(study, data_root, cache_dir, tiny)
    bar = tfidf_svm(dataset, study["metrics"], class_weights)
    unweighted = tfidf_svm(dataset, study["metrics"], "none") if class_weights != "none" else None
    first = next(iter(study["runs"]))
    return {"model": BASELINE, "splits_of": f"{first}_seed0", "config": study["runs"][first]["config"],
            "test": bar["test"], "bar": bar, "unweighted": unweighted}


def report(name: str, study: dict, args) -> dict:
    runs, pending = {}, []
    for run_id, spec in study["runs"].items():
        for seed in seeds_of(spec, args.tiny):
            workdir = os.path.join(args.workdirs, name, run_name(run_id, seed))
            if final_test_metrics(workdir) is None:
                pending.append(run_name(run_id, seed))
                continue
            runs[run_name(run_id, seed)] = {"run": run_id, "seed": seed, "label": spec["label"],
                                            "command": command_line(spec, args.tiny),
                                            **run_record(workdir, study["metrics"])}
    results = {"study": name, "page": study["page"], "metrics": list(study["metrics"]), "runs": runs,
               "pending": pending, "budget": "smoke runs of 3 steps, generated data" if args.tiny else "the configs'"}
    if args.baseline and runs and not study.get("series"):  # a text baseline
        results["baseline"] = linear_baselines(study, args.data_root, args.cache_dir, args.tiny)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", help=f"one of {', '.join(STUDIES)}")
    parser.add_argument("--workdirs", help="where the runs train (DIR/STUDY/RUN_seedS)")
    parser.add_argument("--data_root", default="", help="the folder holding each run's data folder")
    parser.add_argument("--runs", default="", help="train only these runs of the study (comma-separated)")
    parser.add_argument("--jobs", type=int, default=1, help="trainings at once (each pinned to a core)")
    parser.add_argument("--report_only", action="store_true", help="train nothing; report the finished runs")
    parser.add_argument("--tiny", action="store_true", help="smoke runs of 3 steps on generated data (seconds)")
    parser.add_argument("--cache_dir", default="", help="--tiny: prepared-data cache (default ~/tensorflow_datasets)")
    parser.add_argument("--baseline", action="store_true", help="add TF-IDF + linear SVM (needs scikit-learn)")
    parser.add_argument("--baseline_only", action="store_true",
                        help="compute the baseline alone into the study's results.json, its runs kept")
    parser.add_argument("--list", action="store_true", help="print the studies and their runs")
    args = parser.parse_args()
    if args.list:
        for name, study in STUDIES.items():
            for run_id, spec in study["runs"].items():
                print(f"{name}/{run_id} seeds {spec['seeds']}: {command_line(spec, False)}")
        return
    if args.study not in STUDIES:
        parser.error(f"--study: one of {', '.join(STUDIES)}, not {args.study!r}")
    if not (args.workdirs or args.baseline_only):
        parser.error("the following arguments are required: --workdirs")
    if not (args.data_root or args.tiny or args.report_only):
        parser.error("the following arguments are required: --data_root (or --tiny)")
    study = STUDIES[args.study]
    chosen = [r for r in args.runs.split(",") if r] or list(study["runs"])
    unknown = sorted(set(chosen) - set(study["runs"]))
    if unknown:
        parser.error(f"--runs: {args.study} has no runs {unknown}; it has {', '.join(study['runs'])}")
    load_average_before = os.getloadavg()[0]
    if args.baseline_only:
        path = os.path.join(ROOT, "studies", "training", "results", args.study, "results.json")
        with open(path) as f:
            results = json.load(f)
        results["baseline"] = {**linear_baselines(study, args.data_root, args.cache_dir, args.tiny),
                               "_run": run_metadata(False, load_average_before)}
        write_results(os.path.dirname(path), results)
        print(f"baseline of {args.study}: {json.dumps(results['baseline']['bar'])}")
        return
    if not args.report_only:
        todo = []
        for run_id in chosen:
            spec = study["runs"][run_id]
            for seed in seeds_of(spec, args.tiny):
                workdir = os.path.join(args.workdirs, args.study, run_name(run_id, seed))
                todo.append((workdir, train_flags(spec, study, seed, workdir, args)))
        train_pending(todo, args.jobs, on_start=lambda workdir: record_start(workdir, args.jobs))
    results = report(args.study, study, args)
    results["_run"] = run_metadata(args.tiny, load_average_before)
    folder = os.path.join(args.workdirs, args.study) if args.tiny else os.path.join(
        ROOT, "studies", "training", "results", args.study)
    write_results(folder, results)
    print(f"{len(results['runs'])} runs finished, {len(results['pending'])} pending; wrote {folder}/results.json")


if __name__ == "__main__":
    main()
