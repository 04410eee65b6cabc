"""The routing study's iCapsNets variants (studies/icapsnet_global/variants.py): composed from
the library's model through its routing coupling and attention factor, registered in the model
table only when asked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.models.icapsnet import ICapsNetShort
from jcaps.ops.capsules import dynamic_routing, shared_prediction_vectors
from jcaps.train import families
from studies.icapsnet_global import variants
from tests.models.test_icapsnet import SHORT_TOKENS, TINY, _init_apply


def np_leaky_softmax_rows(b):
    """The leaky softmax of one [I, J] logits matrix: a softmax with a zero logit appended to each
    row, that column dropped."""
    extended = np.concatenate([b, np.zeros((b.shape[0], 1))], axis=1)
    e = np.exp(extended - extended.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True))[:, :-1]


def test_leaky_softmax_matches_numpy_and_leaves_a_share():
    b = np.random.default_rng(0).normal(size=(4, 3)) * 20  # large logits: the stable form matters
    np.testing.assert_allclose(variants.leaky_softmax(jnp.asarray(b), axis=-1), np_leaky_softmax_rows(b), rtol=1e-5)
    np.testing.assert_allclose(variants.leaky_softmax(jnp.asarray(b.T), axis=0), np_leaky_softmax_rows(b).T, rtol=1e-5)
    assert np.all(np.sum(variants.leaky_softmax(jnp.zeros((2, 3))), -1) < 1)


def test_routing_knobs_reach_dynamic_routing():
    """The orphan class and the inverse temperature reach the op as its coupling: the variant's
    coupling equals `dynamic_routing` with the leaky softmax of 4 b on its own prediction vectors;
    a learned scale is one scalar parameter, stored as its log, with a gradient."""
    model = variants.StudyICapsNetShort(**TINY, routing="dynamic", routing_logit_scale=4.0,
                                        routing_logit_scale_learned=True, routing_orphan=True)
    params, out = _init_apply(model, SHORT_TOKENS)
    np.testing.assert_allclose(params["params"]["routing_log_scale"], np.log(4.0), rtol=1e-6)
    u_hat = shared_prediction_vectors(out.primary_capsules, params["params"]["class_kernel"],
                                      bias=params["params"]["class_bias"])
    _, expected = dynamic_routing(u_hat, num_iterations=3,
                                  coupling=lambda b, axis: variants.leaky_softmax(4.0 * b, axis=axis))
    np.testing.assert_allclose(out.coupling, expected, rtol=1e-5, atol=1e-6)
    # `route`, the model's routing on given prediction vectors (what analyses call), is the same.
    np.testing.assert_allclose(model.apply(params, u_hat, method="route")[1], expected, rtol=1e-5, atol=1e-6)
    assert np.all(np.sum(out.coupling[:2], -1) < 1)  # the orphan takes a share of every real row

    def score(log_scale):
        tree = {"params": {**params["params"], "routing_log_scale": log_scale}}
        return jnp.sum(model.apply(tree, SHORT_TOKENS).scores)

    assert np.isfinite(jax.grad(score)(params["params"]["routing_log_scale"]))


def test_the_variant_at_the_papers_values_is_the_library_model():
    library = ICapsNetShort(**TINY, routing="dynamic")
    params, expected = _init_apply(library, SHORT_TOKENS)
    out = variants.StudyICapsNetShort(**TINY, routing="dynamic").apply(params, SHORT_TOKENS)
    for field in ("scores", "coupling", "word_attention"):
        np.testing.assert_allclose(getattr(out, field), getattr(expected, field), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("knob", [{"routing_orphan": True}, {"routing_logit_scale": 2.0}])
def test_routing_knobs_need_dynamic_routing(knob):
    with pytest.raises(ValueError, match="dynamic routing only"):
        variants.StudyICapsNetShort(**TINY, routing="kmeans", **knob)


def test_attention_logit_scale_multiplies_the_logits():
    """tau on the attention logits is the same model as queries multiplied by tau (the logits
    are linear in h_i); and it must be positive."""
    params, plain = _init_apply(ICapsNetShort(**TINY), SHORT_TOKENS)
    scaled = variants.StudyICapsNetShort(**TINY, attention_logit_scale=3.0).apply(params, SHORT_TOKENS)
    tree = {"params": {**params["params"], "queries": 3.0 * params["params"]["queries"]}}
    expected = ICapsNetShort(**TINY).apply(tree, SHORT_TOKENS)
    for field in ("word_attention", "scores", "coupling"):
        np.testing.assert_allclose(getattr(scaled, field), getattr(expected, field), rtol=1e-5, atol=1e-6)
    assert not np.allclose(scaled.word_attention, plain.word_attention)
    with pytest.raises(ValueError, match="attention_logit_scale must be positive"):
        variants.StudyICapsNetShort(**TINY, attention_logit_scale=0.0)


def test_register_adds_the_variant_to_the_model_table(monkeypatch):
    monkeypatch.setattr(families, "MODELS", dict(families.MODELS))
    variants.register.cache_clear()
    assert variants.MODEL_NAME not in families.MODELS
    variants.register()
    assert families.MODELS[variants.MODEL_NAME].module is variants.StudyICapsNetShort
    assert families.MODELS[variants.MODEL_NAME].loss is families.MODELS["icapsnet_short"].loss
    variants.register.cache_clear()
