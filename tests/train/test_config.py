"""The training config: settings parsed rather than read as they are, and `validate`, which
checks every shared key's type and range before any data is read."""

from __future__ import annotations

import glob
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from typing import get_args

import ml_collections
import pytest

from jcaps.data.boxes import BOX_NAMES
from jcaps.errors import ConfigError
from jcaps.models.choices import DilatedFCNAttention, InputCellLSTMVariant
from jcaps.train.config import (
    base_config,
    class_weight_power,
    from_json,
    incompatible_keys,
    load,
    series_config,
    to_json,
    validate,
)
from jcaps.train.config_history import upgraded
from jcaps.train.config_blocks import parse_argument
from jcaps.train.families import MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    "setting, power",
    [("none", None), ("balanced", 1.0), ("sqrt_balanced", 0.5), ("balanced:0.25", 0.25), ("balanced:2", 2.0)],
)
def test_class_weight_settings_name_their_exponent(setting, power):
    assert class_weight_power(setting) == power


@pytest.mark.parametrize("setting", ["", "sqrt", "balanced:", "balanced:x", "balanced:0", "balanced:-1",
                                     "balanced:inf", "balanced:nan", "balanced: 0.5x"])
def test_a_bad_class_weight_setting_names_the_field_and_the_value(setting):
    with pytest.raises(ValueError, match=r"train\.class_weights must be .* not " + re.escape(repr(setting))):
        class_weight_power(setting)


# ---------------------------------------------------------------------------------------------
# validate: every shared key's type and range, before any data is read
# ---------------------------------------------------------------------------------------------


def text_config():
    config = base_config()
    config.model.name = "fasttext"
    return config


def ts_config():
    config = series_config()
    config.model.name = "input_cell_lstm"
    return config


REFUSED = [
    ("train.num_epochs", 0, r"an integer >= 1 \(or set train\.num_steps\)"),
    ("train.num_epochs", -3, r"an integer >= 1 \(or set train\.num_steps\)"),
    ("train.num_steps", -1, "an integer >= 0"),
    ("train.batch_size", 0, "an integer >= 1"),
    ("train.eval_batch_size", -1, "an integer >= 0"),
    ("train.seed", -1, "an integer >= 0"),
    ("train.learning_rate", math.nan, "a finite number > 0"),
    ("train.learning_rate", math.inf, "a finite number > 0"),
    ("train.learning_rate", 0.0, "a finite number > 0"),
    ("train.learning_rate", -1.0, "a finite number > 0"),
    ("train.weight_decay", -0.1, "a finite number >= 0"),
    ("train.weight_decay", math.nan, "a finite number >= 0"),
    ("train.warmup_fraction", 1.0, r"a number in \[0, 1\)"),
    ("train.warmup_fraction", -0.5, r"a number in \[0, 1\)"),
    ("train.decay_boundaries", (0.5, 1.5), r"a list of fractions of training in \[0, 1\]"),
    ("train.decay_factor", 0.0, "a finite number > 0"),
    ("train.decay_factor", math.inf, "a finite number > 0"),
    ("train.grad_clip_norm", -1.0, "a finite number >= 0"),
    ("train.optimizer", "adamx", "one of adam, adamw, sgd"),
    ("train.schedule", "cosin", "one of constant, cosine, linear, warmup_cosine, steps"),
    ("train.progress", "bars", "one of auto, bar, lines, none"),
    ("train.dtype", "float16", "one of float32, bfloat16"),
    ("train.class_weights", "balanced:0", "none, balanced, sqrt_balanced or balanced:P"),
    ("train.eval_every_steps", -1, "an integer >= 0"),
    ("train.checkpoint_every_steps", -1, "an integer >= 0"),
    ("train.log_every_steps", 0, "an integer >= 1"),
    ("train.keep_checkpoints", 0, "an integer >= 1"),
    ("train.profile_steps", -2, "an integer >= 0"),
    ("train.select_metric", "", "the name of a validation metric"),
    ("data.validation_fraction", 1.0, r"a number in \[0, 1\)"),
    ("data.validation_fraction", math.nan, r"a number in \[0, 1\)"),
    ("data.source", "web", "one of auto, tfds, local, synthetic"),
    ("data.format", "csv", "one of zhang_csv, jsonl, text_labels"),
    ("data.format", "ts", "one of zhang_csv, jsonl, text_labels"),  # a series format in a text config
    ("data.tokenizer", "words", "one of zhang, chars"),
    ("data.label_order", "random", "one of frequency, alphabetical, given"),
    ("data.max_len", 0, "an integer >= 1"),
    ("data.max_sentences", 0, "an integer >= 1"),
    ("data.min_count", 0, "an integer >= 1"),
    ("data.max_size", 1, r"0 \(no limit\) or an integer >= 2"),
    ("data.bucket_boundaries", (16, 0), "a list of integers >= 1"),
    ("data.length_grouping", -1, "an integer >= 0"),
    ("data.text_keys", (), "a non-empty list of feature names"),
    ("data.synthetic_train_size", 0, "an integer >= 1"),
    ("data.synthetic_decoys", -1, "an integer >= 0"),
    ("model.name", "", "the name of a model"),
]


