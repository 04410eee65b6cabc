"""How the config keys changed since workdirs were first written, and a saved config read under
today's keys (`upgraded`), so that older workdirs still load: the standard library only, read by
the config (`jcaps.train.config`), the model table (`jcaps.train.families`) and the command line."""

from __future__ import annotations

from jcaps.errors import ConfigError

# Keys added after workdirs were first written, with the value that gives the old behaviour: a
# saved config without one gets it when read, so older workdirs still load.
KEYS_ADDED_LATER = {("data", "group_key"): ""}
# Keys renamed since, {(block, old name): (new name, the models whose configs had the old name)}:
# a saved config of one of those models is read under the new name, so older workdirs evaluate
# and resume; a config or flag that sets the old name is refused naming the new one.
RENAMED_KEYS = {
    ("model", "embedding_dim"): ("embed_dim", ("dilated_fcn", "sgm", "br")),
    ("model", "label_embedding_dim"): ("label_embed_dim", ("sgm",)),
    ("model", "dropout_rate"): ("embedding_dropout", ("icapsnet_short", "icapsnet_long")),
}
# Keys split off another since, {(block, key): (the key that set both, the models)}: a saved
# config of those models without the key takes that key's value, the behaviour it trained with.
KEYS_SPLIT_LATER = {("model", "embedding_dropout"): ("dropout_rate", ("sgm", "br"))}

# Keys that left a model, with the value the model now always has: a saved config holding that
# value reads without the key, so older workdirs still load; any other value trained a model
# that no longer exists here. (iCapsNets' routing-study knobs: studies/icapsnet_global.)
KEYS_REMOVED = {
    ("model", "routing_logit_scale"): 1.0,
    ("model", "routing_logit_scale_learned"): False,
    ("model", "routing_orphan"): False,
    ("model", "attention_logit_scale"): 1.0,
}
MODELS_WITH_REMOVED_KEYS = ("icapsnet_short", "icapsnet_long")


def new_name(block: str, key: str, model_name: str) -> str | None:
    """The name today of `block.key` in the configs of model `model_name`, or None when that
    model's `block.key` was not renamed."""
    new, models = RENAMED_KEYS.get((block, key), (None, ()))
    return new if model_name in models else None


def upgraded(saved: dict, source: str = "config.json") -> dict:
    """A saved config (JSON's dicts, changed in place) under today's keys: renamed keys under
    their new names, split and added keys set to the values it trained with, removed keys dropped
    (a `ConfigError` naming `source` for a removed key at another value than `KEYS_REMOVED`'s)."""
    model = saved.get("model")
    model_name = model.get("name") if isinstance(model, dict) else None
    if isinstance(model, dict) and model_name in MODELS_WITH_REMOVED_KEYS:
        for (_, key), kept in KEYS_REMOVED.items():
            saved_value = model.pop(key, kept)
            if saved_value != kept:
                raise ConfigError(
                    f"{source}: model.{key}={saved_value!r} is no longer a setting of {model_name} "
                    f"(only {kept!r} is): this workdir trained a model jcaps no longer builds"
                )
    for (block, old), (new, models) in RENAMED_KEYS.items():
        keys = saved.get(block)
        if isinstance(keys, dict) and model_name in models and old in keys:
            keys[new] = keys.pop(old)
    for (block, key), (origin, models) in KEYS_SPLIT_LATER.items():
        keys = saved.get(block)
        if isinstance(keys, dict) and model_name in models and origin in keys:
            keys.setdefault(key, keys[origin])
    for (block, key), value in KEYS_ADDED_LATER.items():
        if isinstance(saved.get(block), dict):
            saved[block].setdefault(key, value)
    return saved
