"""Every model's explanation hooks (`jcaps.interpret.hooks`), and a model added to the
tables explained without any other change."""

import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import struct

from jcaps.interpret import explain
from jcaps.interpret.hooks import MODEL_HOOKS, KIND_HOOKS, ModelHooks, hooks_of
from jcaps.models.outputs import ModelOutput
from jcaps.train.families import MODELS, ModelFamily, softmax_cross_entropy, softmax_probabilities


def test_every_model_of_the_training_table_has_its_explanation_and_no_other():
    assert set(MODEL_HOOKS) <= set(MODELS)
    for name, family in MODELS.items():
        hooks = hooks_of(name)
        assert isinstance(hooks, ModelHooks), name
        for hook in (hooks.vectors, hooks.apply_to_vectors, hooks.positions, hooks.explained_outputs,
                     hooks.chosen_outputs):
            assert callable(hook), name
        assert hooks.removals and all(isinstance(removal, str) for removal, _ in hooks.removals), name
        assert hooks.native in (None, *explain.NATIVE_METHODS), name
        assert (hooks.native == "attention") == callable(hooks.attention), name
        # A family that generates its labels says what the probability of a generated label is.
        assert family.probabilities is not None or callable(hooks.probabilities), name
        model_config = ml_collections.ConfigDict({"name": name})
        assert explain.model_methods(model_config)[-1] == "random" and explain.native_note(model_config, methods=explain.model_methods(model_config)), name


def test_the_interpretation_names_no_model_outside_its_table():
    """What differs between models is in their `ModelHooks`: no module of jcaps.interpret but
    the table of explanations holds a model name as a string."""
    import ast
    import pathlib

    import jcaps.interpret

    for path in pathlib.Path(jcaps.interpret.__file__).parent.glob("*.py"):
        if path.name == "hooks.py":
            continue
        strings = {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        assert not strings & set(MODELS), (path.name, strings & set(MODELS))


@struct.dataclass
class AttendedMeanOutput(ModelOutput):
    """A new model's own intermediates extend the output: here its attention [B, T]."""

    attention: jax.Array | None = None


class AttendedMean(nn.Module):
    """A model no jcaps module knows: the attention-weighted mean of its word vectors, classified."""

    num_classes: int = 3

    @nn.compact
    def __call__(self, tokens, *, train=False, embeddings=None):
        del train
        words = nn.Embed(20, 4)(tokens) if embeddings is None else embeddings
        logits = jnp.where(tokens > 0, nn.Dense(1)(words)[..., 0], -1e9)
        attention = jax.nn.softmax(logits, axis=-1)
        pooled = jnp.einsum("bt,btd->bd", attention, words)
        return AttendedMeanOutput(scores=nn.Dense(self.num_classes)(pooled), embeddings=words, attention=attention)


def attention_weights(outputs, x, side, targets):
    del x, side, targets
    return outputs.attention


def test_a_model_registered_in_the_tables_is_explained(monkeypatch):
    """A new model is one entry in each table: jcaps.interpret explains it by every method, its own
    attention among them, with faithfulness."""
    family = ModelFamily(AttendedMean, softmax_cross_entropy, softmax_probabilities)
    monkeypatch.setitem(MODELS, "attended_mean", family)
    monkeypatch.setitem(MODEL_HOOKS, "attended_mean", ModelHooks(native="attention", attention=attention_weights))
    model = AttendedMean()
    tokens = np.array([[3, 5, 7, 9, 0, 0], [4, 2, 0, 0, 0, 0]], np.int32)
    params = model.init(jax.random.key(0), tokens)["params"]
    trained = types.SimpleNamespace(
        config=ml_collections.ConfigDict({"model": {"name": "attended_mean"}}), family=family, model=model,
        params=params, dataset=types.SimpleNamespace(labels=types.SimpleNamespace(names=["a", "b", "c"])),
        parameters="final", selected_step=0,
    )
    options = explain.Options(ig_steps=8, smoothgrad_samples=2, shap_samples=8, shapley_permutations=2,
                              lime_samples=8, sampling_chunk=4)
    explainer = explain.Explainer(trained, options)
    assert "attention" in explainer.methods and set(explain.offered_methods(trained.config.model)) == set(
        explainer.methods)
    explained = explainer.explain({"tokens": tokens, "weight": np.ones(2)}, explainer.methods, with_faithfulness=True)

    outputs = model.apply({"params": params}, tokens)
    np.testing.assert_array_equal(explained.target, np.argmax(outputs.scores, axis=-1))
    np.testing.assert_array_equal(explained.mask, tokens > 0)
    np.testing.assert_allclose(explained.scores["attention"], outputs.attention, rtol=1e-6, atol=1e-7)
    for method, scores in explained.scores.items():
        assert scores.shape == tokens.shape and np.all(np.isfinite(scores)), method
        assert np.all(scores[tokens == 0] == 0), method
        assert all(np.all(np.isfinite(values)) for values in explained.faithfulness[method].values()), method
    assert explain.native_note(trained.config.model, methods=()).startswith("attention:")


def test_a_model_without_an_entry_is_explained_as_its_kind(monkeypatch):
    monkeypatch.setitem(MODELS, "attended_mean", ModelFamily(AttendedMean, softmax_cross_entropy,
                                                             softmax_probabilities))
    assert hooks_of("attended_mean") is KIND_HOOKS["text"]
    monkeypatch.setitem(MODELS, "attended_mean", ModelFamily(AttendedMean, softmax_cross_entropy,
                                                             softmax_probabilities, kind="series"))
    assert hooks_of("attended_mean") is KIND_HOOKS["series"]
    assert hooks_of("input_cell_lstm").vectors is KIND_HOOKS["series"].vectors
    with pytest.raises(ValueError, match="unknown model.name 'no_such_model'"):
        hooks_of("no_such_model")


def test_a_kind_is_text_or_series():
    with pytest.raises(ValueError, match="kind must be one of text, series, not 'image'"):
        ModelFamily(AttendedMean, softmax_cross_entropy, softmax_probabilities, kind="image")
    assert MODELS["input_cell_lstm"].inputs == ("series", "mask") and MODELS["sgm"].inputs == ("tokens", "label_sequence")
