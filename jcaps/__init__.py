"""Interpretable text and sequence classifiers in JAX.

jcaps implements five papers' models, each of which explains its own predictions: capsule
networks whose routing shows which parts of a text decided the class (iCapsNets, CCCapsNet),
an LSTM whose input-cell attention keeps its saliency from vanishing over time, a dilated
causal convolution network with seven attention variants, and SGM, which generates a text's
label set one label at a time; fastText and binary relevance are the baselines. The equations
of every model, with the defaults and the decisions where jcaps departs from a paper, are in
`docs/models.md` and its pages, one per paper, with their results; `docs/training.md` and
`docs/data.md` have the commands and the data formats.

## Layers

Each layer imports only the layers below it (checked by `lint-imports` in CI):

    jcaps.command  the `jcaps` command: runs one of the entry points below
        |
    entry points   jcaps.train_command (train.py), jcaps.evaluate, jcaps.predict, jcaps.interpret,
        |          jcaps.params, jcaps.list_configs (`jcaps configs`)
    jcaps.cli      what every command shares: flag parsing, how user errors are shown
        |
    jcaps.train    config, the model table (jcaps.train.families), optimiser, model and
        |          training state, compiled steps, loading a trained workdir, metrics, the loop
    jcaps.models   one flax.linen module per paper      jcaps.data   readers -> preparation ->
        |                                                            datasets -> batching
    jcaps.ops      pure functions on arrays: capsules, attention, recurrent scans,
        |          convolutions, compositional embeddings, losses, label-set decoding
        |      jcaps.attribution  beside the ops: explaining any JAX model (attribution methods,
        |          faithfulness, sanity checks, the HTML report); jcaps.interpret applies it to a workdir
    jcaps.viz      HTML heatmaps and figures
        |
    jcaps.files    writing in a folder that may hold someone else's links (no write follows one)
        |
    jcaps.errors   the error a user can fix;   jcaps.choices   the one check of an enumerated
                   setting (`check_choice`)

- `jcaps.ops` imports no flax, optax or other jcaps package but `jcaps.choices`. Every public op takes batch-major
  arrays (`[B, T, ...]`, or any leading axes, none for one example), works under `jit`, `vmap`
  and `grad`, and states its equation, shapes and padding behaviour.
- `jcaps.models` composes ops into flax modules. A forward pass returns a `ModelOutput`:
  `scores` `[B, J]` and the model's own explanations (attention maps, coupling coefficients) in
  named fields.
- `jcaps.data` sits beside the models (neither imports the other) and imports no JAX: it turns
  local files or a TFDS catalogue dataset into padded, bucketed NumPy batches, each process's
  rows of a global batch given to it as an argument.
- `jcaps.train` finds a model by `config.model.name`, trains it and loads it back; only
  `train.py` runs the training loop.

## Where to start

- Train and use a model: `docs/getting-started.md`, as the README's quick start (`jcaps train --config
  fasttext_ag_news:smoke --workdir /tmp/ft_smoke`).
- Use the ops in your own JAX code: `jcaps.ops` names every public op (`from jcaps import ops`;
  for example `jcaps.ops.capsules.dynamic_routing`, `jcaps.ops.pooling.causal_softmax_pool`,
  `jcaps.ops.decoding.beam_search`), each with an example in its docstring.
- Read a model: its module in `jcaps.models`, beside its section of `docs/models.md`.
- Explain predictions: `jcaps.attribution` explains any JAX model (attribution methods, their
  faithfulness, sanity checks, the report); `jcaps.interpret` a trained workdir, and offers the same names.
- Add a model: a module in `jcaps.models`; one entry in `jcaps.train.families.MODELS` (its loss,
  its probabilities and its kind, text or series, which its data, commands and explanations follow);
  a file in `configs/` with a `:smoke` variant. The tests then ask for its `:smoke` config in
  `tests/smoke_configs.py` and its parameter tree in `tests/models/test_parameter_trees.py` (the
  record rewritten by running that file). Only a model with an explanation of its own (attention,
  capsules) or outputs explained otherwise than its class scores adds an entry to
  `jcaps.interpret.hooks.MODEL_HOOKS`.
"""


def __getattr__(name: str) -> str:
    # `jcaps.__version__` is read from the package metadata when asked for: importlib.metadata
    # costs every command a seventh of a second at start.
    if name != "__version__":
        raise AttributeError(f"module 'jcaps' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jcaps")
    except PackageNotFoundError:  # the source tree on sys.path without an install
        return "unknown"