@pytest.mark.parametrize("key, value, requirement", REFUSED, ids=[f"{k}={v!r}" for k, v, _ in REFUSED])
def test_validate_refuses_a_bad_value_naming_the_key_and_the_value(key, value, requirement):
    config = text_config()
    section, name = key.split(".")
    config[section][name] = value
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be (.*){requirement}(.*), not {re.escape(repr(value))}$"):
        validate(config, MODELS)


def test_the_num_epochs_message_reads_as_documented():
    config = text_config()
    config.train.num_epochs = 0
    with pytest.raises(ConfigError) as error:
        validate(config)
    assert str(error.value) == "train.num_epochs must be an integer >= 1 (or set train.num_steps), not 0"
    config.train.num_steps = 10  # then num_epochs is not used
    validate(config)


SERIES_REFUSED = [
    ("data.max_len", -1, "an integer >= 0"),
    ("data.test_fraction", 1.0, r"a number in \[0, 1\)"),
    ("data.normalize", "zscore", "one of time_feature, feature, none"),
    ("data.format", "jsonl", "one of ts, idx, boxes"),  # a text format in a series config
    ("data.box", "late", "one of earlier, middle"),
    ("data.box_time_steps", 0, "an integer >= 1"),
    ("data.box_train_size", -1, "an integer >= 0"),
]


@pytest.mark.parametrize("key, value, requirement", SERIES_REFUSED, ids=[f"{k}={v!r}" for k, v, _ in SERIES_REFUSED])
def test_validate_refuses_bad_series_values(key, value, requirement):
    config = ts_config()
    validate(config, MODELS)
    config.data[key.split(".")[1]] = value
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be (.*){requirement}(.*), not {re.escape(repr(value))}$"):
        validate(config, MODELS)


def test_series_max_len_may_be_zero_text_max_len_may_not():
    config = ts_config()
    config.data.max_len = 0  # the longest series in the data
    validate(config)
    text = text_config()
    text.data.max_len = 0
    with pytest.raises(ConfigError, match=r"^data\.max_len"):
        validate(text)


@pytest.mark.parametrize("value", [1.5, 0.0, 1.0, -0.2, math.nan])
def test_a_threshold_must_lie_strictly_between_0_and_1(value):
    config = text_config()
    config.model.threshold = 0.5
    validate(config)
    config.model.threshold = value
    with pytest.raises(ConfigError, match=rf"^model\.threshold must be a number in \(0, 1\), not {re.escape(repr(value))}$"):
        validate(config)


def test_parameter_group_settings_are_checked():
    config = text_config()
    config.train.param_groups = ml_collections.ConfigDict({"embedding": {"learning_rate": 1e-2}, "encoder": {}})
    validate(config)
    for setting, value, requirement in [("learning_rate", 0.0, "a finite number > 0"),
                                        ("learning_rate", math.nan, "a finite number > 0"),
                                        ("weight_decay", -1e-3, "a finite number >= 0")]:
        bad = text_config()
        bad.train.param_groups = ml_collections.ConfigDict({"embedding": {setting: value}})
        with pytest.raises(ConfigError, match=rf"^train\.param_groups\.embedding\.{setting} must be {requirement}, "
                                              rf"not {value!r}$"):
            validate(bad)
    bad = text_config()
    bad.train.param_groups = ml_collections.ConfigDict({"embedding": {"momentum": 0.9}})
    with pytest.raises(ConfigError, match=r"^train\.param_groups\.embedding must be a dict of settings among "
                                          r"learning_rate, weight_decay"):
        validate(bad)


def test_an_unknown_model_name_lists_the_known_ones():
    config = text_config()
    config.model.name = "fastext"
    validate(config)  # without the model table, only the key's type is checked
    with pytest.raises(ConfigError, match=r"^model\.name must be one of .*fasttext.*, not 'fastext'$"):
        validate(config, MODELS)


CCCAPSNET_ABLATIONS = ["cwc-capsule", "normal-capsule", "cc-capsule", "cwc-linear", "normal-linear", "dynamic",
                       "iter1", "iter5", "k+1", "k+2"]


