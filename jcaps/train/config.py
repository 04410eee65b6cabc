"""Config keys every model shares, and the rules for resuming a workdir.

Each file in `configs/` starts from `base_config()`, fills in `model` and overrides defaults;
the command line then overrides any key (`--config.train.batch_size=32`). Configs are locked:
a misspelt key is an error that suggests the right one, and `validate(config)` checks every
shared key's type and range before any data is read (a `ConfigError` naming the key and value).
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import json
import math
import os
from collections.abc import Collection
from typing import Any, Literal

import ml_collections

from jcaps import strict_json
from jcaps.choices import check_choice
from jcaps.data import choices
from jcaps.errors import ConfigError
from jcaps.models.choices import RNNImpl, SGMDecoding
from jcaps.train.config_history import upgraded

# The values of the enumerated `train.*` keys (`jcaps.train.optim`, `jcaps.train.progress` and
# the training loop act on them); the `data.*` ones are in `jcaps.data.choices`, the `model.*`
# ones in `jcaps.models.choices`.
Optimizer = Literal["adam", "adamw", "sgd"]
Schedule = Literal["constant", "cosine", "linear", "warmup_cosine", "steps"]
ProgressMode = Literal["auto", "bar", "lines", "none"]
DType = Literal["float32", "bfloat16"]
# Which parameters `jcaps.train.workdir.load_trained` loads (`--parameters`): "final", those training reported as final (the best on
# validation when it selected them, else the last checkpoint's); "last", the newest checkpoint
# that is intact (a workdir whose best parameters, or last checkpoint, are damaged).
ParameterChoice = Literal["final", "last"]
# The `train.*` settings a parameter group (`train.param_groups`) sets for itself.
PARAM_GROUP_KEYS = ("learning_rate", "weight_decay")

# Keys that may change between a run and its resumption: they change neither the shapes of
# the saved state nor the data order. Everything else must match the workdir's config.
RESUMABLE_KEYS = (
    "model.rnn_impl",
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
    """The shared keys with their defaults (docs/training.md, "Configs")."""
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
    # The feature whose values group the examples (a jsonl field such as `source`): validation
    # is then carved by whole groups, so near-duplicates of one group never fall on both sides.
    data.group_key = ""
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
    data.synthetic_decoys = 0  # single keywords of other classes in each generated document

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
    # {top-level parameter subtree: {"learning_rate": ..., "weight_decay": ...}}: each subtree
    # trained at its own settings (the missing ones: train.*'s); {} = one optimiser for all.
    train.param_groups = ml_collections.ConfigDict()
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
            power = float(setting[len(prefix) :])
        except ValueError:
            power = 0.0
        if 0 < power < math.inf:  # also false for nan
            return power
    raise ConfigError(
        f"train.class_weights must be none, balanced, sqrt_balanced or balanced:P with P a positive "
        f"number, not {setting!r}"
    )


def _is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _refuse(key: str, value, requirement: str, hint: str | None = None):
    raise ConfigError(f"{key} must be {requirement}, not {value!r}", hint=hint)


def _integer(key: str, value, low: int, requirement: str = "") -> None:
    """An integer >= `low`."""
    if not _is_integer(value) or value < low:
        _refuse(key, value, requirement or f"an integer >= {low}")


def _number(key: str, value, low: float, high: float = math.inf, *, open_low=False, open_high=True) -> None:
    """A finite number in the interval from `low` to `high` (nan and inf are refused)."""
    inside = (
        _is_number(value)
        and math.isfinite(value)
        and (low < value if open_low else low <= value)
        and (value < high if open_high else value <= high)
    )
    if not inside:
        if high == math.inf:
            requirement = f"a finite number {'>' if open_low else '>='} {low:g}"
        else:
            requirement = f"a number in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
        _refuse(key, value, requirement)


def _one_of(key: str, value, choice_type: Any | Collection[str]) -> None:
    check_choice(key, value, choice_type, ConfigError)


def _boolean(key: str, value) -> None:
    if not isinstance(value, bool):
        _refuse(key, value, "True or False")


def _integers(key: str, values, low: int) -> None:
    if not isinstance(values, (tuple, list)) or not all(_is_integer(v) and v >= low for v in values):
        _refuse(key, values, f"a list of integers >= {low}")


def _param_groups(groups) -> None:
    """`train.param_groups`: settings among PARAM_GROUP_KEYS per top-level parameter subtree."""
    if not isinstance(groups, ml_collections.ConfigDict):
        _refuse("train.param_groups", groups, "a dict of parameter groups")
    for name, settings in groups.items():
        key = f"train.param_groups.{name}"
        if not isinstance(settings, ml_collections.ConfigDict) or set(settings) - set(PARAM_GROUP_KEYS):
            _refuse(key, settings, f"a dict of settings among {', '.join(PARAM_GROUP_KEYS)}")
        if "learning_rate" in settings:
            _number(f"{key}.learning_rate", settings.learning_rate, 0.0, open_low=True)
        if "weight_decay" in settings:
            _number(f"{key}.weight_decay", settings.weight_decay, 0.0)


# The vocabulary or feature count a model is built with to run its own checks before the data
# is read.
STAND_IN_INPUT_SIZE = 1000


def _model_keys(model: ml_collections.ConfigDict) -> None:
    """Every key of a known model: one its module has (or its loss reads), and of the type and
    range of the module field it sets. An `int` field is a size or a count, at least 1, or at
    least 0 where the model's default is 0 (none); a dropout rate is a fraction in [0, 1), a
    `*_scale` a number > 0, any other `float` a finite number; a `bool` is True or False; then
    `build_model` refuses a key the module lacks (naming the new name of a renamed one) and the
    module checks its choices (`routing`, `variant`, ...) itself."""
    import dataclasses

    from jcaps.train.families import build_model, get_family  # Flax: loaded only when a config is validated

    family = get_family(model.name)
    fields = {field.name: field for field in dataclasses.fields(family.module)}
    for key, value in model.items():
        field, name = fields.get(key), f"model.{key}"
        kind = getattr(field, "type", None)
        kind = kind if isinstance(kind, str) or kind is None else kind.__name__
        if kind == "bool":
            _boolean(name, value)
        elif kind == "int":
            _integer(name, value, 0 if getattr(field, "default", None) == 0 else 1)
        elif kind == "float" and "dropout" in key:
            _number(name, value, 0.0, 1.0)
        elif kind == "float" and key.endswith("_scale"):
            _number(name, value, 0.0, open_low=True)
        elif kind == "float":
            _number(name, value, -math.inf)
        elif kind == "str" and not isinstance(value, str):
            _refuse(name, value, "a string")
    # The keys the module lacks, and its own checks of its settings (a choice among its values,
    # divisibility), with stand-in sizes: the data that sizes it is not read yet.
    build_model(model, vocab_size=STAND_IN_INPUT_SIZE, num_classes=2)


def validate(config: ml_collections.ConfigDict, models: Collection[str] | None = None) -> None:
    """Checks the type and range of every shared key (and `model.threshold`, `model.rnn_impl` and
    the decoding keys where present), and that `model.name` is among `models` when given; raises `ConfigError`
    naming the key and its value. Run before any data is read, so a bad value costs seconds, not
    a data preparation."""
    from jcaps.data.boxes import BOX_NAMES  # NumPy only
    from jcaps.data.tokenizers import TOKENIZERS  # the standard library only

    model, data, train = config.model, config.data, config.train

    if not isinstance(model.name, str) or not model.name:
        _refuse("model.name", model.name, "the name of a model")
    if models is not None:
        _one_of("model.name", model.name, sorted(models))
        _model_keys(model)
    if "threshold" in model:
        _number("model.threshold", model.threshold, 0.0, 1.0, open_low=True, open_high=True)
    if "rnn_impl" in model:
        _one_of("model.rnn_impl", model.rnn_impl, RNNImpl)
    if "decoding" in model:
        _one_of("model.decoding", model.decoding, SGMDecoding)
    for key in ("beam_size", "max_steps"):
        if key in model:
            _integer(f"model.{key}", model[key], 1)
    if "length_penalty" in model:
        _number("model.length_penalty", model.length_penalty, 0.0)
    if "eos_threshold" in model:
        _number("model.eos_threshold", model.eos_threshold, 0.0, 1.0, open_high=False)

    # data: a series config (`series_config()`) has `data.normalize`; a text config does not.
    is_series = "normalize" in data
    _one_of("data.source", data.source, choices.Source)
    _one_of("data.format", data.format, choices.SeriesFormat if is_series else choices.TextFormat)
    if (
        not isinstance(data.text_keys, (tuple, list))
        or not data.text_keys
        or not all(isinstance(k, str) and k for k in data.text_keys)
    ):
        _refuse("data.text_keys", data.text_keys, "a non-empty list of feature names")
    if not isinstance(data.label_key, str) or not data.label_key:
        _refuse("data.label_key", data.label_key, "a feature name ('label', or 'labels' for multi-label data)")
    if is_series:
        _integer("data.max_len", data.max_len, 0, "an integer >= 0 (0: the longest series)")
        _one_of("data.normalize", data.normalize, choices.Normalization)
        _number("data.test_fraction", data.test_fraction, 0.0, 1.0)
        _one_of("data.box", data.box, BOX_NAMES)
        _integer("data.generator_seed", data.generator_seed, 0)
        for key in ("box_train_size", "box_test_size"):
            _integer(f"data.{key}", data[key], 0, "an integer >= 0 (0: the paper's size)")
        for key in ("box_time_steps", "box_features"):
            _integer(f"data.{key}", data[key], 1)
    else:
        _one_of("data.tokenizer", data.tokenizer, TOKENIZERS)
        _integer("data.max_len", data.max_len, 1)
        _integer("data.max_sentences", data.max_sentences, 1)
    _integer("data.min_count", data.min_count, 1)
    if not _is_integer(data.max_size) or data.max_size < 0 or data.max_size == 1:
        _refuse("data.max_size", data.max_size, "0 (no limit) or an integer >= 2 (PAD and UNK included)")
    _number("data.validation_fraction", data.validation_fraction, 0.0, 1.0)
    if is_series and data.group_key:
        _refuse("data.group_key", data.group_key, "'' (series formats have no group field)")
    if data.group_key in ("text", "line", data.label_key):
        _refuse("data.group_key", data.group_key, "a feature besides the text and labels")
    _integers("data.bucket_boundaries", data.bucket_boundaries, 1)
    _integer("data.length_grouping", data.length_grouping, 0, "an integer >= 0 (batches per sorting window)")
    _boolean("data.drop_bad_rows", data.drop_bad_rows)
    _one_of("data.label_order", data.label_order, choices.LabelOrder)
    for key in ("synthetic_train_size", "synthetic_test_size"):
        _integer(f"data.{key}", data[key], 1)
    _integer("data.synthetic_decoys", data.synthetic_decoys, 0)

    _integer("train.seed", train.seed, 0)
    _integer("train.batch_size", train.batch_size, 1)
    _integer("train.eval_batch_size", train.eval_batch_size, 0, "an integer >= 0 (0: train.batch_size)")
    _integer("train.num_steps", train.num_steps, 0, "an integer >= 0 (0: train.num_epochs)")
    if train.num_steps == 0:
        _integer("train.num_epochs", train.num_epochs, 1, "an integer >= 1 (or set train.num_steps)")
    _one_of("train.optimizer", train.optimizer, Optimizer)
    _number("train.learning_rate", train.learning_rate, 0.0, open_low=True)
    _number("train.weight_decay", train.weight_decay, 0.0)
    _param_groups(train.param_groups)
    _one_of("train.schedule", train.schedule, Schedule)
    _number("train.warmup_fraction", train.warmup_fraction, 0.0, 1.0)
    if not isinstance(train.decay_boundaries, (tuple, list)) or not all(
        _is_number(f) and 0 <= f <= 1 for f in train.decay_boundaries
    ):
        _refuse("train.decay_boundaries", train.decay_boundaries, "a list of fractions of training in [0, 1]")
    _number("train.decay_factor", train.decay_factor, 0.0, open_low=True)
    _number("train.grad_clip_norm", train.grad_clip_norm, 0.0)
    class_weight_power(train.class_weights)
    _integer("train.eval_every_steps", train.eval_every_steps, 0, "an integer >= 0 (0: at the end of each epoch)")
    _integer(
        "train.checkpoint_every_steps", train.checkpoint_every_steps, 0, "an integer >= 0 (0: at the end of each epoch)"
    )
    _integer("train.keep_checkpoints", train.keep_checkpoints, 1)
    _integer("train.log_every_steps", train.log_every_steps, 1)
    _one_of("train.progress", train.progress, ProgressMode)
    _boolean("train.select_best", train.select_best)
    if not isinstance(train.select_metric, str) or not train.select_metric:
        _refuse("train.select_metric", train.select_metric, "the name of a validation metric")
    _one_of("train.dtype", train.dtype, DType)
    if not isinstance(train.compilation_cache, str):
        _refuse("train.compilation_cache", train.compilation_cache, "'auto', a directory or '' (off)")
    _integer("train.profile_steps", train.profile_steps, 0)


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
    return strict_json.dumps(json.loads(config.to_json()), indent=2, sort_keys=True)


def incompatible_keys(saved: dict, config: ml_collections.ConfigDict) -> list[str]:
    """Keys whose values differ between a workdir's saved config and `config`."""
    old, new = flatten(saved), flatten(json.loads(config.to_json()))
    return sorted(key for key in old.keys() | new.keys() if key not in RESUMABLE_KEYS and old.get(key) != new.get(key))


