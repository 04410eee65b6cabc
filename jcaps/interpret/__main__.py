"""`python -m jcaps.interpret --workdir W [--split test] [--out DIR] [--limit N] ...`.

For an iCapsNets workdir: local.jsonl, global.json, C.png and report.html (see
`jcaps.interpret.report`; `--k1`, `--k2`, `--report_examples`). For a sequence model (the
input-cell attention LSTM and its baselines): one PNG of input and saliency maps per example and
saliency.json (see `jcaps.interpret.series_report`; `--methods`, `--limit` defaults to 8).
"""

import json
import os

from absl import flags

from jcaps import cli

from jcaps.errors import UserError
from jcaps.interpret.report import CAPSULE_MODELS, interpret_workdir
from jcaps.interpret.series_report import METHODS, saliency_report
from jcaps.models import get_family

flags.DEFINE_string("workdir", None, "A workdir written by train.py.", required=True)
flags.DEFINE_string("split", "test", "Split to interpret.")
flags.DEFINE_string("out", None, "Output directory (default WORKDIR/interpretation or WORKDIR/saliency).")
flags.DEFINE_integer("limit", None, "Interpret only the first N examples (capsules: all by default; series: 8).")
flags.DEFINE_integer("k1", 3, "Capsules selected per example (top by coupling to the prediction).")
flags.DEFINE_integer("k2", 2, "Positions selected per capsule (top by attention).")
flags.DEFINE_integer("report_examples", 12, "Examples per predicted class shown in report.html.")
flags.DEFINE_list("methods", ["saliency", "integrated_gradients"], f"Series models: maps among {', '.join(METHODS)}.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    path = os.path.join(FLAGS.workdir, "config.json")
    if not os.path.isfile(path):
        raise UserError(f"{FLAGS.workdir} has no config.json: not a jcaps workdir",
                        hint="pass the --workdir of a train.py run")
    with open(path, encoding="utf-8") as f:
        model_name = json.load(f)["model"]["name"]
    is_series = "series" in get_family(model_name).inputs
    if not is_series and model_name not in CAPSULE_MODELS:
        raise UserError(f"{FLAGS.workdir} holds a {model_name} model, which jcaps.interpret cannot explain",
                        hint=f"it explains {', '.join(CAPSULE_MODELS)} and the series models")
    if is_series:
        summary = saliency_report(FLAGS.workdir, FLAGS.split, FLAGS.out, FLAGS.limit or 8, tuple(FLAGS.methods))
        shares = " ".join(f"{s:.2f}" for s in summary["mean_share_by_tenth"])
        print(f"wrote {len(summary['examples'])} saliency figures; mean share of saliency per tenth of the series: {shares}")
        return
    summary = interpret_workdir(
        FLAGS.workdir, FLAGS.split, FLAGS.out, FLAGS.limit or 0, FLAGS.k1, FLAGS.k2, FLAGS.report_examples
    )
    sparsity = summary["sparsity"]
    print(f"interpreted; share of each class's examples in its top {sparsity['top']} capsules: "
          f"{sparsity['overall']:.3f}; MI(class; capsule) / H(class): "
          f"{summary['class_capsule_information']['normalized'] or 0:.3f}")


if __name__ == "__main__":
    cli.run(main)
