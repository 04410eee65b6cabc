"""`python -m jcaps.params --config configs/NAME.py [--config.KEY=VALUE ...]`: parameter counts.

Builds the vocabulary and labels from the configured data (as training would) and the model
from the config, then prints the number of parameters per top-level group of the parameter
tree and in total. Nothing is trained, and the parameters are never materialised: their shapes
come from `jax.eval_shape` of the model's init.
"""

from __future__ import annotations

from absl import app, flags
from ml_collections import config_flags

from jcaps import cli

FLAGS = flags.FLAGS


def parameter_counts(config) -> dict:
    """`{"input_size" (vocabulary or features), "inputs", "num_classes", "groups": {name: count}, "total"}` for `config`."""
    # Imported here: the data libraries and JAX take seconds, which `--help` does not need.
    from jcaps.data.datasets import load_dataset
    from jcaps.train.state import dummy_inputs, model_for, parameter_count, parameter_shapes

    dataset = load_dataset(config.data, config.train.seed)
    shapes = parameter_shapes(config, model_for(config, dataset), dummy_inputs(config, dataset))
    groups = {name: parameter_count(tree) for name, tree in shapes.items()}
    return {
        "input_size": dataset.model_input_size,
        "inputs": dataset.inputs_description,
        "num_classes": dataset.num_classes,
        "groups": groups,
        "total": sum(groups.values()),
    }


def format_counts(counts: dict) -> str:
    width = max(len(name) for name in list(counts["groups"]) + ["total"])
    lines = [f"{counts['inputs']}; {counts['num_classes']} classes"]
    lines += [f"{name:<{width}}  {count:>12,}" for name, count in counts["groups"].items()]
    lines.append(f"{'total':<{width}}  {counts['total']:>12,}")
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from jcaps.train.progress import quiet_libraries

    quiet_libraries()
    print(format_counts(parameter_counts(FLAGS.config)))


if __name__ == "__main__":
    # Flags are defined only when run as a program, so importing this module defines none.
    config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/cccapsnet_ag_news.py.", lock_config=True)
    flags.mark_flags_as_required(["config"])
    cli.run(main)
