"""`python -m jcaps.evaluate --workdir W [--split test]`: metrics of a trained workdir as one JSON object."""

from __future__ import annotations

import json

from absl import app, flags

from jcaps import cli
from jcaps.errors import UserError

from jcaps.train import loop
from jcaps.train import mesh as mesh_lib
from jcaps.train.workdir import load_trained

FLAGS = flags.FLAGS


def evaluate(workdir: str, split: str = "test") -> dict:
    trained = load_trained(workdir, with_data=True)
    if split not in trained.dataset.splits:
        raise UserError(f"--split: no split {split!r}; the dataset has {', '.join(trained.dataset.splits)}")
    mesh = mesh_lib.data_mesh()
    _, eval_fn = loop.compile_steps(trained.config, trained.family, trained.dataset, mesh)
    batch_size = trained.config.train.eval_batch_size or trained.config.train.batch_size
    metrics = loop.evaluate_split(eval_fn, trained.state, trained.dataset, split, batch_size, mesh)
    return {"split": split, "step": int(trained.state.step), **metrics}


def main(argv):
    del argv
    print(json.dumps(evaluate(FLAGS.workdir, FLAGS.split)))


if __name__ == "__main__":
    # Flags are defined only when run as a program, so importing this module defines none.
    flags.DEFINE_string("workdir", None, "A workdir written by train.py.", required=True)
    flags.DEFINE_string("split", "test", "Split to evaluate: train, validation or test.")
    cli.run(main)
