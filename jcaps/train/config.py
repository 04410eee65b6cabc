"""Config keys every model shares, and the rules for resuming a workdir.

Each file in `configs/` starts from `base_config()`, fills in `model` and overrides defaults;
the command line then overrides any key (`--config.train.batch_size=32`). Configs are locked:
a misspelt key is an error that suggests the right one.
"""

from __future__ import annotations

import json
import math
from typing import Any

import ml_collections

from jcaps.errors import ConfigError

# Keys that may change between a run and its resumption: they change neither the shapes of
# the saved state nor the data order. Everything else must match the workdir's config.
RESUMABLE_KEYS = (
    "data.dir",
    "data.cache_dir",
    "train.num_epochs",
    "train.num_steps",
    "train.eval_every_steps",
    "train.checkpoint_every_steps",
    "train.keep_checkpoints",
    "train.log_every_steps",
    "train.progress",
    "train.select_best",
    "train.compilation_cache",
    "train.profile_steps",
)


def base_config() -> ml_collections.ConfigDict:
    """The shared keys with their defaults (see ARCHITECTURE.md)."""
    config = ml_collections.ConfigDict()

    config.model = ml_collections.ConfigDict()
    config.model.name = ""

    data = config.data = ml_collections.ConfigDict()
    # 'auto': the local files of `format` in `dir` when `dir` is set, else the TFDS catalogue
    # dataset `name`. 'tfds' and 'local' force one of the two; 'synthetic' generates a small
    # learnable dataset (offline jobs and tests).
    data.source = "auto"
    data.name = ""  # TFDS catalogue name, e.g. 'ag_news_subset'
    data.format = "zhang_csv"  # local format: zhang_csv | jsonl | text_labels
    data.dir = ""
    data.cache_dir = ""  # where prepared TFDS data lives; '' = ~/tensorflow_datasets
    data.train_file = ""  # for jsonl / text_labels: file (stem) of the training split
    data.test_file = ""
    data.text_keys = ("text",)  # catalogue datasets: features joined into the text
    data.label_key = "label"
    data.tokenizer = "zhang"  # zhang | chars | lowercase_chars | sentences (jcaps.data.tokenizers)
    data.max_len = 400
    data.max_sentences = 30  # 'sentences' tokenizer only
    data.min_count = 1
    data.max_size = 0  # 0: no limit
    data.validation_fraction = 0.05
    data.bucket_boundaries = ()  # () = powers of two from 16 up to max_len
    # Training batches of similar lengths: each epoch's shuffled order is sorted by length in
    # windows of this many batches (0: off, batches are plain random samples). Pads less.
    data.length_grouping = 0
    # Bad rows (an empty text, a malformed line) are errors; True leaves them out instead, and
    # the count dropped per file is printed and kept in WORKDIR/dropped_rows.json.
    data.drop_bad_rows = False
    # Multi-label sequence models: the order in which an example's labels are generated,
    # frequency (most frequent in train first) | alphabetical | given (as in the file).
    data.label_order = "frequency"
    data.synthetic_train_size = 512  # 'synthetic' source only
    data.synthetic_test_size = 128

    train = config.train = ml_collections.ConfigDict()
    train.seed = 0
    train.batch_size = 64
    train.eval_batch_size = 0  # 0: same as batch_size
    train.num_epochs = 5
    train.num_steps = 0  # > 0 overrides num_epochs
    train.optimizer = "adam"  # adam | adamw | sgd
    train.learning_rate = 1e-3
    train.weight_decay = 0.0
    train.schedule = "constant"  # constant | cosine | linear | warmup_cosine | steps
    train.warmup_fraction = 0.0
    train.decay_boundaries = ()  # 'steps' schedule: fractions of training ...
    train.decay_factor = 0.1  # ... at which the learning rate is multiplied by this
    train.grad_clip_norm = 5.0  # 0: no clipping
    # none | balanced (each class weighs the same in the loss) | sqrt_balanced (half-way, in
    # the exponent: weights (N / (J N_c)) ** 0.5) | balanced:P (weights (N / (J N_c)) ** P)
    train.class_weights = "none"
    train.eval_every_steps = 0  # 0: at the end of each epoch
    train.checkpoint_every_steps = 0  # 0: at the end of each epoch
    train.keep_checkpoints = 3
    train.log_every_steps = 50
    train.progress = "auto"  # auto | bar | lines | none
    # Model selection: the final evaluation uses the parameters of the best validation
    # `select_metric` (higher is better) seen at the periodic evaluations, not the last ones.
    train.select_best = True
    train.select_metric = "accuracy"
    train.dtype = "float32"  # activations; params stay float32
    # JAX's persistent compilation cache: 'auto' = ~/.cache/jcaps/jax (shared by all runs, so a
    # rerun or a resumed run skips compiling), a directory, or '' (off).
    train.compilation_cache = "auto"
    train.profile_steps = 0  # > 0: a profiler trace of that many steps in WORKDIR/profile
    return config


