"""`python -m jcaps.interpret --workdir W [--split test] [--out DIR] [--limit N] [--k1 3] [--k2 2]`.

Writes local.jsonl, global.json, C.png and report.html for a trained iCapsNets workdir
(see `jcaps.interpret.report`).
"""

from absl import app, flags

from jcaps.interpret.report import interpret_workdir

flags.DEFINE_string("workdir", None, "A workdir written by train.py (an iCapsNets model).", required=True)
flags.DEFINE_string("split", "test", "Split to interpret.")
flags.DEFINE_string("out", None, "Output directory (default WORKDIR/interpretation).")
flags.DEFINE_integer("limit", 0, "Interpret only the first N examples (0: all).")
flags.DEFINE_integer("k1", 3, "Capsules selected per example (top by coupling to the prediction).")
flags.DEFINE_integer("k2", 2, "Positions selected per capsule (top by attention).")
flags.DEFINE_integer("report_examples", 12, "Examples per predicted class shown in report.html.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    summary = interpret_workdir(
        FLAGS.workdir, FLAGS.split, FLAGS.out, FLAGS.limit, FLAGS.k1, FLAGS.k2, FLAGS.report_examples
    )
    sparsity = summary["sparsity"]
    print(f"interpreted; share of each class's examples in its top {sparsity['top']} capsules: {sparsity['overall']:.3f}")


if __name__ == "__main__":
    app.run(main)