def from_json(text: str, source: str = "config.json") -> ml_collections.ConfigDict:
    """A saved `config.json` (read from `source`, which errors name) back as a locked ConfigDict
    (tuples restored from lists, under today's keys: `upgraded`)."""

    def tuples(value):
        if isinstance(value, dict):
            return {k: tuples(v) for k, v in value.items()}
        if isinstance(value, list):
            return tuple(tuples(v) for v in value)
        return value

    config = ml_collections.ConfigDict(upgraded(tuples(json.loads(text)), source))
    config.lock()
    return config


def compilation_cache_dir(setting: str) -> str:
    """The persistent compilation cache directory of `train.compilation_cache` ('' = off)."""
    if setting == "auto":
        return os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "jcaps", "jax")
    return os.path.expanduser(setting)


def shipped_configs_dir() -> str:
    """The folder of the configs shipped with jcaps: the package `jcaps.configs`, which the
    distribution maps onto the repository's `configs/` (pyproject.toml), or that folder itself in
    a checkout whose install predates the mapping."""
    spec = importlib.util.find_spec("jcaps.configs")
    if spec is not None and spec.submodule_search_locations:
        return next(iter(spec.submodule_search_locations))
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")


def shipped_configs() -> dict[str, str]:
    """{name: summary} of the shipped configs, by name: each file's docstring's first paragraph on
    one line, read from the file without running it."""
    folder = shipped_configs_dir()
    summaries = {}
    for file in sorted(os.listdir(folder)):
        if not file.endswith(".py") or file.startswith("_"):
            continue
        with open(os.path.join(folder, file), encoding="utf-8") as f:
            docstring = ast.get_docstring(ast.parse(f.read(), file)) or ""
        summaries[file.removesuffix(".py")] = " ".join(docstring.split("\n\n", 1)[0].split())
    return summaries


