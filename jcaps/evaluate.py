"""`python -m jcaps.evaluate --workdir W [--split test] [--config.data.dir=D] [--config.data.cache_dir=C]
[--config.model.KEY=VALUE ...]`.

Prints the metrics of a trained workdir on one split as one JSON object, with which parameters
were scored: `parameters` is "best" (those of the best validation evaluation, which training
reported as final when it selected one) or "last" (the last checkpoint's), `selected_step` the
step they come from and `last_step` the step of the last checkpoint. Damaged parameters stop it
with one line naming the file; `--parameters last` scores the newest intact checkpoint instead.

The data is read from where the workdir's config says (`data.dir`), or from `--config.data.dir`
(the spelling train.py takes) after it moved. Locations the command writes to or loads compiled
code from come from the command line alone, never from the workdir (which is data, perhaps
someone else's): prepared data is kept in `--config.data.cache_dir` (default
~/tensorflow_datasets), compiled programs in `--compilation_cache` (default 'auto',
$XDG_CACHE_HOME/jcaps/jax; '' turns it off).

Decoding settings (`cli.DECODING_KEYS`: SGM's `decoding`, `beam_size`, `max_steps`,
`length_penalty`, `eos_threshold`; binary relevance's `threshold`) may be changed for the
evaluation, so that they can be chosen on the validation split after training; the output then
lists them under `model_overrides`. Example:

    python -m jcaps.evaluate --workdir W --split validation --config.model.length_penalty=1.0
"""

from __future__ import annotations

import math

from absl import flags

from jcaps import cli, strict_json
from jcaps.errors import UserError

FLAGS = flags.FLAGS


def evaluate(
    workdir: str,
    split: str = "test",
    data_overrides: dict | None = None,
    model_overrides: dict | None = None,
    parameters: str = "final",
) -> dict:
    """`{"split", "selected_step", "parameters", "last_step", **metrics}` of `workdir` on `split`.
    `data_overrides`: `data.*` keys of the workdir's config to change (`cli.DATA_LOCATION_KEYS`);
    `model_overrides`: `model.*` decoding keys to change (`cli.DECODING_KEYS`); `parameters`: which
    parameters to score (`jcaps.train.config.ParameterChoice`)."""
    from jcaps.train import mesh as mesh_lib
    from jcaps.train.evaluation import evaluate_split
    from jcaps.train.steps import compile_steps
    from jcaps.train.workdir import check_split, load_trained

    for key in data_overrides or {}:
        if key not in cli.DATA_LOCATION_KEYS:
            raise UserError(
                f"--config.data.{key}: evaluate changes only {', '.join(cli.DATA_LOCATION_KEYS)} of config.data"
            )
    for key in model_overrides or {}:
        if key not in cli.DECODING_KEYS:
            raise UserError(
                f"--config.model.{key}: evaluate changes only the decoding keys "
                f"{', '.join(cli.DECODING_KEYS)} of config.model"
            )
    trained = load_trained(
        workdir, with_data=True, data_overrides=data_overrides, model_overrides=model_overrides, parameters=parameters
    )
    check_split(trained, split, workdir)
    mesh = mesh_lib.data_mesh()
    _, eval_fn = compile_steps(trained.config, trained.family, trained.dataset.num_classes, mesh)
    batch_size = trained.config.train.eval_batch_size or trained.config.train.batch_size
    metrics = evaluate_split(eval_fn, trained.eval_state(), trained.dataset, split, batch_size, mesh)
    not_finite = [f"{key} {value}" for key, value in metrics.items() if not math.isfinite(value)]
    if not_finite:
        raise UserError(
            f"the {trained.parameters} parameters of {workdir} (step {trained.selected_step}) score "
            f"{', '.join(not_finite)} on the {split} split: not finite",
            hint="--parameters last scores the newest intact checkpoint instead",
        )
    overrides = {"model_overrides": dict(model_overrides)} if model_overrides else {}
    return {"split": split, **trained.selection, **overrides, **metrics}


def main(argv):
    del argv
    from jcaps.train.workdir import use_compilation_cache

    use_compilation_cache(FLAGS.compilation_cache)
    print(
        strict_json.dumps(
            evaluate(
                FLAGS.workdir, FLAGS.split, cli.data_location_overrides(), cli.decoding_overrides(), FLAGS.parameters
            )
        )
    )


if __name__ == "__main__":
    # Flags are defined only when run as a program, so importing this module defines none.
    flags.DEFINE_string("workdir", None, "A workdir written by jcaps train.", required=True)
    flags.DEFINE_string("split", "test", "Split to evaluate: train, validation or test.")
    cli.define_data_location_flags()
    cli.define_decoding_flags()
    cli.define_parameters_flag()
    cli.define_compilation_cache_flag()
    cli.run(main)
