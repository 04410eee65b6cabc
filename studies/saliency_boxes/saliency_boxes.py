"""The input-cell attention paper's saliency benchmark on its synthetic box data
(docs/input-cell-lstm.md#synthetic-box-data-sec-5-ref).

    python -m studies.saliency_boxes.saliency_boxes --out DIR [--boxes earlier,middle,...]
        [--variants lstm,input_cell,...] [--quick | --tiny]

For every (box, variant) pair it trains `configs/input_cell_boxes.py:BOX,VARIANT` in
`DIR/runs/BOX/VARIANT` (a finished run is reused, an interrupted one resumes), computes the
gradient saliency of each test series for its true class, min-max scales its absolute value
and scores it against the box mask: weighted Jaccard (higher is better), Euclidean distance
(lower is better) and ROC-AUC, averaged over the test set. It writes

    DIR/results.json   {"<box>": {"<variant>": {"wjac", "euclidean", "auc", "accuracy", "train_series",
                        "test_series", "seconds"}}, "_run": {commit, date, machine, load:
                        `recording.provenance.run_metadata`}}
    DIR/results.md     the paper's Table 1 layout (WJac / Euc / accuracy %), the paper's rows beside
    DIR/figures/       input and saliency map of a few test series per (box, variant)

`--quick` trains on 500 series for 15 epochs and scores 100 test series: minutes, for the
README. `--tiny` trains the config's `smoke` run (20 x 20 maps, 128 series) for one epoch and
scores 16 test series: a check that it runs (seconds; the tests run it). Needs no files: the
data is generated.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import get_args

import numpy as np

from jcaps.data.boxes import BOX_NAMES, generate_boxes
from jcaps.attribution.checks import box_metrics
from jcaps.interpret.series_report import attribution_maps, predictions
from jcaps.models.choices import InputCellLSTMVariant
from jcaps.train.config import load
from jcaps.train.loop import train_and_evaluate
from jcaps.train.progress import quiet_libraries
from jcaps.train.workdir import load_trained
from jcaps.viz.figures import plot_saliency_maps
from recording.provenance import run_metadata
from studies import ROOT
from studies.saliency_boxes.paper import PAPER, TABLE_BOXES

CONFIG = os.path.join(ROOT, "configs", "input_cell_boxes.py")
FIGURES_PER_RUN = 3
TINY_TEST_SERIES = 16


def box_config(box: str, variant: str, quick: bool, tiny: bool):
    config = load(f"{CONFIG}:{box},{variant}" + (",smoke" if tiny else ""))
    if quick:
        config.data.box_train_size = 500
        config.train.num_epochs = 15
    if tiny:
        config.train.num_epochs = 1
    config.train.progress = "none"
    return config


def score_run(workdir: str, config, limit: int, figures_dir: str) -> dict:
    """Saliency metrics and accuracy on the first `limit` test series (all when 0)."""
    trained = load_trained(workdir, with_data=True)
    data = config.data
    test_masks = generate_boxes(data.box, "test", data.generator_seed, num_examples=data.box_test_size or None,
                                time_steps=data.box_time_steps, num_features=data.box_features).masks
    metrics, correct, count, drawn = [], 0, 0, 0
    for batch in trained.dataset.eval_batches("test", 100, limit=limit):
        real = batch["weight"] > 0
        maps = attribution_maps(trained, batch, "saliency")[real]
        # Test examples keep the generator's order, so example i's box is mask i.
        masks = test_masks[batch["index"][real]]
        metrics.append((box_metrics(maps, masks), int(real.sum())))
        correct += int((predictions(trained, batch)[real] == batch["label"][real]).sum())
        count += int(real.sum())
        for b in np.flatnonzero(real)[: max(0, FIGURES_PER_RUN - drawn)]:
            index = int(batch["index"][b])
            plot_saliency_maps(batch["series"][b], {"saliency": maps[b]}, os.path.join(figures_dir, f"test_{index}.png"),
                               title=f"{data.box}, {config.model.variant}: test {index}, class {batch['label'][b]}",
                               box=test_masks[index])
            drawn += 1
    total = sum(n for _, n in metrics)
    result = {key: sum(m[key] * n for m, n in metrics) / total for key in ("wjac", "euclidean", "auc")}
    result.update(accuracy=correct / count, train_series=data.box_train_size, test_series=count)
    return result


def markdown_table(results: dict, variants: list[str]) -> str:
    boxes = [box for box in BOX_NAMES if box in results]
    lines = [
        "WJac / Euclidean / test accuracy % (jcaps), with the paper's Table 1 where it has the cell.",
        "",
        "| model | " + " | ".join(boxes) + " |",
        "| --- |" + " --- |" * len(boxes),
    ]
    for variant in variants:
        cells = []
        for box in boxes:
            r = results[box].get(variant)
            cells.append(f"{r['wjac']:.3f} / {r['euclidean']:.3f} / {100 * r['accuracy']:.1f}" if r else "")
        lines.append(f"| {variant} (jcaps) | " + " | ".join(cells) + " |")
        if variant in PAPER:
            paper = dict(zip(TABLE_BOXES, PAPER[variant]))
            lines.append(f"| {variant} (paper) | " + " | ".join(paper.get(box, "") for box in boxes) + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--boxes", default=",".join(BOX_NAMES))
    parser.add_argument("--variants", default="lstm,lstm_self_attention,input_cell")
    budgets = parser.add_mutually_exclusive_group()
    budgets.add_argument("--quick", action="store_true")
    budgets.add_argument("--tiny", action="store_true", help="the smoke run, one epoch, 16 test series (seconds)")
    args = parser.parse_args()
    boxes, variants = args.boxes.split(","), args.variants.split(",")
    for name in boxes:
        if name not in BOX_NAMES:
            parser.error(f"unknown box {name!r}; expected among {', '.join(BOX_NAMES)}")
    for name in variants:
        if name not in get_args(InputCellLSTMVariant):
            parser.error(f"unknown variant {name!r}; expected among {', '.join(get_args(InputCellLSTMVariant))}")
    quiet_libraries()
    results_path = os.path.join(args.out, "results.json")
    results = {}
    if os.path.isfile(results_path):
        with open(results_path, encoding="utf-8") as f:
            results = json.load(f)
    results["_run"] = run_metadata(args.tiny)
    limit = TINY_TEST_SERIES if args.tiny else 100 if args.quick else 0
    for box in boxes:
        for variant in variants:
            config = box_config(box, variant, args.quick, args.tiny)
            workdir = os.path.join(args.out, "runs", box, variant)
            figures = os.path.join(args.out, "figures", box, variant)
            os.makedirs(figures, exist_ok=True)
            start = time.perf_counter()
            train_and_evaluate(config, workdir)
            result = score_run(workdir, config, limit, figures)
            result["seconds"] = round(time.perf_counter() - start, 1)
            results.setdefault(box, {})[variant] = result
            print(f"{box:>13} {variant:<20} wjac {result['wjac']:.3f} euclidean {result['euclidean']:.3f} "
                  f"auc {result['auc']:.3f} accuracy {result['accuracy']:.3f} ({result['seconds']} s)", flush=True)
            with open(results_path, "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2)
    table = markdown_table(results, variants)
    with open(os.path.join(args.out, "results.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
