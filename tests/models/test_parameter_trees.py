"""Parameter trees of the models: the names, nesting and shapes a checkpoint stores.

A workdir trained by an earlier version must still load, so every model's `init` tree is
compared with the one recorded in `parameter_trees.json` (regenerate it with
`python tests/models/test_parameter_trees.py` only when a change to the tree is intended).
"""

import json
import os
import sys
from typing import get_args

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.models.cccapsnet import CCCapsNet
from jcaps.models.choices import InputCellLSTMVariant
from jcaps.models.dilated_fcn import DilatedFCN
from jcaps.models.fasttext import FastText
from jcaps.models.icapsnet import ICapsNetLong, ICapsNetShort
from jcaps.models.input_cell_lstm import InputCellLSTM
from jcaps.models.sgm import SGM, BinaryRelevance
from jcaps.train.families import MODELS as MODEL_TABLE

RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "parameter_trees.json")
TOKENS = np.ones((2, 5), np.int32)
SENTENCES = np.ones((2, 3, 5), np.int32)  # iCapsNets Long reads [B, sentences, words]
SERIES, MASK = np.ones((2, 5, 3), np.float32), np.ones((2, 5), bool)
ICAPSNET_SIZES = {"embed_dim": 8, "region_dim": 8, "num_capsules": 4, "query_dim": 4, "primary_dim": 4, "class_dim": 4}
SGM_SIZES = {"vocab_size": 11, "num_classes": 3, "bos_id": 2, "eos_id": 3, "num_special": 4, "embed_dim": 6,
             "encoder_dim": 4, "decoder_dim": 5}


def _text(model, *extra):
    return model, (TOKENS, *extra)


# name -> (module, its init inputs after the RNG key); a name is a model of the table
# (`jcaps.train.families.MODELS`) or one of its variants, MODEL_VARIANT.
MODELS = {
    "fasttext": _text(FastText(13, 3, embed_dim=8)),
    "fasttext_bigrams": _text(FastText(13, 3, embed_dim=8, bigram_buckets=16)),
    "icapsnet_short": _text(ICapsNetShort(13, 3, **ICAPSNET_SIZES)),
    "icapsnet_long": (ICapsNetLong(13, 3, sentence_dim=6, **ICAPSNET_SIZES), (SENTENCES,)),
    **{
        f"cccapsnet_{embedding}_{classifier}": _text(
            CCCapsNet(13, 3, embedding=embedding, classifier=classifier, embed_dim=8, num_codebooks=2,
                      hidden_dim=8, capsule_dim=4, class_dim=4, num_layers=2)
        )
        for embedding in ("normal", "cwc", "cc")
        for classifier in ("capsule", "linear")
    },
    "sgm": _text(SGM(**SGM_SIZES), np.full((2, 4), 3, np.int32)),
    "sgm_global_embedding": _text(SGM(**SGM_SIZES, global_embedding=True), np.full((2, 4), 3, np.int32)),
    "br": _text(BinaryRelevance(11, 3, embed_dim=6, encoder_dim=4)),
    **{
        f"input_cell_lstm_{variant}": (InputCellLSTM(2, variant), (SERIES, MASK))
        for variant in get_args(InputCellLSTMVariant)
    },
    **{
        f"dilated_fcn_{attention}": _text(DilatedFCN(7, 3, filters=8, num_layers=2, attention=attention))
        for attention in ("none", "dot8", "local8", "simplified")
    },
}


def parameter_tree(name: str) -> dict[str, list[int]]:
    """'module/.../param' -> shape, of `MODELS[name]`'s init (shapes only, nothing computed)."""
    model, inputs = MODELS[name]
    shapes = jax.eval_shape(model.init, jax.random.key(0), *inputs)
    leaves = jax.tree_util.tree_leaves_with_path(shapes)
    return {"/".join(key.key for key in path): list(leaf.shape) for path, leaf in leaves}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_parameter_tree_is_the_recorded_one(name):
    with open(RECORDED) as file:
        recorded = json.load(file)
    assert parameter_tree(name) == recorded[name]


@pytest.mark.parametrize("model_name", sorted(MODEL_TABLE))
def test_every_model_of_the_table_has_a_recorded_tree(model_name):
    assert any(name == model_name or name.startswith(f"{model_name}_") for name in MODELS), model_name


def test_parameters_are_float32():
    model, inputs = MODELS["sgm_global_embedding"]
    shapes = jax.eval_shape(model.init, jax.random.key(0), *inputs)
    assert {leaf.dtype for leaf in jax.tree.leaves(shapes)} == {jnp.dtype(jnp.float32)}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(f"usage: python {sys.argv[0]} (rewrites {RECORDED})")
    # One line per parameter, so that a diff shows which ones changed.
    models = [
        f'"{name}": {{\n' + ",\n".join(f'  "{path}": {shape}' for path, shape in sorted(parameter_tree(name).items()))
        for name in sorted(MODELS)
    ]
    with open(RECORDED, "w") as file:
        file.write("{\n" + "\n},\n".join(models) + "\n}\n}\n")