def series_config() -> ml_collections.ConfigDict:
    """`base_config()` with the data keys of numeric sequences (`jcaps.data.series`)."""
    config = base_config()
    data = config.data
    data.format = "ts"  # ts | idx | boxes
    data.max_len = 0  # 0: the longest series in the data
    data.normalize = "time_feature"  # time_feature [ref] | feature | none
    data.test_fraction = 0.0  # > 0: carve the test split from train (data without a test file)
    data.box = "earlier"  # 'boxes' only: earlier | middle | latter | mixed | three_earlier | ...
    data.generator_seed = 0  # 'boxes' only: the data, fixed whatever train.seed is
    data.box_train_size = 0  # 0: the paper's sizes
    data.box_test_size = 0
    data.box_time_steps = 100
    data.box_features = 100
    return config


def class_weight_power(setting: str) -> float | None:
    """The exponent P of the class weights (N / (J N_c)) ** P that `train.class_weights` names
    (None: no class weights)."""
    named = {"none": None, "balanced": 1.0, "sqrt_balanced": 0.5}
    if setting in named:
        return named[setting]
    prefix = "balanced:"
    if setting.startswith(prefix):
        try:
            power = float(setting[len(prefix):])
        except ValueError:
            power = 0.0
        if 0 < power < math.inf:  # also false for nan
            return power
    raise ConfigError(
        f"train.class_weights must be none, balanced, sqrt_balanced or balanced:P with P a positive "
        f"number, not {setting!r}"
    )


def flatten(config: ml_collections.ConfigDict | dict, prefix: str = "") -> dict[str, Any]:
    """`{'train.seed': 0, ...}` for every leaf; tuples become lists (JSON's view)."""
    items = config.items() if hasattr(config, "items") else config
    flat: dict[str, Any] = {}
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, (dict, ml_collections.ConfigDict)):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = list(value) if isinstance(value, tuple) else value
    return flat


def to_json(config: ml_collections.ConfigDict) -> str:
    return json.dumps(json.loads(config.to_json()), indent=2, sort_keys=True)


def incompatible_keys(saved: dict, config: ml_collections.ConfigDict) -> list[str]:
    """Keys whose values differ between a workdir's saved config and `config`."""
    old, new = flatten(saved), flatten(json.loads(config.to_json()))
    return sorted(
        key
        for key in old.keys() | new.keys()
        if key not in RESUMABLE_KEYS and old.get(key) != new.get(key)
    )


def from_json(text: str) -> ml_collections.ConfigDict:
    """A saved `config.json` back as a locked ConfigDict (tuples restored from lists)."""

    def tuples(value):
        if isinstance(value, dict):
            return {k: tuples(v) for k, v in value.items()}
        if isinstance(value, list):
            return tuple(tuples(v) for v in value)
        return value

    config = ml_collections.ConfigDict(tuples(json.loads(text)))
    config.lock()
    return config