def _config_arguments(path: str) -> list[str]:
    """Each argument a config file takes, alone and with ',smoke' (and '' for its default)."""
    variants = {
        "cccapsnet_ag_news.py": CCCAPSNET_ABLATIONS,
        "dilated_fcn_emoji.py": list(get_args(DilatedFCNAttention)),
        "input_cell_boxes.py": list(BOX_NAMES) + [f"middle,{v}" for v in get_args(InputCellLSTMVariant)],
        "input_cell_basicmotions.py": list(get_args(InputCellLSTMVariant)),
        "input_cell_japanese_vowels.py": list(get_args(InputCellLSTMVariant)),
        "input_cell_mnist.py": list(get_args(InputCellLSTMVariant)),
    }.get(os.path.basename(path), [])
    return [""] + variants + [",".join(filter(None, (v, "smoke"))) for v in [""] + variants]


# Every config file (configs/__init__.py only makes the folder the package jcaps.configs).
CONFIG_FILES = sorted(path for path in glob.glob(os.path.join(ROOT, "configs", "*.py"))
                      if not os.path.basename(path).startswith("__"))


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_every_config_passes_validation_with_each_of_its_arguments(path):
    arguments = _config_arguments(path)
    for arg in arguments:
        validate(load(f"{path}:{arg}"), MODELS)


