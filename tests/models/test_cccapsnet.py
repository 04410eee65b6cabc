"""CCCapsNet: published parameter counts, forward-pass invariants, smoke runs (its loss and
probabilities: tests/train/test_families.py; its optimiser: tests/train/test_optim.py)."""

import os

import chex
import jax
import numpy as np
import pytest

from jcaps.models.cccapsnet import CCCapsNet, count_parameters
from jcaps.ops.pooling import masked_mean_over_time
from jcaps.ops.recurrent import bidirectional_gru
from jcaps.train.config import load
from jcaps.train.families import cccapsnet_probabilities
from jcaps.train.loop import train_and_evaluate

CONFIG = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs", "cccapsnet_ag_news.py"
)

# Hidden 8: 2 feature capsules of size 4 into J = 3 class capsules; V = 13 with M = 2 gives K = 4.
TINY = {
    "vocab_size": 13,
    "num_classes": 3,
    "embed_dim": 8,
    "num_codebooks": 2,
    "hidden_dim": 8,
    "capsule_dim": 4,
    "class_dim": 4,
}
TOKENS = np.array([[3, 4, 5, 6, 7, 8], [9, 2, 11, 0, 0, 0], [12, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], np.int32)
B, J, I = 4, 3, 2


def load_config(arg=""):
    return load(f"{CONFIG}:{arg}")


def _key(seed):
    # XLA's RngBitGenerator compiles about ten times faster than threefry on CPU.
    return jax.random.key(seed, impl="rbg")


def _run(model):
    params = jax.jit(model.init)(_key(0), TOKENS)
    return params, jax.jit(model.apply)(params, TOKENS)


@pytest.fixture(scope="module")
def capsule_run():
    model = CCCapsNet(**TINY)
    return (model, *_run(model))


# --- parameter counts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "embedding,classifier,published",
    [
        ("normal", "linear", 4_448_192),
        ("cwc", "linear", 2_449_120),
        ("normal", "capsule", 4_455_872),
        ("cwc", "capsule", 2_456_800),
        ("cc", "capsule", 2_456_800),  # same tables as CWC
    ],
)
def test_published_parameter_counts_for_ag_news(embedding, classifier, published):
    assert count_parameters(62_535, 4, embedding=embedding, classifier=classifier) == published


def test_parameter_counts_of_the_knobs():
    base = count_parameters(62_535, 4)
    # K + 1 = 5 codewords: V M + M D more parameters (8 codebooks, 64-dimensional codewords).
    assert count_parameters(62_535, 4, extra_codewords=1) == base + 62_535 * 8 + 8 * 64
    # One W[j] (16 x 8) per class instead of one per (feature capsule, class) pair.
    assert count_parameters(62_535, 4, shared_transform=True) == base - 4 * 16 * 16 * 8 + 4 * 16 * 8


# --- forward pass -------------------------------------------------------------------------------


def test_capsule_outputs(capsule_run):
    _, _, out = capsule_run
    chex.assert_shape(out.scores, (B, J))
    chex.assert_shape(out.class_capsules, (B, J, 4))
    chex.assert_shape(out.primary_capsules, (B, I, 4))
    chex.assert_shape(out.coupling, (B, I, J))
    chex.assert_shape(out.features, (B, 8))
    chex.assert_tree_all_finite(out)
    scores = np.asarray(out.scores)
    assert np.all(scores >= 0) and np.all(scores < 1)
    np.testing.assert_allclose(scores, np.linalg.norm(out.class_capsules, axis=-1), rtol=1e-6)
    np.testing.assert_allclose(np.sum(out.coupling, axis=-1), 1.0, rtol=1e-6)
    # The fully padded example has no features and zero-length class capsules.
    np.testing.assert_array_equal(out.features[3], 0.0)
    np.testing.assert_array_equal(out.scores[3], 0.0)


@jax.jit
def _encode_with_ops(p, x, mask):
    """The encoder written out with the ops: [B, T, D] embeddings -> [B, H] features."""
    weights = [
        [p["encoder"][f"layer_{i}"][k] for k in ("input_kernel", "input_bias", "hidden_kernel", "hidden_bias")]
        for i in range(2)
    ]
    first = bidirectional_gru(x, *weights[0], mask=mask)
    # Layer 2 reads both directions concatenated (forward first); the output sums them.
    second = bidirectional_gru(first.reshape(first.shape[:2] + (-1,)), *weights[1], mask=mask)
    return masked_mean_over_time(second[:, :, 0] + second[:, :, 1], mask=mask)


