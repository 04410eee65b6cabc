"""Every text model can be called from its input vectors as well as from token ids: the same
outputs, and gradients that reach each real token and never a PAD."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.data.vocab import BOS, EOS, NUM_SPECIAL
from jcaps.models.cccapsnet import CCCapsNet
from jcaps.models.dilated_fcn import DilatedFCN
from jcaps.models.fasttext import FastText
from jcaps.models.icapsnet import ICapsNetLong, ICapsNetShort
from jcaps.models.sgm import SGM, BinaryRelevance
from jcaps.train.families import MODELS

VOCAB, CLASSES = 30, 3
TOKENS = np.array([[5, 7, 9, 11, 2, 0, 0, 0], [3, 4, 0, 0, 0, 0, 0, 0]], np.int32)
LABEL_SEQUENCE = np.array([[4, 6, 3], [5, 3, 0]], np.int32)  # label ids, EOS (3), PAD

SMALL = {
    "fasttext": lambda: FastText(VOCAB, CLASSES, embed_dim=8, bigram_buckets=16),
    "icapsnet_short": lambda: ICapsNetShort(VOCAB, CLASSES, embed_dim=8, region_dim=8, num_capsules=4, query_dim=8,
                                            primary_dim=8, class_dim=4),
    "icapsnet_long": lambda: ICapsNetLong(VOCAB, CLASSES, embed_dim=8, region_dim=8, num_capsules=4, query_dim=8,
                                          primary_dim=8, class_dim=4, sentence_dim=8),
    "cccapsnet_cwc": lambda: CCCapsNet(VOCAB, CLASSES, embed_dim=8, num_codebooks=2, hidden_dim=8, capsule_dim=4,
                                       class_dim=4),
    "cccapsnet_cc": lambda: CCCapsNet(VOCAB, CLASSES, embedding="cc", embed_dim=8, num_codebooks=2, hidden_dim=8,
                                      capsule_dim=4, class_dim=4),
    "dilated_fcn": lambda: DilatedFCN(VOCAB, CLASSES, embed_dim=4, filters=8, num_layers=2, attention="local8"),
    "br": lambda: BinaryRelevance(VOCAB, CLASSES, embed_dim=8, encoder_dim=4, num_layers=1),
    "sgm": lambda: SGM(
        VOCAB, CLASSES, BOS, EOS, NUM_SPECIAL, embed_dim=8, encoder_dim=4, decoder_dim=8, num_layers=1, max_steps=3
    ),
}


@pytest.mark.parametrize("model_name", sorted(name for name, family in MODELS.items() if family.kind == "text"))
def test_every_text_model_of_the_table_is_here(model_name):
    assert any(name == model_name or name.startswith(f"{model_name}_") for name in SMALL), model_name


def _inputs(name):
    tokens = np.stack([TOKENS[:, :4], TOKENS[:, 4:]], axis=1) if name == "icapsnet_long" else TOKENS
    return (tokens, LABEL_SEQUENCE) if name == "sgm" else (tokens,)


def _score(name, outputs):
    return outputs.step_logits.sum(axis=(1, 2)) if name == "sgm" else outputs.scores.sum(axis=-1)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_embedding_entry_point_gives_the_token_outputs_and_gradients_only_at_real_tokens(name):
    model, inputs = SMALL[name](), _inputs(name)
    variables = model.init(jax.random.key(0), *inputs)
    from_ids = jax.jit(lambda v: model.apply(v, *inputs))(variables)
    embeddings = from_ids.embeddings
    assert embeddings.shape == inputs[0].shape + (embeddings.shape[-1],)
    from_vectors = jax.jit(lambda v, e: model.apply(v, *inputs, embeddings=e))(variables, embeddings)
    chex.assert_trees_all_close(from_vectors, from_ids, rtol=1e-6, atol=1e-6)

    gradient = jax.jit(jax.grad(lambda e: _score(name, model.apply(variables, *inputs, embeddings=e)).sum()))(embeddings)
    per_token = np.linalg.norm(np.asarray(gradient), axis=-1)
    real = inputs[0] > 0
    assert np.all(per_token[~real] == 0), "a PAD position received gradient"
    assert np.all(per_token[real] > 0), "a real token received no gradient"


def test_replacing_one_embedding_changes_the_scores():
    model = FastText(VOCAB, CLASSES, embed_dim=8)
    variables = model.init(jax.random.key(0), TOKENS)
    embeddings = model.apply(variables, TOKENS).embeddings
    moved = embeddings.at[0, 1].add(1.0)
    before, after = model.apply(variables, TOKENS).scores, model.apply(variables, TOKENS, embeddings=moved).scores
    assert not np.allclose(before[0], after[0]) and np.allclose(before[1], after[1])
    # Mean of the two real words' vectors: moving word 2 by 1 moves the mean by 1/5 of it.
    kernel = variables["params"]["Dense_0"]["kernel"]
    np.testing.assert_allclose(after[0] - before[0], jnp.ones(8) @ kernel / 5, rtol=1e-5)
