"""Train a jcaps model: `python train.py --config configs/NAME.py --workdir DIR [--config.KEY=VALUE ...]`.

Resumes automatically when DIR holds checkpoints of the same config; see README.md.
"""

import sys

from absl import app, flags
from ml_collections import config_flags

from jcaps.data.errors import DataError
from jcaps.train.loop import IncompatibleWorkdir, NonFiniteLoss, TrainingInterrupted, train_and_evaluate

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/fasttext_ag_news.py[:smoke].", lock_config=True)
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and the resolved config.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        train_and_evaluate(FLAGS.config, FLAGS.workdir)
    except TrainingInterrupted as stopped:
        print(stopped, file=sys.stderr, flush=True)
        sys.exit(stopped.exit_code)
    except (NonFiniteLoss, IncompatibleWorkdir, DataError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