def test_features_are_the_masked_mean_of_summed_directions(capsule_run):
    _, params, out = capsule_run
    p = params["params"]
    logits = np.asarray(p["embedding"]["code_logits"])[TOKENS]
    weights = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    x = np.einsum("btmk,mkd->btd", weights, p["embedding"]["codebooks"]).astype(np.float32)
    expected = _encode_with_ops(p, x, TOKENS != 0)
    np.testing.assert_allclose(out.features, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.primary_capsules, np.reshape(expected, (B, I, 4)), rtol=1e-5, atol=1e-6)


def test_extra_padding_changes_nothing(capsule_run):
    model, params, out = capsule_run
    padded = jax.jit(model.apply)(params, np.pad(TOKENS, ((0, 0), (0, 5))))
    for field in ("scores", "class_capsules", "coupling", "features"):
        np.testing.assert_allclose(getattr(padded, field), getattr(out, field), rtol=1e-5, atol=1e-6, err_msg=field)


def test_reference_padding_reads_pads_as_words(capsule_run):
    _, params, out = capsule_run
    reference = jax.jit(CCCapsNet(**TINY, reference_padding=True).apply)(params, TOKENS)
    # Example 0 has no padding: both readings agree; the padded ones differ.
    np.testing.assert_allclose(reference.scores[0], out.scores[0], rtol=1e-5, atol=1e-6)
    difference = np.abs(np.asarray(reference.features) - np.asarray(out.features)).max(-1)
    assert np.all(difference[1:] > 1e-4)


def test_cc_linear_model():
    # Compositional coding: deterministic at evaluation, sampled in training; linear logits.
    model = CCCapsNet(**TINY, embedding="cc", classifier="linear", dropout_rate=0.0)
    params, out = _run(model)
    assert out.class_capsules is None and out.coupling is None and out.primary_capsules is None
    assert set(params["params"]["classifier"]) == {"kernel"}  # no bias
    np.testing.assert_allclose(out.scores, out.features @ params["params"]["classifier"]["kernel"], rtol=1e-5)
    np.testing.assert_allclose(np.sum(cccapsnet_probabilities(out), -1), 1.0, rtol=1e-6)
    again = jax.jit(model.apply)(params, TOKENS)
    np.testing.assert_array_equal(out.scores, again.scores)
    train = jax.jit(jax.vmap(lambda k: model.apply(params, TOKENS, train=True, rngs={"dropout": k}).scores))
    first, second = train(jax.random.split(_key(1)))
    assert not np.allclose(first, second)


def test_rejects_unknown_settings():
    with pytest.raises(ValueError, match="routing"):
        CCCapsNet(**TINY, routing="em")
    with pytest.raises(ValueError, match="capsule_dim"):
        CCCapsNet(**{**TINY, "capsule_dim": 3})


# --- configs and smoke training -----------------------------------------------------------------


def test_config_arguments_combine_and_are_checked():
    config = load_config("smoke,cc-capsule,iter5,k+2")
    assert (config.model.embedding, config.model.classifier) == ("cc", "capsule")
    assert config.model.routing_iterations == 5 and config.model.extra_codewords == 2
    assert config.data.source == "synthetic"
    with pytest.raises(ValueError, match="iter7"):
        load_config("iter7")


@pytest.fixture
def rbg_keys():
    """The loop's keys as RngBitGenerator keys: its init compiles about four times faster."""
    previous = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", "rbg")
    yield
    jax.config.update("jax_default_prng_impl", previous)


# One run per ablation family: embedding x classifier, routing, iterations (with K + 2).
@pytest.mark.slow
@pytest.mark.parametrize("family", ["normal-linear", "cc-capsule,dynamic", "iter1,k+2"])
def test_smoke_training_runs(family, cache_dir, tmp_path, rbg_keys):
    config = load_config("smoke," + family)
    config.data.cache_dir = str(cache_dir)
    config.train.num_steps = 6
    config.train.progress = "none"
    final = train_and_evaluate(config, str(tmp_path))
    assert set(final) == {"validation", "test"}
    assert np.isfinite(final["test"]["loss"])
    assert os.path.isdir(tmp_path / "checkpoints" / "6")
