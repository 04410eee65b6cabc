"""Every model of the table returns a `ModelOutput` on a batch of its `:smoke` data: `scores`
[B, J], the fields its kind computes with their documented shapes, None in the others; and the
structure passes through `jax.jit` and `jax.vmap` like an array."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
import pytest

from jcaps.data import vocab
from jcaps.data.datasets import load_dataset
from jcaps.models.outputs import ModelOutput
from jcaps.train.families import MODELS, build_model, get_family
from jcaps.train.steps import model_inputs
from tests.smoke_configs import SMOKE_CONFIGS

CAPSULES = {"primary_capsules", "class_capsules", "coupling"}
ICAPSNET = {"embeddings", "capsule_selection", "word_attention"} | CAPSULES

# (config file, argument) -> the fields set besides `scores`: every model's smoke config, and the
# variants that set other fields.
CASES = {
    SMOKE_CONFIGS["fasttext"]: {"embeddings"},
    SMOKE_CONFIGS["icapsnet_short"]: ICAPSNET,
    SMOKE_CONFIGS["icapsnet_long"]: ICAPSNET | {"sentence_attention"},
    SMOKE_CONFIGS["cccapsnet"]: {"embeddings", "features"} | CAPSULES,
    ("cccapsnet_ag_news.py", "smoke,cwc-linear"): {"embeddings", "features"},
    SMOKE_CONFIGS["input_cell_lstm"]: {"input_attention_logits"},
    ("input_cell_boxes.py", "earlier,lstm_self_attention,smoke"): {"hop_attention"},
    ("input_cell_boxes.py", "earlier,lstm,smoke"): set(),
    SMOKE_CONFIGS["dilated_fcn"]: {"embeddings", "position_logits"},
    ("dilated_fcn_emoji.py", "simplified,smoke"): {"embeddings", "position_logits", "elementwise_attention"},
    ("dilated_fcn_emoji.py", "dot,smoke"): {"embeddings", "position_logits", "head_attention"},
    SMOKE_CONFIGS["br"]: {"embeddings"},
    SMOKE_CONFIGS["sgm"]: {"embeddings", "step_logits", "source_attention"},
}


def test_every_model_is_covered():
    assert {config for config in CASES} >= set(SMOKE_CONFIGS.values())
    assert set(SMOKE_CONFIGS) == set(MODELS)


def _expected_shapes(outputs: ModelOutput, batch: dict, num_classes: int) -> dict:
    """The documented shape of every field that is set, from the batch and the output's own
    sizes (capsule counts and sizes, embedding size, heads, hops)."""
    B, J = len(batch["weight"]), num_classes
    inputs = batch["tokens"] if "tokens" in batch else batch["series"]
    positions = inputs.shape[1:] if "tokens" in batch else inputs.shape[1:2]  # Long: [M, N]
    capsules = outputs.primary_capsules.shape[1] if outputs.primary_capsules is not None else None
    shapes = {
        "scores": (B, J),
        "embeddings": (B, *positions, outputs.embeddings.shape[-1]) if outputs.embeddings is not None else None,
        "features": (B, outputs.features.shape[-1]) if outputs.features is not None else None,
        "primary_capsules": (B, capsules, outputs.primary_capsules.shape[-1]) if capsules else None,
        "class_capsules": (B, J, outputs.class_capsules.shape[-1]) if capsules else None,
        "coupling": (B, capsules, J),
        "capsule_selection": (B, capsules, J),
        "word_attention": (B, capsules, *positions),
        "sentence_attention": (B, capsules, positions[0]),
        "position_logits": (B, *positions, J),
        "elementwise_attention": (B, *positions, outputs.elementwise_attention.shape[-1])
        if outputs.elementwise_attention is not None
        else None,
        "head_attention": (B, outputs.head_attention.shape[1], *positions, *positions)
        if outputs.head_attention is not None
        else None,
        "input_attention_logits": (B, *positions, outputs.input_attention_logits.shape[-1])
        if outputs.input_attention_logits is not None
        else None,
        "hop_attention": (B, outputs.hop_attention.shape[1], *positions) if outputs.hop_attention is not None else None,
    }
    if "label_sequence" in batch:
        steps = batch["label_sequence"].shape[1]
        shapes["step_logits"] = (B, steps, vocab.NUM_SPECIAL + J)
        shapes["source_attention"] = (B, steps, *positions)
    return shapes


@pytest.mark.parametrize("config_name, argument", sorted(CASES))
def test_the_model_returns_its_documented_fields(config_name, argument, cache_dir, config_file):
    config = config_file(config_name, argument, cache_dir)
    dataset = load_dataset(config.data, config.train.seed)
    family = get_family(config.model.name)
    batch = next(dataset.train_iterator(config.train.batch_size, config.train.seed))
    model = build_model(config.model, dataset.model_input_size, dataset.num_classes)
    inputs = model_inputs(batch, family)
    # Jitted: one compilation of the initialisation instead of one for each of its operations.
    params = jax.jit(functools.partial(model.init, train=False))(jax.random.key(0), *inputs)["params"]

    outputs = jax.jit(lambda p, *x: model.apply({"params": p}, *x, train=False))(params, *inputs)

    assert type(outputs) is ModelOutput
    set_fields = {field.name for field in dataclasses.fields(ModelOutput) if getattr(outputs, field.name) is not None}
    assert set_fields == {"scores"} | CASES[config_name, argument]
    expected = _expected_shapes(outputs, batch, dataset.num_classes)
    assert {name: getattr(outputs, name).shape for name in set_fields} == {name: expected[name] for name in set_fields}
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(outputs))


def test_the_output_is_a_pytree_under_vmap():
    """One example at a time under `jax.vmap` gives the batch's output, None fields and all."""
    model = MODELS["fasttext"].module(vocab_size=10, num_classes=3)
    tokens = np.array([[1, 2, 3, 0], [4, 5, 0, 0]], np.int32)
    params = model.init(jax.random.key(0), tokens)["params"]
    batched = model.apply({"params": params}, tokens)
    one_by_one = jax.vmap(lambda row: model.apply({"params": params}, row[None]))(tokens)

    assert type(one_by_one) is ModelOutput and one_by_one.coupling is None
    np.testing.assert_allclose(one_by_one.scores[:, 0], batched.scores, rtol=1e-6)
    np.testing.assert_allclose(one_by_one.embeddings[:, 0], batched.embeddings, rtol=1e-6)