def closest_config_name(name: str) -> str | None:
    """The shipped config's name closest to a misspelt `name`, or None when none is close."""
    matches = difflib.get_close_matches(name, list(shipped_configs()), n=1)
    return matches[0] if matches else None


def resolve(name_or_path_with_arg: str) -> str:
    """`PATH[:ARG]` for a config given as a file (kept as it is) or as a shipped config's bare
    name (`fasttext_ag_news:smoke` -> `.../configs/fasttext_ag_news.py:smoke`)."""
    name, colon, arg = name_or_path_with_arg.partition(":")
    if os.path.isfile(name) or os.sep in name or name.endswith(".py"):
        return name_or_path_with_arg
    shipped = os.path.join(shipped_configs_dir(), name + ".py")
    return shipped + colon + arg if os.path.isfile(shipped) else name_or_path_with_arg


def load(path_with_arg: str) -> ml_collections.ConfigDict:
    """The config of `configs/NAME.py[:ARG]` (or a shipped config's `NAME[:ARG]`) as
    `jcaps train --config` builds it (`get_config(ARG)`), unlocked, for scripts and tests that
    change it before training.

    Example:
      config = load("configs/fasttext_ag_news.py:smoke")
      config.train.num_steps = 10
    """
    path, _, arg = resolve(path_with_arg).partition(":")
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path} not found")
    name = "jcaps_config_" + "".join(c if c.isalnum() else "_" for c in os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"config file {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg) if arg else module.get_config()
