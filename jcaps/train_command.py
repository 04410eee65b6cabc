"""Train a jcaps model: `jcaps train --config NAME[:ARG] --workdir DIR [--config.KEY=VALUE ...]`
(also `python train.py ...` in a checkout; NAME is a shipped config or a path to a config file).

Resumes automatically when DIR holds checkpoints of the same config; see docs/training.md. A DIR
trained to the end is left as it is (`--reevaluate` evaluates its final model again).

Several processes (one per host, or several on one machine) train one model together when
started with `--num_processes N --process_id I --coordinator_address HOST:PORT` (or the
environment variables JAX_NUM_PROCESSES, JAX_PROCESS_ID, JAX_COORDINATOR_ADDRESS), with
`--num_processes auto`, or with no flag under a Slurm or Open MPI launcher (`srun jcaps train
...`): JAX's `jax.distributed.initialize()` then finds the job's processes. All run with
the same `--workdir` on a shared filesystem: each reads its rows of every global batch, the
batch is split over all their devices, only process 0 logs, and checkpoints are written and
restored by all together (a checkpoint restores with any number of processes).
"""

import sys

from absl import app, flags
from ml_collections import config_flags

from jcaps import cli

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    "config", None, "Config: a shipped config's name or a config file, e.g. fasttext_ag_news:smoke.", lock_config=True
)
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and the resolved config.")
cli.define_process_flags()
flags.DEFINE_bool(
    "reevaluate",
    False,
    "A finished workdir: evaluate its final model again (replacing its final metrics) "
    "instead of saying it is finished.",
)
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    cli.initialize_processes()
    # Imported once there is work: JAX and the data libraries take seconds, `--help` none.
    from jcaps.train.loop import TrainingInterrupted, train_and_evaluate

    try:
        train_and_evaluate(FLAGS.config, FLAGS.workdir, reevaluate=FLAGS.reevaluate)
    except TrainingInterrupted as stopped:
        print(stopped, file=sys.stderr, flush=True)
        sys.exit(stopped.exit_code)


if __name__ == "__main__":
    cli.run(main)