@pytest.mark.slow
def test_train_py_stops_on_a_bad_value_with_one_error_line_and_no_checkpoint(tmp_path):
    workdir = tmp_path / "run"
    command = [sys.executable, os.path.join(ROOT, "train.py"), "--config",
               os.path.join(ROOT, "configs", "fasttext_ag_news.py") + ":smoke", "--workdir", str(workdir),
               f"--config.data.cache_dir={tmp_path / 'tfds'}", "--config.train.learning_rate=nan"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: train.learning_rate must be a finite number > 0, not nan"], result.stderr
    assert "Traceback" not in result.stderr
    assert not (workdir / "checkpoints").exists()
    assert not (tmp_path / "tfds").exists()  # no data was read or prepared


def test_load_builds_a_config_file_with_its_argument():
    smoke = load(os.path.join(ROOT, "configs", "fasttext_ag_news.py:smoke"))
    full = load(os.path.join(ROOT, "configs", "fasttext_ag_news.py"))
    assert smoke.model.name == full.model.name == "fasttext"
    assert smoke.data.source == "synthetic" and full.data.source != "synthetic"
    with pytest.raises(ConfigError, match="no_such.py not found"):
        load(os.path.join(ROOT, "configs", "no_such.py:smoke"))


@pytest.mark.slow
def test_configs_load_from_any_working_directory_without_model_code(tmp_path):
    """Config files share `jcaps.train.config_blocks` (not each other through `sys.path`) and
    build their keys without JAX, Flax, Optax or any model module."""
    paths = [f"{path}:{arg}" for path in CONFIG_FILES for arg in _config_arguments(path)]
    script = textwrap.dedent(f"""
        import json, sys
        from jcaps.train.config import load
        path_before = list(sys.path)
        for path_with_arg in {paths!r}:
            load(path_with_arg)
        print(json.dumps({{"modules": sorted(sys.modules), "path_changed": sys.path != path_before}}))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False,
                            timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert not loaded["path_changed"]
    model_code = [name for name in loaded["modules"] if name.split(".")[0] in ("jax", "flax", "optax", "tensorflow")
                  or (name.startswith("jcaps.models.") and name != "jcaps.models.choices")]
    assert model_code == []


def test_a_config_argument_names_smoke_and_at_most_one_name_of_each_choice():
    boxes, variants = ("earlier", "middle"), ("lstm", "bilstm")
    argument = parse_argument("middle,smoke,lstm", boxes, variants)
    assert argument.smoke and argument.names == ("middle", "lstm")
    assert (argument.choice(boxes, "earlier"), argument.choice(variants, "input_cell")) == ("middle", "lstm")
    plain = parse_argument("", boxes, variants)
    assert not plain.smoke and plain.choice(boxes, "earlier") == "earlier"
    assert parse_argument("k+1,dynamic,k+2", repeatable=("dynamic", "k+1", "k+2")).names == ("k+1", "dynamic", "k+2")
    for bad in ("lstm,bilstm", "middle,earlier", "smoke,late"):
        with pytest.raises(ValueError, match=rf"^unknown config argument '{bad}'; expected '' or comma-separated names: "
                                             r"'smoke', at most one of \(earlier, middle\), at most one of "
                                             r"\(lstm, bilstm\)$"):
            parse_argument(bad, boxes, variants)
    with pytest.raises(ValueError, match=r"^unknown config argument 'large'; expected '' or comma-separated names: 'smoke'$"):
        load(os.path.join(ROOT, "configs", "fasttext_ag_news.py:large"))


def test_a_model_setting_the_module_rejects_is_a_config_error():
    """A module's own check of its settings (here an even region-convolution width) reaches the
    user as one line naming config.model, not as a traceback."""
    from jcaps.train.families import build_model

    config = load(os.path.join(ROOT, "configs", "icapsnet_short_ag_news.py:smoke"))
    config.model.kernel_size = 4
    with pytest.raises(ConfigError, match=r"^config.model: kernel_size must be a positive odd integer .*, got 4$"):
        build_model(config.model, 50, 4)
    config.model.kernel_size, config.model.no_such_knob = 3, 1
    with pytest.raises(ConfigError, match="has no setting"):
        build_model(config.model, 50, 4)


def test_a_saved_config_with_a_removed_key_at_its_only_value_loads_without_it():
    """iCapsNets' routing-study knobs left the model: a workdir saved with them at the paper's
    values reads as today's config; any other value is one line naming the file and the key."""
    config = load(os.path.join(ROOT, "configs", "icapsnet_short_ag_news.py:smoke"))
    saved = json.loads(to_json(config))
    saved["model"].update(routing_logit_scale=1.0, routing_logit_scale_learned=False, routing_orphan=False,
                          attention_logit_scale=1.0)
    assert json.loads(to_json(from_json(json.dumps(saved)))) == json.loads(to_json(config))
    saved["model"]["routing_orphan"] = True
    with pytest.raises(ConfigError, match=r"^W/config.json: model.routing_orphan=True is no longer a setting of "
                                          r"icapsnet_short \(only False is\)"):
        from_json(json.dumps(saved), source="W/config.json")


def _saved(config: ml_collections.ConfigDict, **model_keys) -> str:
    """`config` as a workdir's config.json written when its model's keys were `model_keys`."""
    saved = json.loads(to_json(config))
    saved["model"].update(model_keys)
    return json.dumps(saved)


def test_a_saved_config_with_renamed_keys_is_read_under_their_new_names():
    dilated = load(os.path.join(ROOT, "configs", "dilated_fcn_emoji.py:smoke"))
    old = json.loads(_saved(dilated))
    old["model"]["embedding_dim"] = old["model"].pop("embed_dim")
    assert from_json(json.dumps(old)).model.embed_dim == dilated.model.embed_dim
    assert "embedding_dim" not in from_json(json.dumps(old)).model

    icapsnet = load(os.path.join(ROOT, "configs", "icapsnet_short_ag_news.py:smoke"))
    old = json.loads(_saved(icapsnet))
    old["model"]["dropout_rate"] = old["model"].pop("embedding_dropout") + 0.25
    read = from_json(json.dumps(old)).model
    assert read.embedding_dropout == icapsnet.model.embedding_dropout + 0.25 and "dropout_rate" not in read

    # fastText's dropout_rate was not renamed: it stays.
    fasttext = load(os.path.join(ROOT, "configs", "fasttext_ag_news.py:smoke"))
    assert from_json(_saved(fasttext, dropout_rate=0.25)).model.dropout_rate == 0.25


def test_a_saved_sgm_config_from_before_embedding_dropout_drops_out_its_embeddings_at_its_dropout_rate():
    sgm = load(os.path.join(ROOT, "configs", "sgm_reuters.py:smoke"))
    old = json.loads(_saved(sgm, dropout_rate=0.25, label_embedding_dim=0, embedding_dim=16))
    for key in ("embedding_dropout", "embed_dim", "label_embed_dim"):
        del old["model"][key]
    read = from_json(json.dumps(old))
    model = read.model
    assert (model.embedding_dropout, model.dropout_rate, model.embed_dim, model.label_embed_dim) == (0.25, 0.25, 16, 0)
    # Resuming compares the saved config.json, read the same way, with the config given.
    assert incompatible_keys(upgraded(old), read) == []


@pytest.mark.parametrize("config_file,old,new", [
    ("dilated_fcn_emoji.py:smoke", "embedding_dim", "embed_dim"),
    ("sgm_reuters.py:smoke", "label_embedding_dim", "label_embed_dim"),
    ("icapsnet_short_ag_news.py:smoke", "dropout_rate", "embedding_dropout"),
    ("icapsnet_long_ag_news.py:smoke", "dropout_rate", "embedding_dropout"),
])
def test_a_config_that_sets_a_renamed_key_is_refused_in_one_line_naming_the_new_one(config_file, old, new):
    config = load(os.path.join(ROOT, "configs", config_file))
    config.model[old] = config.model[new]
    del config.model[new]
    with pytest.raises(ConfigError, match=rf"^config\.model\.{old} was renamed model\.{new}$"):
        validate(config, MODELS)
